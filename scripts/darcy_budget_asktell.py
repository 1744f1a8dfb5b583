"""The Darcy problem (examples/darcy_ama.json) with a budget of 500 solves, run as a lab would run
it (issue #47): an ask/tell job on the embedded service (``lwl serve`` in a subprocess) whose
solves a client computes with lwl's Darcy solver, one batch at a time.

For each seed: the solves the client computed (its own count) against the job's ``labels_used``
and the budget; then the job's training set (``Client.training_set``: input fields and solution
fields) judged at equal solves (:func:`lwl.evaluation.equal_solves.equal_solves`: the DeepONet on
it against the same DeepONet on as many solves of Q's law and of the initial distribution, 3
training draws each, Q's held-out fields), beside the job's own validation verdict.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/darcy_budget_asktell.py [SEEDS] [BUDGET]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lwl.client import Client
from lwl.design.budgeted_ama import BudgetedAMA
from lwl.evaluation.equal_solves import equal_solves
from lwl.oracles import make_oracle
from lwl.spec import parse_job_spec
from service.processes import Server

ROOT = Path(__file__).resolve().parents[1]
DARCY = make_oracle({"name": "darcy"})


class Lab:
    """Solves with lwl's Darcy solver and counts every input it was asked to solve."""

    def __init__(self):
        self.solved = 0

    def __call__(self, x):
        self.solved += len(x)
        return DARCY.label(x)


def main() -> None:
    seeds = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [0]
    budget = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    base = json.loads((ROOT / "examples" / "darcy_ama.json").read_text())
    base["model"]["iterations"] = 300
    for m in base["test_distributions"]["members"]:
        m["size"] = base["test_distributions"]["validation_per_member"] + 500
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp) / "data").start()
        try:
            with Client(srv.url) as c:
                for seed in seeds:
                    spec = {**base, "seed": seed, "budget": budget, "oracle": {"name": "external", "batch_size": 100}}
                    t0 = time.perf_counter()
                    job, lab = c.submit(spec), Lab()
                    assert c.label_loop(job, lab, poll=0.05)["status"] == "succeeded"
                    solved = lab.solved
                    seconds = time.perf_counter() - t0
                    X, Y = c.training_set(job)
                    result = c.result(job)
                    # the audit offline, with lwl's solver (the lab's labels are not needed for it)
                    offline = parse_job_spec({**spec, "oracle": {"name": "darcy"}})
                    stepper = BudgetedAMA.from_spec(offline, DARCY)
                    # the comparators get every solve the job paid for, those it left out of its DeepONet too
                    held = len(Y) + len(result["left_out"]["labels"])
                    ev = equal_solves(stepper, np.asarray(X), np.asarray(Y), DARCY, labels=held)
                    row = {"seed": seed, "budget": budget, "solves_client": solved, "labels_used": result["labels_used"],
                           "rounds": result["rounds"], "training_set_shape": [list(np.shape(X)), list(np.shape(Y))], "left_out": held - len(Y),
                           "selected": result["selected"]["candidate"], "err": ev["err"]["optimized"],
                           "err_interval": ev["err_interval"]["optimized"],
                           "vs": {k: {"err": v["other_err"], "outcome": v["outcome"], "ratio": v["ratio"]}
                                  for k, v in ev["comparisons"].items()},
                           "job_verdict": result["verdict"]["outcome"], "job_verdict_z": result["verdict"]["z"],
                           "seconds": round(seconds, 1)}
                    print(json.dumps(row), flush=True)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
