"""Budgeted gp jobs on engineering test functions that no lwl study tunes on (issue #46, "problems
that nobody on the team sees"), judged as a lab would judge them: the served model against Q's
mixture + scikit-learn's fitted ARD GP at equal labels.

Functions (Surjanovic & Bingham's Virtual Library of Simulation Experiments, formulas written
here from the published definitions): borehole (d 8), OTL circuit (d 6), piston (d 7), wing
weight (d 10), Welch et al. (1992) screening function (d 20), and a smooth function of 30
inputs written here (``smooth30``). Each reads u in [0, 1]^d, mapped
linearly onto the function's physical ranges (Welch: [-0.5, 0.5]^20), so the job's ``domain`` is
the unit cube (``outside: clip``). Q: K rotated anisotropic Gaussians in u (means in
[0.3, 0.7]^d, standard deviations 0.04-0.12 along random axes, ``--spread``), drawn from the script's own
seed; the job sees 2,500 samples per member (250 for validation), labelled by the client
(``external`` oracle) through :func:`lwl.runner.run_job`.

Judge, for each problem: 3,000 fresh held-out points per member (the same Gaussians, clipped to
the cube), relative Err weighted by Q's members;

- **served**: ``lwl.models.from_spec(model_document(result))`` (what ``GET /model`` serves);
- **Q's mixture + scikit-learn GP**: as many fresh samples of Q's mixture as the job used labels,
  ``DRAWS`` draws, scikit-learn's ``GaussianProcessRegressor`` (ConstantKernel x ARD RBF +
  WhiteKernel at its default bounds, ``normalize_y``, marginal likelihood with 2 restarts on 600
  of the points, then conditioned on all of them): what a lab already has;
- **Q's mixture + lwl's GP**: the same draws with the job's own GP block (the data's share);
- **the training set + scikit-learn GP** (the data's share under the lab's own GP).

better / tie / worse from :func:`lwl.evaluation.comparison.compare` over the draws and the test
points. The job's own validation verdict (no held-out label) is printed beside.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/independent_gp_check.py [NAMES] [--budget B] [--seed S] [--spread LO,HI] [--explore X]
       OPENBLAS_NUM_THREADS=1 python scripts/independent_gp_check.py --fresh PART/PARTS[/GENERATOR] [--budget B]
(``--fresh``: the sixteen problems of the issue's kind of scripts/independent_check.py, see run_fresh)
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings

import numpy as np

from lwl.evaluation.comparison import compare
from lwl.models import from_spec, model_document, train
from lwl.oracles.base import Oracle
from lwl.runner import run_job
from lwl.spec import parse_job_spec

DRAWS, TEST, SIZE, VALIDATION, FIT_POINTS = 3, 3000, 2500, 250, 600


def _scale(u: np.ndarray, box) -> list[np.ndarray]:
    lo, hi = np.asarray(box, dtype=np.float64).T
    x = lo + np.asarray(u, dtype=np.float64) * (hi - lo)
    return [x[:, j] for j in range(x.shape[1])]


def borehole(u):
    rw, r, Tu, Hu, Tl, Hl, L, Kw = _scale(u, [(0.05, 0.15), (100, 50000), (63070, 115600), (990, 1110),
                                              (63.1, 116), (700, 820), (1120, 1680), (9855, 12045)])
    lr = np.log(r / rw)
    return 2 * math.pi * Tu * (Hu - Hl) / (lr * (1 + 2 * L * Tu / (lr * rw**2 * Kw) + Tu / Tl))


def otl_circuit(u):
    Rb1, Rb2, Rf, Rc1, Rc2, beta = _scale(u, [(50, 150), (25, 70), (0.5, 3), (1.2, 2.5), (0.25, 1.2), (50, 300)])
    vb1 = 12 * Rb2 / (Rb1 + Rb2)
    den = beta * (Rc2 + 9) + Rf
    return (vb1 + 0.74) * beta * (Rc2 + 9) / den + 11.35 * Rf / den + 0.74 * Rf * beta * (Rc2 + 9) / (den * Rc1)


def piston(u):
    M, S, V0, k, P0, Ta, T0 = _scale(u, [(30, 60), (0.005, 0.020), (0.002, 0.010), (1000, 5000), (90000, 110000),
                                         (290, 296), (340, 360)])
    A = P0 * S + 19.62 * M - k * V0 / S
    V = S / (2 * k) * (np.sqrt(A**2 + 4 * k * P0 * V0 * Ta / T0) - A)
    return 2 * math.pi * np.sqrt(M / (k + S**2 * P0 * V0 * Ta / (T0 * V**2)))


def wing_weight(u):
    Sw, Wfw, A, lam, q, taper, tc, Nz, Wdg, Wp = _scale(u, [(150, 200), (220, 300), (6, 10), (-10, 10), (16, 45),
                                                           (0.5, 1), (0.08, 0.18), (2.5, 6), (1700, 2500),
                                                           (0.025, 0.08)])
    c = np.cos(np.deg2rad(lam))
    return (0.036 * Sw**0.758 * Wfw**0.0035 * (A / c**2) ** 0.6 * q**0.006 * taper**0.04
            * (100 * tc / c) ** -0.3 * (Nz * Wdg) ** 0.49 + Sw * Wp)


def welch(u):
    x = _scale(u, [(-0.5, 0.5)] * 20)
    x = [None, *x]  # 1-based, as the paper writes it
    return (5 * x[12] / (1 + x[1]) + 5 * (x[4] - x[20]) ** 2 + x[5] + 40 * x[19] ** 3 - 5 * x[19]
            + 0.05 * x[2] + 0.08 * x[3] - 0.03 * x[6] + 0.03 * x[7] - 0.09 * x[9] - 0.01 * x[10]
            - 0.07 * x[11] + 0.25 * x[13] ** 2 - 0.04 * x[14] + 0.06 * x[15] - 0.01 * x[17] - 0.03 * x[18])


_SMOOTH = np.random.default_rng(30)
_SMOOTH_A = (lambda B: B @ B.T / 30)(_SMOOTH.standard_normal((30, 30)))
_SMOOTH_W = _SMOOTH.standard_normal(30) / np.sqrt(30)


def smooth30(u):
    """A smooth function of 30 inputs, fixed by seed 30: a random quadratic form around the cube's
    centre plus a cosine ridge, 1/2 (u - 1/2)^T A (u - 1/2) + cos(2 pi w^T u), A = B B^T / 30 and
    w ~ N(0, I / 30), B standard normal."""
    v = np.asarray(u, dtype=np.float64) - 0.5
    return 0.5 * np.einsum("ni,ij,nj->n", v, _SMOOTH_A, v) + np.cos(2 * math.pi * (np.asarray(u) @ _SMOOTH_W))


# name: (function, d, members of Q)
PROBLEMS = {"borehole": (borehole, 8, 3), "otl_circuit": (otl_circuit, 6, 4), "piston": (piston, 7, 3),
            "wing_weight": (wing_weight, 10, 2), "welch": (welch, 20, 3),
            "smooth30": (smooth30, 30, 2)}


class CountingFunction(Oracle):
    """The client's labeller: the function on numpy inputs, every label counted."""

    def __init__(self, f, dim: int):
        super().__init__(dim)
        self.f, self.labels = f, 0

    def _label(self, inputs):
        x = np.asarray(inputs, dtype=np.float64)
        self.labels += len(x)
        return self.f(x)


