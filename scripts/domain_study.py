"""Designs restricted to an input domain against free ones (docs/method/families.md "Input domains").

Friedman 1 on its natural domain [0, 1]^5, Q = two regimes at the box's faces (one member near
x_0 = 0, one near the corner (1, ..., 1), clipped into the box by the user). For the gaussian
and auto families, with and without ``domain``: the share of every input the oracle was asked
for (design, checks, evaluation, bound) that lies outside the box, the held-out Err of the
design and of the baselines, and the verdict. One line of JSON per run.

    OPENBLAS_NUM_THREADS=1 python scripts/domain_study.py
"""
import json, time, numpy as np
from lwl import run_job
from lwl.spec import parse_job_spec
from lwl.domain import Domain

class Recording:
    def __init__(self, o): self.o, self.asked = o, []
    def __getattr__(self, n): return getattr(self.o, n)
    def label(self, x): self.asked.append(np.array(x)); return self.o.label(x)

D = 5
rng = np.random.default_rng(0)
edge = rng.uniform(0, 1, (1500, D)); edge[:, 0] *= 0.1   # near the face x0 = 0
corner = np.clip(rng.normal(0.85, 0.08, (1500, D)), 0, 1)  # near the corner (1,...,1), clipped by the user
base = {"oracle": {"name": "friedman1"},
        "test_distributions": {"members": [{"samples": edge.tolist()}, {"samples": corner.tolist()}],
                               "validation_per_member": 500},
        "algorithm": {"name": "bilevel", "iterations": 150},
        "evaluation": {"train_size": 256, "draws": 5}, "seed": 0, "device": "cpu"}
box = Domain([0] * D, [1] * D)
for family in ("gaussian", "auto"):
    for dom in (False, True):
        doc = json.loads(json.dumps(base)); doc["family"] = {"name": family}
        if dom: doc["domain"] = {"low": [0.0] * D, "high": [1.0] * D}
        spec = parse_job_spec(doc)
        o = Recording(spec.oracle.build())
        t = time.time(); r = run_job(spec, oracle=o); t = time.time() - t
        X = np.concatenate(o.asked)
        v = r["verdict"]
        print(json.dumps({"family": family, "domain": dom, "seconds": round(t, 1), "labels": len(X),
                          "outside_share": round(float(1 - box.contains(X).mean()), 4),
                          "err": round(v["err"], 4), "baselines": {k: round(e, 4) for k, e in v["baselines"].items()},
                          "outcome": v["outcome"], "best": v["best_baseline"], "dist": r["distribution"]["family"]}), flush=True)
