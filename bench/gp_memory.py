"""Peak memory and wall time of the served GP at 2,000, 8,000 and 20,000 labels (issue 83,
"Bounded memory").

Each size runs in a fresh child process (its peak resident set is its own, ``ru_maxrss``): a
job's fit of the served GP (the job's defaults: both kernels on the fitting subset, the evidence
check, the final fit on 2,000 points, then the factor of all n points, in place), a prediction
of ``--predict`` points (10,000) with both stds (printed per 1,000), and the closed-form leave-one-out of 500 rows (a job's
``model_diagnosis``). The baseline, in the same child, is the memory of the data alone before the
fit (the process with numpy and torch imported and the arrays built): the ratio printed is the
peak over that. Also printed: the estimate ``served_model_bytes`` that ``GPSpec.check_labels``
refuses budgets with (two factors: the design's, not this GP alone) and the limit.

Usage: python bench/gp_memory.py [--n 2000 8000 20000] [--d 6] [--threads 2] [--predict 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(n: int, d: int, m: int) -> dict:
    import resource
    import time

    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT))
    from lwl.models import GaussianProcess
    from lwl.models.gp import GP_MEMORY_LIMIT_BYTES, FINAL_FIT_POINTS, served_model_bytes

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, d)) * np.logspace(-3, 4, d) + 1e3  # a lab's units: spreads 1e-3..1e4, offset
    u = (X - 1e3) / np.logspace(-3, 4, d)
    y = np.sin(3 * u[:, 0]) * np.cos(2 * u[:, 1]) + u[:, 2:].sum(1) ** 2
    Xt = rng.uniform(size=(m, d)) * np.logspace(-3, 4, d) + 1e3
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = time.perf_counter()
    gp = GaussianProcess().fit(X, y)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    gp.predict_stds(Xt)
    predict_s = time.perf_counter() - t
    t = time.perf_counter()
    gp.loo(np.arange(500))
    loo_s = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"n": n, "d": d, "m": m, "threads": torch.get_num_threads(), "baseline_bytes": base, "peak_bytes": peak,
            "fit_s": fit_s, "predict_s": predict_s, "predict_per_1000_s": 1000 * predict_s / m, "loo_500_s": loo_s,
            "estimate_bytes": served_model_bytes(n, FINAL_FIT_POINTS), "limit_bytes": GP_MEMORY_LIMIT_BYTES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2000, 8000, 20000])
    ap.add_argument("--d", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--predict", type=int, default=10_000, help="points predicted with both stds")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.d, args.predict)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "OPENBLAS_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads)}
    print(f"{'n':>7} {'peak GB':>8} {'baseline GB':>12} {'peak/baseline':>14} {'fit s':>7} {'predict s/1000':>14} "
          f"{'loo 500 s':>10} {'job estimate GB':>16} {'limit GB':>9}")
    for n in args.n:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--d", str(args.d), "--predict",
                              str(args.predict)], env=env,
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['n']:>7} {r['peak_bytes'] / 1e9:>8.2f} {r['baseline_bytes'] / 1e9:>12.2f} "
              f"{r['peak_bytes'] / r['baseline_bytes']:>14.1f} {r['fit_s']:>7.1f} {r['predict_per_1000_s']:>14.2f} "
              f"{r['loo_500_s']:>10.2f} {r['estimate_bytes'] / 1e9:>16.2f} {r['limit_bytes'] / 1e9:>9.0f}", flush=True)


if __name__ == "__main__":
    main()
