"""Milliseconds per bilevel iteration at the Table 1 g1 setting, against a baseline written
the way the authors' code works, run in the same process.

Setting: d = 2 (Sobol G), N_k = 250 samples per iteration, K = 10 test members with 500
validation points each (5000 points in the adjoint), float64 throughout.

Baseline ("reference"): the kernel matrices from ``torch.cdist`` and ``exp``, a Cholesky
factorisation for the model, a second solve for the adjoint through ``torch.linalg.solve`` on
the same matrix, and the score by torch autograd of the log-density summed over samples
(the paper's "we use automatic differentiation to compute grad_L log p").

Usage: python bench/bilevel.py [--iterations 300] [--paper-preset]
``--paper-preset`` also times ``lwl experiment table1 --preset paper`` (about 15 minutes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

torch.set_num_threads(int(os.environ.get("LWL_BENCH_THREADS", "2")))

from lwl.experiments.table1 import COLUMNS, column_spec  # noqa: E402
from lwl.measures import gaussian_log_prob  # noqa: E402
from lwl.oracles import make_oracle  # noqa: E402
from lwl.runner import build_stepper  # noqa: E402
from lwl.spec import parse_job_spec  # noqa: E402


def reference_iteration(mean, chol, U, y, V, yv, a, lengthscale, sigma2):
    """One iteration the straightforward way (see module docstring)."""
    n = U.shape[0]
    kuu = torch.exp(-torch.cdist(U, U) ** 2 / lengthscale**2)
    kvu = torch.exp(-torch.cdist(V, U) ** 2 / lengthscale**2)
    A = kuu + n * sigma2 * torch.eye(n, dtype=U.dtype)
    L = torch.linalg.cholesky(A)
    beta = torch.cholesky_solve(y[:, None], L)[:, 0]
    resid_v = yv - kvu @ beta
    lam = torch.linalg.solve(A, n * (kvu.T @ (a * resid_v)))
    c = (kuu @ beta - y) * lam / n
    m = mean.clone().requires_grad_(True)
    Lc = chol.clone().requires_grad_(True)
    (gaussian_log_prob(U, m, Lc) * c).sum().backward()
    return m.grad, torch.tril(Lc.grad)


FAMILIES = (("gaussian (adaptive)", None), ("mixture, 10 components", {"name": "mixture", "components": 10}),
            ("pool of 5,000 points", {"name": "pool", "pool_size": 5000}))


def family_iteration_ms(col, family: dict | None, iterations: int) -> float:
    """ms per adaptive bilevel iteration at the g1 setting with N_k = 250, for a family."""
    doc = column_spec(col, seed=0, iterations=10**5, baselines=[])
    doc["algorithm"].update(samples_per_iteration=250, check_every=10**6)
    if family is not None:
        doc["family"] = family
    spec = parse_job_spec(doc)
    design = build_stepper(spec)
    oracle = make_oracle(spec.oracle)
    state = design.init()
    while state["phase"] != "iterate":  # Q's labels, theta^0's checks: not iterations
        state = design.step(state, oracle.label(design.queries(state)))
    for _ in range(10):  # warm-up
        state = design.step(state, oracle.label(design.queries(state)))
    t = time.perf_counter()
    for _ in range(iterations):
        state = design.step(state, oracle.label(design.queries(state)))
    return (time.perf_counter() - t) / iterations * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--paper-preset", action="store_true")
    args = ap.parse_args()

    col = next(c for c in COLUMNS if c.key == "g1")
    # the paper's iteration (N_k = 250, plain step); no validation checks inside the timed loop
    doc = column_spec(col, seed=0, iterations=1000, baselines=[], optimizer="paper")
    doc["algorithm"]["check_every"] = 10**6
    spec = parse_job_spec(doc)
    design = build_stepper(spec)
    oracle = make_oracle(spec.oracle)
    with threadpool_limits(1, "blas"):
        state = design.step(design.init(), oracle.label(design.queries(design.init())))
        while state["phase"] == "check":  # theta^0's check: not part of an iteration
            state = design.step(state, oracle.label(design.queries(state)))
        batches = []
        s = state
        for _ in range(args.iterations):  # pre-label so only the algorithm is timed
            x = design.queries(s)
            y = oracle.label(x)
            batches.append((x, y))
            s = design.step(s, y)

        # lwl: the stepper's full iteration (sampling, solve, adjoint, score, update, history)
        for x, y in batches[:20]:
            design.step(state, y)
        t = time.perf_counter()
        s = state
        for _ in range(args.iterations):
            y = oracle.label(design.queries(s))
            s = design.step(s, y)
        lwl_ms = (time.perf_counter() - t) / args.iterations * 1e3

        t64 = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
        V = t64(np.concatenate(design.q.validation))
        yv = t64(state["validation_labels"])
        a = t64(design.q.point_weights(design.q.validation, design.q.weights))
        mean, chol = t64(state["mean"]), t64(state["chol"])
        ell = spec.model.lengthscale
        prepared = [(t64(x), t64(y)) for x, y in batches]
        for U, y in prepared[:20]:
            reference_iteration(mean, chol, U, y, V, yv, a, ell, 1e-3)
        t = time.perf_counter()
        for U, y in prepared:
            reference_iteration(mean, chol, U, y, V, yv, a, ell, 1e-3)
        ref_ms = (time.perf_counter() - t) / len(prepared) * 1e3

    print(f"bilevel iteration, Table 1 g1 setting (d=2, N_k=250, K=10 x 500 validation), "
          f"torch threads={torch.get_num_threads()}")
    print(f"  lwl stepper : {lwl_ms:7.2f} ms/iteration  ({1e3 / lwl_ms:7.1f} it/s)")
    print(f"  reference   : {ref_ms:7.2f} ms/iteration  ({1e3 / ref_ms:7.1f} it/s)")
    print(f"  speed-up    : {ref_ms / lwl_ms:7.2f}x   (target: <= 3 ms; authors' code 12-18 ms here)")

    with threadpool_limits(1, "blas"):
        times = [(name, family_iteration_ms(col, fam, max(20, args.iterations // 3))) for name, fam in FAMILIES]
    print("families, adaptive optimiser, same setting (N_k = 250), labels included:")
    for name, ms in times:
        print(f"  {name:24s}: {ms:7.2f} ms/iteration  ({ms / times[0][1]:5.2f}x the Gaussian)")

    if args.paper_preset:
        from lwl.experiments import table1

        t = time.perf_counter()
        table1.run("paper")
        print(f"table1 --preset paper: {time.perf_counter() - t:.0f} s wall (target <= 900 s)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