SPREAD = (0.04, 0.12)  # the members' standard deviations along their axes (--spread)


def q_members(d: int, K: int, rng, spread=SPREAD) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for _ in range(K):
        R, _ = np.linalg.qr(rng.standard_normal((d, d)))
        s = rng.uniform(*spread, d)
        out.append((rng.uniform(0.3, 0.7, d), (R * s**2) @ R.T))
    return out


def draw(members, sizes, rng, clip: bool = True) -> np.ndarray:
    x = np.concatenate([rng.multivariate_normal(m, C, n) for (m, C), n in zip(members, sizes)])
    return np.clip(x, 0.0, 1.0) if clip else x


def sklearn_gp_predict(x, y, test_x, seed: int) -> np.ndarray:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kernel = ConstantKernel() * RBF(np.ones(x.shape[1])) + WhiteKernel()
    rows = np.random.default_rng(seed).choice(len(x), min(FIT_POINTS, len(x)), replace=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the optimiser's bound warnings: the fitted values are what count
        fitted = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=2,
                                          random_state=seed).fit(x[rows], y[rows]).kernel_
        return GaussianProcessRegressor(fitted, normalize_y=True, optimizer=None).fit(x, y).predict(test_x)


def run(name: str, budget: int, seed: int, spread=SPREAD, explore: float | None = None) -> dict:
    """An engineering problem of PROBLEMS on the unit cube (module docstring)."""
    f, d, K = PROBLEMS[name]
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    members = q_members(d, K, rng, spread)
    spec = {"oracle": {"name": "external", "batch_size": 250}, "budget": budget, "seed": seed,
            "domain": {"low": [0.0] * d, "high": [1.0] * d, "outside": "clip"},
            "test_distributions": {"members": [{"gaussian": {"mean": m.tolist(), "cov": C.tolist()}, "size": SIZE}
                                               for m, C in members], "validation_per_member": VALIDATION}}
    if explore is not None:  # Q's mixture the default of selection (algorithm.explore), not lwl's default
        spec["algorithm"] = {"name": "bilevel", "explore": explore}
    row = judged(spec, f, d, members, seed, rng, clip=True)
    return {"problem": name, "d": d, "K": K, "spread": list(spread), "explore": explore, **row}


