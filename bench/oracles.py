"""Solves per second of the PDE oracles at the paper's resolutions, next to dense / textbook
baselines computed in the same run.

- Darcy, M = 64: lwl's sparse LU vs a dense LU of the same finite-difference matrix
  (the authors' code solved densely: about 7.8 s per solve on this machine).
- Burgers, n = 8192, nu = 0.1, T = 1: lwl's ETDRK4 on the lowest 256 modes (cfl 1.0) vs the
  authors' scheme, integrating-factor RK4 on the full grid with 2001 steps (about 0.33 s per
  sample on this machine); the relative difference of the two solutions is printed.
- NtD: building the M = 128 matrix (the authors' code: about 26 s), and at M = 64 the same
  Schur complement with a dense interior solve as the baseline.
- RTE, 51 x 51 nodes, 12 directions, eps = 1/8, 2, 8: lwl's direction-wise factorisations with
  GMRES on the mean values, forward (assembly and factorisations included) and adjoint, next to
  the full-system SuperLU factorisation (the authors' GMRES: 1.2-1.95 s per forward solve).

Usage: python bench/oracles.py [--samples 16]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import numpy as np  # noqa: E402
from scipy.sparse.linalg import splu  # noqa: E402

from lwl.measures import KLEGaussian  # noqa: E402
from lwl.oracles.burgers import solve_burgers  # noqa: E402
from lwl.oracles.darcy import darcy_matrix, solve_darcy  # noqa: E402
from lwl.oracles.ntd import NtD, boundary_indices, fv_matrix, paper_log_conductivity  # noqa: E402
from lwl.oracles.rte import RTESolver  # noqa: E402


def timed(fn, repeat=1):
    t = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    return out, (time.perf_counter() - t) / repeat


def burgers_inputs(n, batch, seed=0):
    """The paper's Burgers training family (alpha, tau, sigma) = (3, 1.4, 5)."""
    return KLEGaussian("fourier", grid=n, alpha=3.0, tau=1.4, sigma=5.0).sample(batch, seed)


def if_rk4(u0, nu, length, T, steps):
    """Integrating-factor RK4 on the full grid (the authors' scheme), 2/3 dealiasing."""
    n = u0.shape[-1]
    k = 2 * np.pi / length * np.arange(n // 2 + 1)
    mask = np.arange(n // 2 + 1) < n // 3
    h = T / steps
    E2 = np.exp(-nu * k**2 * h / 2)
    g = -0.5j * k * mask

    def N(v):
        return g * np.fft.rfft(np.fft.irfft(v, n=n) ** 2)

    v = np.fft.rfft(u0)
    for _ in range(steps):
        a = N(v)
        b = N(E2 * (v + h / 2 * a))
        c = N(E2 * v + h / 2 * b)
        d = N(E2 * E2 * v + h * E2 * c)
        v = E2 * E2 * v + h / 6 * (E2 * E2 * a + 2 * E2 * (b + c) + d)
    return np.fft.irfft(v, n=n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=16)
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    M = 64
    fields = [rng.standard_normal((M, M)) for _ in range(args.samples)]
    _, t_sparse = timed(lambda: [solve_darcy(f) for f in fields])
    t_sparse /= len(fields)
    A = darcy_matrix(np.exp(fields[0])).toarray()
    _, t_dense = timed(lambda: np.linalg.solve(A, np.ones(A.shape[0])))
    print(f"darcy M={M}: lwl sparse LU {t_sparse * 1e3:7.1f} ms/solve ({1 / t_sparse:6.1f}/s); "
          f"dense LU of the same matrix {t_dense * 1e3:7.1f} ms ({t_dense / t_sparse:5.1f}x); target <= 15 ms")

    n = 8192
    a = burgers_inputs(n, args.samples)
    u_lwl, t_lwl = timed(lambda: solve_burgers(a, viscosity=0.1, length=2 * np.pi, time=1.0, modes=256, cfl=1.0))
    t_lwl /= len(a)
    u_ref, t_ref = timed(lambda: if_rk4(a[0], 0.1, 2 * np.pi, 1.0, 2001))
    diff = np.linalg.norm(u_lwl[0] - u_ref) / np.linalg.norm(u_ref)
    print(f"burgers n={n}: lwl ETDRK4/256 modes {t_lwl * 1e3:7.1f} ms/sample ({1 / t_lwl:6.1f}/s); "
          f"IF-RK4 full grid 2001 steps {t_ref * 1e3:7.1f} ms ({t_ref / t_lwl:5.1f}x); "
          f"relative difference {diff:.1e}; target <= 10 ms")

    _, t_build = timed(lambda: NtD(grid=128, seed=1))  # seed 1: not the cached default field
    Mn = 64
    a_ntd = np.exp(paper_log_conductivity(Mn))
    K = fv_matrix(a_ntd)
    b = boundary_indices(Mn)
    inner = np.setdiff1d(np.arange(Mn * Mn), b)
    K_II, K_IB = K[inner][:, inner], K[inner][:, b].toarray()
    _, t_sp = timed(lambda: splu(K_II.tocsc(), permc_spec="MMD_AT_PLUS_A").solve(K_IB))
    _, t_dn = timed(lambda: np.linalg.solve(K_II.toarray(), K_IB))
    print(f"ntd: lwl matrix build M=128 {t_build:6.2f} s (target <= 2 s); interior solves at M={Mn}: "
          f"sparse LU {t_sp * 1e3:7.1f} ms vs dense {t_dn * 1e3:8.1f} ms ({t_dn / t_sp:5.1f}x)")

    a_rte = np.exp(0.5 * rng.standard_normal((51, 51)))
    for eps in (1 / 8, 2.0, 8.0):
        solver, t_fwd = timed(lambda: RTESolver(a_rte, eps, 12, "schur"))
        _, t_adj = timed(lambda: solver.gradient(np.ones(51 * 51)))
        _, t_direct = timed(lambda: RTESolver(a_rte, eps, 12, "direct"))
        print(f"rte eps={eps:g}: Schur/GMRES forward {t_fwd:5.2f} s ({solver.iterations_} iterations), adjoint "
              f"{t_adj * 1e3:6.1f} ms; full-system SuperLU {t_direct:5.2f} s ({t_direct / t_fwd:4.1f}x); target <= 0.25 s")


if __name__ == "__main__":
    main()
