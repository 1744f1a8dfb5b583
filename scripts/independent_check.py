"""Fresh problems of the issue's kind, judged by a KRR that is not lwl's (docs/method/bilevel.md,
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

Modes ``given-auto`` / ``selected-auto`` leave the family out (lwl's default, ``auto``). The
judge trains each candidate on DRAWS training sets and calls the design better / tie / worse than
Q's mixture from a t interval of the draw-wise difference; the script counts the problems where
lwl's verdict said ``better`` while the judge's mean Err of the design is above the mixture's.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/independent_check.py given|selected|given-auto|selected-auto [PART PARTS]
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


def fresh_problems(generator: int = 99) -> list[tuple[Problem, int]]:
    """(problem, seed) pairs from a generator no committed study uses (``generator``: its seed; 99
    made the problems of docs/results/independent-check-auto)."""
    rng = np.random.default_rng(generator)
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


DRAWS = 5  # training draws per candidate for the judge (its own, not lwl's)


def mixture_verdict(result: dict) -> str:
    """lwl's own verdict of the design against Q's mixture (at the better lengthscale)."""
    ev = result["evaluation"]
    own = (ev.get("err_own_lengthscale") or {}).get("mixture")
    if own is not None and own["err"] < ev["err"]["mixture"]:
        return own["comparison"]["outcome"]
    return ev["comparisons"]["mixture"]["outcome"]


def main() -> None:
    mode = sys.argv[1]
    part, parts = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0, 1)
    wins = total = contradictions = 0
    for i, (p, seed) in enumerate(fresh_problems()):
        if i % parts != part:
            continue
        spec = problem_spec(p, size=3000, validation=500, iterations=None, seed=seed,
                            lengthscale_factor=0.5 if mode.startswith("given") else None,
                            family="auto" if mode.endswith("auto") else "gaussian")
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
        design = np.array([judge(from_spec(result["distribution"]).sample(n, seed=[5, seed, r]))
                           for r in range(DRAWS)])
        mixture = np.array([judge(np.stack([rng.multivariate_normal(*members[k])
                                            for k in rng.integers(0, len(members), n)])) for _ in range(DRAWS)])
        # the judge's own call: the mean over draws, and a t interval of the draw-wise difference
        diff = design - mixture
        half = 2.776 * diff.std(ddof=1) / np.sqrt(DRAWS)  # t_{0.975, 4}
        judged = "better" if diff.mean() + half < 0 else "worse" if diff.mean() - half > 0 else "tie"
        said = mixture_verdict(result)
        # a contradiction: lwl says better where the judge measures the design worse (mean Err)
        wrong = said == "better" and design.mean() > mixture.mean()
        contradictions += wrong
        wins, total = wins + (judged == "better"), total + 1
        print(f"{p.key} seed {seed} {mode}: design {design.mean():.4f} mixture {mixture.mean():.4f} "
              f"judge {judged} | lwl: {said} ({result['selected'].get('family', '-')}), "
              f"held-out {result['verdict']['err']:.4f}{' CONTRADICTION' if wrong else ''} "
              f"({time.time() - t0:.0f} s)", flush=True)
    print(f"judge: design better than Q's mixture on {wins} of {total}; lwl said better where the judge "
          f"measured worse on {contradictions}")


if __name__ == "__main__":
    main()