def run_fresh(i: int, budget: int, generator: int = 99) -> dict:
    """Fresh problem i of the issue's kind (``--fresh``): scripts/independent_check.py's generator
    (Friedman-1, Friedman-2, Sobol G and g4 in turn, d up to 8, K up to 7, Q's means N(0, I) and
    Wishart covariances, no input domain), its lengthscale left to lwl and no model named, so the
    budgeted job designs for and serves its default, the fitted GP. The client labels with the
    built-in function (``external`` oracle). ``generator``: the seed of the problem generator."""
    from independent_check import fresh_problems
    from lwl.experiments.robustness import problem_spec

    p, seed = fresh_problems(generator)[i]
    spec = problem_spec(p, size=SIZE, validation=VALIDATION, iterations=None, seed=seed, family="auto")
    builtin = parse_job_spec(spec).oracle.build()
    members = [(np.array(m["gaussian"]["mean"]), np.array(m["gaussian"]["cov"]))
               for m in spec["test_distributions"]["members"]]
    spec.update(oracle={"name": "external", "batch_size": 250}, budget=budget)
    rng = np.random.default_rng([seed, sum(map(ord, p.key))])
    row = judged(spec, lambda x: np.asarray(builtin.label(x), dtype=np.float64).reshape(-1), p.dim, members,
                 seed, rng, clip=False)
    return {"problem": p.key, "d": p.dim, "K": p.members, **row}


