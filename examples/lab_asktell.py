"""A lab's ask/tell loop: fetch the inputs lwl wants labelled, "measure" them, send the labels.

    lwl serve &                                   # or a deployed service (set LWL_URL/LWL_API_KEY)
    python examples/lab_asktell.py examples/friedman1_asktell.json

Here the "measurement" is the Friedman-1 function; a real lab would start simulations or
experiments for each row of ``inputs`` and come back minutes or days later: the job waits in
``awaiting_labels`` for as long as it takes, across restarts of the service.
"""

import json
import os
import sys
import time

import numpy as np

from lwl.client import Client
from lwl.oracles import make_oracle


def measure(inputs: np.ndarray) -> np.ndarray:
    """Stand-in for the lab: one scalar label per input row, in order; NaN where the
    measurement failed (here never; a failed point is told as such, not retried)."""
    return make_oracle({"name": "friedman1"}).label(inputs)


def main(spec_path: str) -> None:
    with Client(os.environ.get("LWL_URL", "http://127.0.0.1:8000"), os.environ.get("LWL_API_KEY")) as lwl:
        job = lwl.submit(json.load(open(spec_path)), idempotency_key=f"lab-demo-{spec_path}")
        print("job", job)
        while True:
            batch = lwl.ask(job)  # (batch_id, inputs) or None
            if batch is None:
                status = lwl.job(job)
                if status["status"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.5)  # the job is running between rounds
                continue
            batch_id, inputs = batch
            labels = measure(inputs)
            answer = lwl.tell(job, batch_id, labels, failed=np.flatnonzero(np.isnan(labels)))
            print(f"told {batch_id}: {len(labels)} labels, {answer['pending_batches']} pending, job {answer['status']}")
        print(status["status"], "— optimised distribution:", json.dumps(lwl.distribution(job))[:200], "...")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/friedman1_asktell.json")
