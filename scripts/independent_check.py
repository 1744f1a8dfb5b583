"""Fresh problems of the issue's kind, judged by a KRR that is not lwl's (docs/method.md,
"Problems of the issue's kind, judged independently").

Sixteen problems that no committed study uses (a generator of their own: Friedman-1,
Friedman-2, Sobol G and g4 in turn, d and K drawn up to 8 and 7; Q's means N(0, I), Wishart
covariances; start Q's moment-matched Gaussian or N(1/2, I)), each run by ``run_job`` on a spec
with no ``algorithm`` block, the lengthscale given as Table 1 gives it (``given``: half the RMS
distance between Q's samples) or left to lwl (``selected``). Each result is judged by an
independent numpy/scipy KRR (kernel exp(-r^2 / l^2) with the lengthscale of the result's
``spec``, ridge 1e-3, N = 1024) on 3,000 fresh samples per member of Q: the design against
Q's mixture and the initial Normal, each trained on its own 1,024 draws. lwl is used only to
run the job and to sample the returned distribution.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/independent_check.py given|selected [PART PARTS]
(``PART PARTS`` splits the problems over processes: problem i runs in part i mod PARTS).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.spatial.distance import cdist

from lwl.experiments.robustness import Problem, problem_spec
from lwl.measures import from_spec
from lwl.runner import run_job
from lwl.spec import parse_job_spec

FUNCTIONS = (("friedman1", 5), ("friedman2", 4), ("sobol_g", 2), ("kernel_expansion", 2))


def fresh_problems() -> list[tuple[Problem, int]]:
    """(problem, seed) pairs from a generator no committed study uses."""
    rng = np.random.default_rng(99)
    out = []
    for i in range(16):
        oracle, min_dim = FUNCTIONS[i % 4]
        dim, members = int(rng.integers(min_dim, 9)), int(rng.integers(1, 8))
        start = ("default", "paper")[(i // 4) % 2]
        out.append((Problem(f"q{i:02d}-{oracle}-d{dim}-K{members}-{start}", oracle, dim, members, 1.0, start),
                    2 + i % 3))
    return out


def krr_err(x: np.ndarray, y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, lengthscale: float) -> float:
    """Err = ||f_hat - y|| / ||y|| on the test samples, f_hat the KRR of (x, y)."""
    gram = np.exp(-cdist(x, x, "sqeuclidean") / lengthscale**2) + 1e-3 * np.eye(len(x))
    coef = cho_solve(cho_factor(gram), y)
    pred = np.exp(-cdist(test_x, x, "sqeuclidean") / lengthscale**2) @ coef
    return float(np.linalg.norm(pred - test_y) / np.linalg.norm(test_y))


def main() -> None:
    mode = sys.argv[1]
    part, parts = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0, 1)
    wins = total = 0
    for i, (p, seed) in enumerate(fresh_problems()):
        if i % parts != part:
            continue
        spec = problem_spec(p, size=3000, validation=500, iterations=None, seed=seed,
                            lengthscale_factor=0.5 if mode == "given" else None)
        t0 = time.time()
        result = run_job(spec)
        resolved = parse_job_spec(result["spec"])
        oracle, ell = resolved.oracle.build(), resolved.model.lengthscale
        rng = np.random.default_rng(1000 + i)
        members = [(np.array(m["gaussian"]["mean"]), np.array(m["gaussian"]["cov"]))
                   for m in spec["test_distributions"]["members"]]
        test_x = np.concatenate([rng.multivariate_normal(m, c, 3000) for m, c in members])
        test_y = np.asarray(oracle.label(test_x)).reshape(-1)

        def judge(x: np.ndarray) -> float:
            return krr_err(x, np.asarray(oracle.label(x)).reshape(-1), test_x, test_y, ell)

        n = 1024
        design = judge(from_spec(result["distribution"]).sample(n, seed=[5, seed]))
        mixture = judge(np.stack([rng.multivariate_normal(*members[k]) for k in rng.integers(0, len(members), n)]))
        initial = judge(rng.multivariate_normal(np.array(resolved.family.mean), np.array(resolved.family.cov), n))
        win = design < mixture and design < initial
        wins, total = wins + win, total + 1
        print(f"{p.key} seed {seed} {mode}: design {design:.4f} mixture {mixture:.4f} initial {initial:.4f} "
              f"{'WIN' if win else 'LOSS'} | lwl's held-out verdict {result['verdict']['err']:.4f} "
              f"({time.time() - t0:.0f} s)", flush=True)
    print(f"{wins} of {total} beat both the mixture and the initial Normal")


if __name__ == "__main__":
    main()