def judged(spec: dict, f, d: int, members, seed: int, rng, clip: bool) -> dict:
    """Run the budgeted job of ``spec``, its labels asked of ``f`` by the client, and judge its served
    model against Q's mixture + scikit-learn's GP and + lwl's GP at equal labels (module docstring)."""
    K = len(members)
    oracle = CountingFunction(f, d)
    t0 = time.perf_counter()
    res = run_job(spec, oracle=oracle, evaluate=False)
    seconds = time.perf_counter() - t0
    n = int(res["labels_used"])
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"]).ravel()
    test_x = draw(members, [TEST] * K, rng, clip)
    test_y = f(test_x)
    a, w, sizes = test_y**2, [1.0 / K] * K, [TEST] * K
    served = (np.asarray(from_spec(model_document(res)).predict(test_x)).ravel() - test_y) ** 2
    data_sk = (sklearn_gp_predict(X, y, test_x, seed) - test_y) ** 2
    model = parse_job_spec(res["spec"]).model
    mix_sk, mix_lwl = [], []
    for r in range(DRAWS):
        x = draw(members, np.bincount(rng.integers(0, K, n), minlength=K), rng, clip)
        yx = f(x)
        mix_sk.append((sklearn_gp_predict(x, yx, test_x, 100 * seed + r) - test_y) ** 2)
        mix_lwl.append((np.asarray(train(model, x, yx, ridge=1e-3, seed=seed).predict(test_x)).ravel() - test_y) ** 2)
    vs_sk = compare(np.repeat(served[None], DRAWS, 0), np.stack(mix_sk), a, sizes, w)
    vs_lwl = compare(np.repeat(served[None], DRAWS, 0), np.stack(mix_lwl), a, sizes, w)
    data = compare(np.repeat(data_sk[None], DRAWS, 0), np.stack(mix_sk), a, sizes, w)
    v = res.get("verdict") or {}
    return {"seed": seed, "budget": spec["budget"], "labels_used": n,
            "labels_client": oracle.labels, "selected": res["selected"]["candidate"],
            "kernel": res["model"].get("kernel"), "err_served": vs_sk.err,
            "err_q_mixture_sklearn_gp": vs_sk.other_err, "ratio": vs_sk.ratio, "ratio_interval": vs_sk.ratio_interval,
            "outcome_vs_mixture_sklearn_gp": vs_sk.outcome.value,
            "err_q_mixture_lwl_gp": vs_lwl.other_err, "outcome_vs_mixture_lwl_gp": vs_lwl.outcome.value,
            "err_training_set_sklearn_gp": data.err, "outcome_training_set_sklearn_gp": data.outcome.value,
            "job_verdict": v.get("outcome"), "job_verdict_z": v.get("z"),
            "left_out": left_out_check(res.get("left_out")), "seconds": round(seconds, 1)}


def left_out_check(left_out: dict | None) -> dict | None:
    """The job's left-out check as the row records it (docs/job-spec.md, ``left_out.check``): the
    dropped candidates' points, z, the rank test's p and whether they were left out; None without one."""
    check = (left_out or {}).get("check")
    return None if check is None else {k: check.get(k) for k in ("points", "z", "rank_p", "left_out")}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("names", nargs="?", default=",".join(PROBLEMS))
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--spread", default=",".join(map(str, SPREAD)),
                   help="LO,HI: the range of Q's members' standard deviations in the unit cube")
    p.add_argument("--explore", type=float, default=None,
                   help="algorithm.explore of the jobs (default: lwl's, none for bilevel)")
    p.add_argument("--fresh", default=None,
                   help="PART/PARTS[/GENERATOR]: the fresh problems of the issue's kind i with i mod PARTS == PART "
                        "(run_fresh; GENERATOR the problem generator's seed, 99 by default) instead of the "
                        "engineering ones")
    args = p.parse_args()
    spread = tuple(float(v) for v in args.spread.split(","))
    rows = []
    if args.fresh:
        from independent_check import fresh_problems

        part, parts, generator = ([int(v) for v in args.fresh.split("/")] + [99])[:3]
        jobs = [lambda i=i: run_fresh(i, args.budget, generator) for i in range(len(fresh_problems(generator)))
                if i % parts == part]
    else:
        jobs = [lambda name=name: run(name, args.budget, args.seed, spread, args.explore)
                for name in args.names.split(",")]
    for job in jobs:
        rows.append(job())
        print(json.dumps(rows[-1]), flush=True)
    count = lambda key: "/".join(str(sum(r[key] == o for r in rows)) for o in ("better", "tie", "worse"))  # noqa: E731
    print(f"served vs Q's mixture + scikit-learn GP: {count('outcome_vs_mixture_sklearn_gp')}; vs Q's mixture + "
          f"lwl's GP: {count('outcome_vs_mixture_lwl_gp')}; training set + scikit-learn GP vs Q's mixture + it: "
          f"{count('outcome_training_set_sklearn_gp')}; labels counted by the client = labels_used <= budget on all: "
          f"{all(r['labels_client'] == r['labels_used'] <= r['budget'] for r in rows)}")


if __name__ == "__main__":
    main()
