"""examples/friedman1_budget.json run as a lab would run it (issue #30, docs/method.md "Designs for
a label budget"): an ask/tell job on the embedded service (``lwl serve`` in a subprocess) whose
labels a client computes with the Friedman-1 function, one batch at a time, for 5 seeds.

For each seed it reports the labels the client computed (its own count), the rounds it was asked
for, and an independent judgement of the returned training set: a numpy/scipy KRR (kernel
exp(-r^2 / l^2), l = 3 as in the spec, ridge 1e-3: not lwl's model code) trained on the training
set and on 2,000 fresh samples of Q's mixture (Q's two Gaussians, drawn exactly; 5 draws),
scored on 4,000 fresh samples per member of Q; better / tie / worse from
:func:`lwl.evaluation.comparison.compare` over the mixture's draws and the test points.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/friedman1_budget_asktell.py [SEEDS]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.spatial.distance import cdist

from lwl.client import Client
from lwl.evaluation.comparison import compare
from lwl.oracles import make_oracle
from service.processes import Server

ROOT = Path(__file__).resolve().parents[1]
FRIEDMAN = make_oracle({"name": "friedman1"})
MEANS = [np.zeros(5), np.array([1.0, 0, 1, 0, 1])]
COVS = [2.0 * np.eye(5), np.eye(5)]
LENGTHSCALE, RIDGE, DRAWS, TEST = 3.0, 1e-3, 5, 4000


def q_mixture(n: int, rng) -> np.ndarray:
    """n samples of Q's mixture (equal weights), drawn from the members themselves."""
    k = rng.integers(0, 2, n)
    return np.stack([rng.multivariate_normal(MEANS[j], COVS[j]) for j in k])


def sq_errors(x, y, test_x, test_y) -> np.ndarray:
    gram = np.exp(-cdist(x, x, "sqeuclidean") / LENGTHSCALE**2) + RIDGE * np.eye(len(x))
    coef = cho_solve(cho_factor(gram), y)
    pred = np.exp(-cdist(test_x, x, "sqeuclidean") / LENGTHSCALE**2) @ coef
    return (pred - test_y) ** 2


def main() -> None:
    seeds = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [0, 1, 2, 3, 4]
    base = json.loads((ROOT / "examples" / "friedman1_budget.json").read_text())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp) / "data").start()
        try:
            with Client(srv.url) as c:
                for seed in seeds:
                    spec = {**base, "seed": seed}
                    t0 = time.perf_counter()
                    job = c.submit(spec)
                    labelled, rounds = 0, set()

                    def lab(x, _count=[0]):
                        nonlocal labelled
                        labelled += len(x)
                        return FRIEDMAN.label(x)

                    while True:  # the lab's loop: ask, measure, tell, until the job ends
                        batch = c.ask(job)
                        if batch is not None:
                            rounds.add(batch[0].split(".")[0])
                            c.tell(job, batch[0], lab(batch[1]))
                            continue
                        doc = c.job(job)
                        if doc["status"] in ("succeeded", "failed", "cancelled"):
                            break
                        time.sleep(0.05)
                    assert doc["status"] == "succeeded", doc
                    X, y = c.training_set(job)
                    result = c.result(job)
                    seconds = time.perf_counter() - t0
                    rng = np.random.default_rng([seed, 4242])
                    test_x = np.concatenate([rng.multivariate_normal(m, C, TEST) for m, C in zip(MEANS, COVS)])
                    test_y = FRIEDMAN.label(test_x)
                    design = sq_errors(X, y, test_x, test_y)
                    mix = np.stack([sq_errors(x, FRIEDMAN.label(x), test_x, test_y)
                                    for x in (q_mixture(len(y), rng) for _ in range(DRAWS))])
                    cmp = compare(np.repeat(design[None], DRAWS, 0), mix, test_y**2, [TEST, TEST], [0.5, 0.5])
                    row = {"seed": seed, "labels_client": labelled, "labels_used": result["labels_used"],
                           "budget": spec["budget"], "rounds": len(rounds), "selected": result["selected"]["candidate"],
                           "err_training_set": cmp.err, "err_q_mixture": cmp.other_err, "ratio": cmp.ratio,
                           "ratio_interval": cmp.ratio_interval, "outcome": cmp.outcome.value,
                           # the job's own verdict, from the labels it paid for (no held-out label)
                           "job_verdict": result["verdict"]["outcome"], "job_verdict_z": result["verdict"]["z"],
                           "seconds": round(seconds, 1)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            srv.stop()
    wins = sum(r["outcome"] == "better" for r in rows)
    print(f"training set better than {rows[0]['labels_used']} Q-mixture samples beyond noise on {wins}/{len(rows)} "
          f"seeds; labels <= budget on all: {all(r['labels_client'] == r['labels_used'] <= r['budget'] for r in rows)}; "
          f"rounds <= 20 on all: {all(r['rounds'] <= 20 for r in rows)}; the job's own validation verdict: "
          f"{', '.join(r['job_verdict'] for r in rows)}")


if __name__ == "__main__":
    main()
