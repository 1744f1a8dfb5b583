"""EIT data generation (lwl.oracles.eit, lwl.experiments.eit): Neumann data per second.

Three ways to label n conductivities with L Dirichlet data each, at the quick (24, L = 16) and
the paper (70, L = 100) sizes, in one process:

- ``factorise per pair`` (the baseline: what a solver called once per boundary datum does):
  one sparse LU per pair;
- ``factorise per conductivity`` (the ``eit`` oracle): one LU per conductivity, reused for its
  L data (rows of one conductivity are grouped);
- ``DtN, then any law`` (``lwl experiment eit``): the DtN matrix once per conductivity (4M - 4
  solves) and cached; every further omega law costs a matrix product g = Lambda f. The line
  reports the DtN's one-off cost and the cost per further law separately.

Threads are pinned to one (BLAS, torch). Usage: python bench/eit.py [--n 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from lwl.design.interval_search import pair_rows  # noqa: E402
from lwl.experiments.eit import pairs  # noqa: E402
from lwl.oracles import make_oracle  # noqa: E402
from lwl.oracles.eit import DirichletSolver, angles, conductivity, dirichlet_data, draw_coefficients  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8, help="conductivities per measurement")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for M, L in ((24, 16), (70, 100)):
        c = draw_coefficients(args.n, rng)
        omega = rng.uniform(np.pi / 2, 7 * np.pi, (args.n, L))
        theta = angles(L)
        pairs_n = args.n * L

        def per_pair():
            out = np.empty((args.n, L, 4 * M - 4))
            for i in range(args.n):
                a = conductivity(c[i], M)
                for j in range(L):
                    out[i, j] = DirichletSolver(a).solve(dirichlet_data(omega[i, j], theta[j], M))[1]
            return out

        oracle = make_oracle({"name": "eit", "params": {"grid": M}})
        base, t_base = timed(per_pair)
        grouped, t_group = timed(lambda: oracle.label(pair_rows(c, omega, theta)).reshape(args.n, L, -1))
        dtn, t_dtn = timed(lambda: np.stack([DirichletSolver(conductivity(ci, M)).dtn() for ci in c]).astype(np.float32))
        (_, g), t_law = timed(lambda: pairs(dtn, omega, M))
        assert np.allclose(grouped, base, atol=1e-9 * np.abs(base).max())
        assert np.allclose(g, base, atol=1e-5 * np.abs(base).max())
        print(f"grid {M}, L = {L}, {args.n} conductivities ({pairs_n} pairs):")
        print(f"  factorise per pair          {pairs_n / t_base:10.0f} pairs/s   (baseline)")
        print(f"  factorise per conductivity  {pairs_n / t_group:10.0f} pairs/s   {t_base / t_group:6.1f}x")
        print(f"  DtN once per conductivity   {args.n / t_dtn:10.1f} conductivities/s (one-off, cached)")
        print(f"  DtN, then any further law   {pairs_n / t_law:10.0f} pairs/s   {t_base / t_law:6.1f}x")
        paper = 4096 * 4 + 1024 * 2
        print(f"  -> the paper's data (4 x 4096 training + 1024 test conductivities, L = {L}) by the oracle: "
              f"{paper * t_group / args.n / 60:.1f} min; DtN cache of 4096 + 1024: {5120 * t_dtn / args.n / 60:.1f} min")


if __name__ == "__main__":
    main()
