"""Milliseconds per bilevel iteration at the Table 1 g1 setting, for N_k in {250, 1024, 4096},
against a baseline written the way the authors' code works, run in the same process; with
``--authors DIR`` also against the authors' own iteration, side by side.

Setting: d = 2 (Sobol G), K = 10 test members with 500 validation points each (5,000 points in
the adjoint), lwl's defaults (adaptive optimiser, float64), one thread (``LWL_BENCH_THREADS``).
An iteration is everything the stepper does between two labelled batches: draw N_k points,
label them, factorise, adjoint, score, step; checks are switched off inside the timed loop.

Baseline ("reference", same process, float64): the kernel matrices from ``torch.cdist`` and
``exp``, a Cholesky factorisation for the model, a second solve for the adjoint through
``torch.linalg.solve`` on the same matrix, and the score by torch autograd of the log-density.

Authors (``--authors DIR``, DIR = a checkout of github.com/nicolas-guerra/learning-where-to-learn,
which lwl does not ship): their ``function_approximation`` code, copied to a temporary folder with
its three in-place ``Y -= ...`` lines made out of place (in place they overwrite the held-out
labels on a CPU), then per iteration their ``model_update`` (sample, label, train, adjoint) and the
parametric score step of their ``driver.py``, at the same N_k and Q (10 members x 500 points, their
sigma = 1, i.e. lwl's lengthscale sqrt 2), in their default float32 and in float64.

``--device cuda`` (when CUDA is there) times lwl's iteration on the GPU against the CPU up to
N_k = 16,384. ``--readme-job`` also runs examples/friedman1.json and prints wall time and labels.

Usage: python bench/bilevel.py [--sizes 250 1024 4096] [--authors DIR] [--device cuda]
                               [--readme-job] [--paper-preset]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

torch.set_num_threads(int(os.environ.get("LWL_BENCH_THREADS", "1")))

from lwl.experiments.table1 import COLUMNS, column_spec  # noqa: E402
from lwl.measures import gaussian_log_prob  # noqa: E402
from lwl.oracles import make_oracle  # noqa: E402
from lwl.runner import build_stepper  # noqa: E402
from lwl.spec import parse_job_spec  # noqa: E402

G1 = next(c for c in COLUMNS if c.key == "g1")


def repeats(n: int) -> int:
    """Timed iterations per size: enough for a steady mean, fewer for the large sizes."""
    return max(3, min(60, int(60 * (1024 / n) ** 2)))


def best_of(runs: int, fn) -> float:
    """The fastest of ``runs`` calls of ``fn`` (each returning ms/iteration): the least
    disturbed by the other process on a shared machine."""
    return min(fn() for _ in range(runs))


def lwl_stepper(n: int, family: dict | None = None, device: str = "cpu"):
    """A g1 bilevel stepper at N_k = n, past its validation round and start checks."""
    doc = column_spec(G1, seed=0, iterations=10**5, baselines=[])
    doc["algorithm"].update(samples_per_iteration=n, check_every=10**6)
    doc["device"] = device
    if family is not None:
        doc["family"] = family
    spec = parse_job_spec(doc)
    design = build_stepper(spec)
    oracle = make_oracle(spec.oracle)
    state = design.init()
    while state.phase != "iterate":  # Q's labels, the start checks: not iterations
        state = design.step(state, oracle.label(design.queries(state)))
    return design, oracle, state


def lwl_ms(n: int, family: dict | None = None, device: str = "cpu") -> float:
    """ms per lwl iteration (sampling and labelling included)."""
    design, oracle, state = lwl_stepper(n, family, device)
    for _ in range(3):  # warm-up
        state = design.step(state, oracle.label(design.queries(state)))
    reps = repeats(n)

    def timed() -> float:
        nonlocal state
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            state = design.step(state, oracle.label(design.queries(state)))
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / reps * 1e3

    return best_of(3, timed)


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


def reference_ms(n: int) -> float:
    design, oracle, state = lwl_stepper(n)
    t64 = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    V = t64(np.concatenate(design.q.validation))
    yv = t64(state.validation_labels)
    a = t64(design.q.point_weights(design.q.validation, design.q.weights))
    mean, chol = t64(state.params["mean"]), t64(state.params["chol"])
    ell = design.spec.model.lengthscale
    reps = repeats(n)
    batches = []
    for i in range(reps):
        x = design.distribution(state).sample(n, [0, 99, i])
        batches.append((t64(x), t64(oracle.label(x))))
    reference_iteration(mean, chol, *batches[0], V, yv, a, ell, 1e-3)

    def timed() -> float:
        t = time.perf_counter()
        for U, y in batches:
            reference_iteration(mean, chol, U, y, V, yv, a, ell, 1e-3)
        return (time.perf_counter() - t) / reps * 1e3

    return best_of(3, timed)


class AuthorsIteration:
    """The authors' g1 iteration (module docstring), from a checkout at ``root``."""

    OUT_OF_PLACE = (("Y -= self.forward(V)", "Y = Y - self.forward(V)"), ("Y -= model(V)", "Y = Y - model(V)"))

    def __init__(self, root: str):
        src = Path(root) / "function_approximation"
        if not (src / "bilevel.py").exists():
            raise SystemExit(f"--authors: {root} has no function_approximation/bilevel.py")
        self.dir = Path(tempfile.mkdtemp(prefix="lwl-authors-")) / "function_approximation"
        shutil.copytree(src, self.dir)
        path = self.dir / "bilevel.py"
        text = path.read_text()
        edits = sum(text.count(old) for old, _ in self.OUT_OF_PLACE)
        if edits != 3:
            raise SystemExit(f"--authors: expected the three in-place 'Y -=' lines, found {edits}")
        for old, new in self.OUT_OF_PLACE:
            text = text.replace(old, new)
        path.write_text(text)
        sys.path.insert(0, str(self.dir))
        self.bilevel = importlib.import_module("bilevel")
        self.kernels = importlib.import_module("kernels")
        self.testfunctions = importlib.import_module("testfunctions")

    def ms(self, n: int, dtype: torch.dtype) -> float:
        b = self.bilevel
        torch.set_default_dtype(dtype)
        try:
            torch.manual_seed(42)
            d, J = 2, 10
            means = torch.randn(J, d)
            W = torch.distributions.wishart.Wishart(torch.tensor([d + 1.0]), scale_tril=torch.eye(d))
            covs = W.sample((J,)).squeeze(1)
            truth = self.testfunctions.sobol_func
            data_test = []
            for j in range(J):
                V = torch.distributions.MultivariateNormal(means[j], covariance_matrix=covs[j]).sample((500,))
                data_test.append((V, truth(V)))
            kernel = lambda x, y: self.kernels.gaussian_kernel(x, y, sigma=1.0)  # noqa: E731
            design = b.DesignDistribution_WithMean(d, 0.5 * torch.ones(d), device="cpu")

            def step() -> None:
                theta = design.theta
                model, X, Y = b.model_update(n, design, truth, 1e-3, data_test, kernel, "cpu",
                                             return_data=True, split_data=False)
                g = ((model(X) - Y) * model.adjoint_values).unsqueeze(-1) * design.parametric_score(X, theta)
                design.set_params(theta - 1e-3 * torch.mean(g, dim=0))

            for _ in range(3):
                step()
            reps = repeats(n)

            def timed() -> float:
                t = time.perf_counter()
                for _ in range(reps):
                    step()
                return (time.perf_counter() - t) / reps * 1e3

            return best_of(3, timed)
        finally:
            torch.set_default_dtype(torch.float32)


