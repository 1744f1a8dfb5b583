"""What the GP's hyperparameter fit costs: the closed-form likelihood gradient (lwl.models.gp's
``_lml_and_gradient``, what ``fit`` uses) against torch autograd through the Cholesky factor (the
baseline, what ``fit`` used before), run in the same process on the same points.

Prints, per kernel and number of points n: milliseconds per likelihood-and-gradient evaluation of
each, the ratio autograd / closed form, and the seconds of a whole ``GaussianProcess.fit`` (3 starts).

Then, at the sizes a budgeted design at 8,000 labels conditions on (``--cond-n``): the (n, n)
kernel matrix built out of place (``ard_kernel``'s autograd path, the baseline, what every
kernel matrix cost before) against in place (``_ard_kernel_in_place``, what conditioning and
prediction use), and a round's hyperparameters: ``fit`` (fit on 300 points and condition on all
n, the baseline, what each round did) against ``fit_hyperparameters`` (no conditioning).

Usage: python bench/gp_fit.py [--n 300 1000] [--repeats 20] [--cond-n 2000 6000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("LWL_BENCH_THREADS", "2")))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lwl.models.gp import GaussianProcess, _ard_kernel_in_place, _lml_and_gradient, _lml_terms, ard_kernel  # noqa: E402
from lwl.oracles import make_oracle  # noqa: E402


def per_call(fn, repeats: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[300, 1000])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cond-n", type=int, nargs="+", default=[2000, 6000])
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    oracle = make_oracle({"name": "friedman1"})
    print(f"{'kernel':>20} {'n':>6} {'autograd ms':>12} {'closed ms':>10} {'ratio':>6} {'fit s':>6}")
    for kernel in ("squared_exponential", "matern52"):
        for n in args.n:
            Xn = rng.uniform(size=(n, 5))
            yn = np.asarray(oracle.label(Xn), dtype=np.float64).reshape(-1)
            X, y = torch.tensor(Xn), torch.tensor(yn)
            theta = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0, 1.0, -3.0], dtype=torch.float64)

            def autograd():
                t = theta.clone().requires_grad_(True)
                torch.autograd.grad(_lml_terms(kernel, X, y, t[:5], t[5], t[6])[0], t)

            base = per_call(autograd, args.repeats)
            closed = per_call(lambda: _lml_and_gradient(kernel, X, y, theta), args.repeats)
            t = time.perf_counter()
            GaussianProcess(kernel, restarts=2, max_fit_points=n).fit(Xn, yn)
            fit = time.perf_counter() - t
            print(f"{kernel:>20} {n:>6} {1e3 * base:>12.2f} {1e3 * closed:>10.2f} {base / closed:>6.2f} {fit:>6.2f}")
    print(f"\n{'kernel':>20} {'n':>6} {'K out-of-place ms':>18} {'K in place ms':>14} {'ratio':>6} "
          f"{'fit s':>6} {'hyper s':>8} {'ratio':>6}")
    for kernel in ("squared_exponential", "matern52"):
        for n in args.cond_n:
            Xn = rng.uniform(size=(n, 6))
            yn = np.asarray(oracle.label(Xn[:, :5]), dtype=np.float64).reshape(-1)
            X = torch.tensor(Xn)
            ell = torch.full((6,), 0.7, dtype=torch.float64)
            grad_ell = ell.clone().requires_grad_(True)
            out_of_place = per_call(lambda: ard_kernel(kernel, X, X, grad_ell), 3)
            in_place = per_call(lambda: _ard_kernel_in_place(kernel, X, X, ell), 3)
            t = time.perf_counter()
            GaussianProcess(kernel, restarts=1, max_fit_points=300, refit_points=None).fit(Xn, yn)
            fit = time.perf_counter() - t
            t = time.perf_counter()
            GaussianProcess(kernel, restarts=1, max_fit_points=300).fit_hyperparameters(Xn, yn)
            hyper = time.perf_counter() - t
            print(f"{kernel:>20} {n:>6} {1e3 * out_of_place:>18.1f} {1e3 * in_place:>14.1f} "
                  f"{out_of_place / in_place:>6.2f} {fit:>6.2f} {hyper:>8.2f} {fit / hyper:>6.2f}")


if __name__ == "__main__":
    main()
