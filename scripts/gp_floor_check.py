"""The Err floor a served GP reports (lwl.models.gp_diagnosis) against its held-out Err: Friedman 1
on a wide and a narrow Gaussian law and a smooth function (a GP fitted to n points of the law), and
examples/friedman1_budget.json run with the built-in oracle (the served GP of the job). The table of
docs/method/gp-diagnosis.md, "What the served GP says about the problem".

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python scripts/gp_floor_check.py [--example-seeds 0,2]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lwl.models import from_spec
from lwl.models.gp import GaussianProcess
from lwl.models.gp_diagnosis import diagnose
from lwl.oracles import make_oracle
from lwl.runner import run_job

ROOT = Path(__file__).resolve().parent.parent


def friedman1(x: np.ndarray) -> np.ndarray:
    """lwl's friedman1 oracle (inputs beyond the fifth unused)."""
    return np.asarray(make_oracle({"name": "friedman1"}).label(x))


def smooth(x: np.ndarray) -> np.ndarray:
    return np.sin(x[:, 0]) + 0.5 * np.cos(x[:, 1]) + x[:, 2] ** 2 / 4


def err(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - y) ** 2) / np.mean(y ** 2)))


def laws() -> None:
    rng = np.random.default_rng(0)
    for name, f, sd in [("friedman1, x ~ N(0.5, 4 I)", friedman1, 2.0), ("friedman1, x ~ N(0.5, 0.09 I)", friedman1, 0.3),
                        ("smooth, x ~ N(0.5, I)", smooth, 1.0)]:
        for n in (500, 1500):
            X, Xt = rng.normal(0.5, sd, (n, 6)), rng.normal(0.5, sd, (3000, 6))
            gp = GaussianProcess(random_state=0).fit(X, f(X))
            (d,) = diagnose(gp.noise_, f(Xt))  # E_Q y^2 on points of the law
            print(f"{name:32s} n={n:5d}  err_floor {d.err_floor:.4g}  held-out Err {err(gp.predict(Xt), f(Xt)):.4g}",
                  flush=True)


def example(seed: int) -> None:
    spec = json.loads((ROOT / "examples/friedman1_budget.json").read_text())
    spec.update(oracle={"name": "friedman1"}, evaluation={"enabled": False}, seed=seed)
    res = run_job(spec)
    gp = from_spec(res["model"] | {"training_set": res["training_set"]})
    oracle = make_oracle({"name": "friedman1"})
    rng = np.random.default_rng(123)
    num = den = 0.0
    for mean, var in (([0, 0, 0, 0, 0], 2.0), ([1, 0, 1, 0, 1], 1.0)):  # Q's members, equally weighted
        x = rng.multivariate_normal(mean, var * np.eye(5), 20000)
        y = np.asarray(oracle.label(x))
        num, den = num + 0.5 * np.mean((gp.predict(x) - y) ** 2), den + 0.5 * np.mean(y ** 2)
    (out,) = res["model_diagnosis"]["outputs"]
    print(f"friedman1_budget.json seed {seed}: err_floor {out['err_floor']:.4g}  held-out Err {np.sqrt(num / den):.4g}"
          f"  warned: {any('unresolved' in w for w in res['warnings'])}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example-seeds", default="0,2")
    args = ap.parse_args()
    laws()
    for s in args.example_seeds.split(","):
        example(int(s))