def readme_job() -> tuple[float, dict]:
    from lwl.runner import run_job

    spec = parse_job_spec(json.loads((Path(__file__).resolve().parents[1] / "examples" / "friedman1.json").read_text()))
    t = time.perf_counter()
    res = run_job(spec)
    return time.perf_counter() - t, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 1024, 4096])
    ap.add_argument("--authors", default=os.environ.get("LWL_AUTHORS_DIR"),
                    help="a checkout of the authors' repository (side-by-side rows)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--gpu-sizes", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
    ap.add_argument("--readme-job", action="store_true")
    ap.add_argument("--families", action="store_true", help="also the mixture and pool families at N_k = 250")
    ap.add_argument("--paper-preset", action="store_true", help="also time lwl experiment table1 --preset paper")
    args = ap.parse_args()

    authors = AuthorsIteration(args.authors) if args.authors else None
    print(f"bilevel iteration, Table 1 g1 setting (d=2, K=10 x 500 validation), torch threads "
          f"{torch.get_num_threads()}, {torch.__version__}; best of 3 runs per cell")
    head = f"{'N_k':>6} | {'lwl ms':>8} | {'reference ms':>12} | {'ratio':>6}"
    if authors:
        head += f" | {'authors f32':>11} | {'ratio':>6} | {'authors f64':>11} | {'ratio':>6}"
    print(head)
    with threadpool_limits(1, "blas"):
        for n in args.sizes:
            ours = lwl_ms(n)
            ref = reference_ms(n)
            row = f"{n:>6} | {ours:8.2f} | {ref:12.2f} | {ref / ours:5.2f}x"
            if authors:
                a32, a64 = authors.ms(n, torch.float32), authors.ms(n, torch.float64)
                row += f" | {a32:11.2f} | {a32 / ours:5.2f}x | {a64:11.2f} | {a64 / ours:5.2f}x"
            print(row, flush=True)

        if args.families:
            fams = (("gaussian (adaptive)", None), ("mixture, 10 components", {"name": "mixture", "components": 10}),
                    ("pool of 5,000 points", {"name": "pool", "pool_size": 5000}))
            times = [(name, lwl_ms(250, fam)) for name, fam in fams]
            print("families, adaptive optimiser, N_k = 250, labels included:")
            for name, ms in times:
                print(f"  {name:24s}: {ms:7.2f} ms/iteration  ({ms / times[0][1]:5.2f}x the Gaussian)")

    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device")
        print(f"GPU: {torch.cuda.get_device_name()}; lwl iteration, cuda against cpu (float64)")
        for n in args.gpu_sizes:
            gpu = lwl_ms(n, device="cuda")
            cpu = lwl_ms(n) if n <= 4096 else float("nan")
            print(f"{n:>6} | cuda {gpu:8.2f} ms | cpu {cpu:8.2f} ms | {cpu / gpu:5.2f}x", flush=True)

    if args.readme_job:
        wall, res = readme_job()
        print(f"README job (examples/friedman1.json): {wall:.1f} s wall, {res['labels_used']} labels, "
              f"design {res['timings']['design_seconds']:.1f} s, evaluation {res['timings']['evaluation_seconds']:.1f} s")

    if args.paper_preset:
        from lwl.experiments import table1

        t = time.perf_counter()
        table1.run("paper")
        print(f"table1 --preset paper: {time.perf_counter() - t:.0f} s wall, one process (target <= 600 s on two)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
