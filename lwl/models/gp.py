"""Gaussian-process regression with fitted hyperparameters: the surrogate a lab deploys
(docs/method.md, "The model a lab deploys").

Prior f ~ GP(c, s^2 k_ell), observations y = f(x) + eps, eps ~ N(0, sigma_n^2), with an ARD
kernel (one lengthscale per input), Rasmussen & Williams (2006) conventions, as scikit-learn's
``RBF`` and ``Matern(nu=2.5)``:

- ``squared_exponential``: k(x, x') = exp(-r^2 / 2),
- ``matern52``: k(x, x') = (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r),

with r^2 = sum_d (x_d - x'_d)^2 / ell_d^2. (lwl's KRR kernel of the paper, exp(-||x-x'||^2 / l^2),
has no 1/2: an isotropic GP lengthscale ell is the KRR l / sqrt(2).)

**Hyperparameters** theta = (log ell_1..ell_d, log s^2, log sigma_n^2) maximise the log marginal
likelihood (R&W eq. 2.30, with the constant mean c):

    log p(y | X, theta) = -1/2 (y - c)^T K_y^{-1} (y - c) - 1/2 log |K_y| - n/2 log 2 pi,
    K_y = s^2 K_ell(X, X) + sigma_n^2 I.

The constant mean is profiled out: for each theta, c is its maximum-likelihood value
c = 1^T K_y^{-1} y / 1^T K_y^{-1} 1 (generalised least squares), so the optimiser sees
max_c log p. The maximisation is L-BFGS-B (scipy) on log scales with the gradient in closed form
(:func:`_lml_and_gradient`, checked against torch autograd in the tests), in float64, from ``restarts`` + 1 starts: the data's own scales (ell_d = the spread of
input d, s^2 = Var(y), sigma_n^2 = Var(y)/100), then draws log-uniform within the bounds from
``random_state``. Bounds are relative to the data: ell_d in ``lengthscale_bounds`` x the spread
of input d, s^2 in ``output_scale_bounds`` x Var(y), sigma_n^2 in ``noise_bounds`` x Var(y) (the
lower noise bound keeps K_y well conditioned). With more than ``max_fit_points`` points the
hyperparameters are fitted on a random subset of that size (an O(n^3) evaluation per step);
the model then conditions on every point.

**Which optimum is kept** (``select``). Every start ends at a local maximum of the likelihood;
by default (``"loo"``) the one kept, and with ``kernel="auto"`` the kernel kept, is the one of
lowest closed-form leave-one-out error of the mean on the fitting points (R&W sec. 5.4.2,
:func:`_loo_error`), not the one of highest likelihood (``"evidence"``, available by name). On
noise-free labels the likelihood can keep rising along a ridge to the bounds (noise at its
lower bound, output scale at its upper one: an interpolant with nugget 1e-12), whose predictions
are mostly worse: on ``examples/friedman1_budget.json``'s Q mixture at 2,000 labels (five draws),
that mode had the highest likelihood on every draw (0.09-0.36 nats per point above the best
optimum inside the bounds) and held-out Err 0.086-0.22 against 0.101; its LOO error was higher on
every draw (docs/method.md, "Which local optimum is kept"). LOO on the fitting points stands in
for held-out error; it cannot see what conditioning on every point does (the evidence check does).

**Prediction** at fixed hyperparameters (R&W eqs. 2.25-2.26): with alpha = K_y^{-1}(y - c),

    mean(x*) = c + s^2 k(x*, X) alpha,
    var(x*)  = s^2 - s^2 k(x*, X) K_y^{-1} k(X, x*) s^2,

the variance of the latent f (add sigma_n^2 for that of a new observation). The mean is kernel
ridge regression with the kernel s^2 k_ell and ridge sigma_n^2 on y - c: for fixed hyperparameters
the bilevel inner problem of the paper with this kernel.

**Multi-output** labels (n, p): p independent GPs, one set of hyperparameters (and mean) per
output.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import numpy as np
import torch
from pydantic import Field

from lwl.device import DTYPE, resolve_device
from lwl.params import StrictModel
from lwl.registry import MODELS

GP_KERNELS = ("squared_exponential", "matern52")
AUTO = "auto"  # both kernels fitted, the one of lower leave-one-out error kept (GaussianProcess.fit)
SELECTIONS = ("loo", "evidence")  # how a fit chooses among its local optima and kernels (GaussianProcess)
DOCUMENT_KIND = "lwl.model"
DOCUMENT_VERSION = 1
PREDICT_BLOCK = 4096  # test points per kernel block in predict
LOO_BLOCK_ELEMENTS = 1 << 22  # n x columns of one block of loo_residuals (32 MB of float64)
MIN_FIT_POINTS = 300  # the likelihood's fitting subset of a gp job at d <= 8 (default_fit_points)
FIT_POINTS_PER_HYPERPARAMETER = 30
FIT_POINTS_RULE = f"max({MIN_FIT_POINTS}, {FIT_POINTS_PER_HYPERPARAMETER} (d + 2))"  # default_fit_points, in words
FINAL_FIT_POINTS = 2000  # the final fit's points (GaussianProcess._final_fit): a bounded O(M^3) per step


def default_fit_points(d: int) -> int:
    """The fitting subset of a gp whose ``max_fit_points`` is None (a job's default): the larger of
    300 and 30 points per hyperparameter, 30 (d + 2) (d lengthscales, the output scale, the
    noise). Why: 300 points do not pin 22 hyperparameters down. Measured (docs/method.md, "How
    many points the likelihood is fitted on"): on the Welch et al. (1992) function (d = 20,
    2,000 labels of a three-member Q), fits on 300 points reached held-out Err 0.0031 on two of
    four draws of the same law against 0.0004-0.0005 on the others; on 450, 600 or 1,000 points
    all four read 0.00037-0.00046; on a smooth function of 30 inputs, 300 / 600 / 960 points gave
    0.027-0.032 / 0.018-0.021 / 0.015-0.016 on three draws. Below d = 9 the rule is 300, the
    default before it (the committed studies' problems at d <= 8 keep their numbers)."""
    return max(MIN_FIT_POINTS, FIT_POINTS_PER_HYPERPARAMETER * (int(d) + 2))


def ard_kernel(kind: str, x: torch.Tensor, y: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
    """k_ell(x_i, y_j) (unit output scale) as an (n, m) matrix; differentiable in ``lengthscale``."""
    if not (torch.is_grad_enabled() and lengthscale.requires_grad):
        return _ard_kernel_in_place(kind, x, y, lengthscale)
    xs, ys = x / lengthscale, y / lengthscale
    # |x|^2 + |y|^2 - 2 x.y: one product instead of an (n, m, d) difference (memory); clamped at 0
    # against round-off (the clamp also passes no gradient at r = 0, where sqrt's would be infinite)
    r2 = ((xs * xs).sum(1)[:, None] + (ys * ys).sum(1)[None, :] - 2.0 * xs @ ys.T).clamp_min(0.0)
    if kind == "squared_exponential":
        return torch.exp(-0.5 * r2)
    if kind == "matern52":
        r5 = torch.sqrt(5.0 * r2.clamp_min(1e-300))
        return (1.0 + r5 + r5 * r5 / 3.0) * torch.exp(-r5)
    raise ValueError(f"kernel: unknown GP kernel {kind!r}; known: {list(GP_KERNELS)}")


def _ard_kernel_in_place(kind: str, x: torch.Tensor, y: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
    """:func:`ard_kernel` without autograd, every elementwise step in place on the one (n, m)
    matrix: at n = m = 8,000 each temporary is 512 MB, and the out-of-place version spent more
    time allocating them than the Cholesky factorisation took (a budgeted job at 8,000 labels)."""
    xs, ys = x / lengthscale, y / lengthscale
    # r^2 = (|x|^2 + |y|^2) - 2 x.y in ard_kernel's order of operations (the same round-off)
    k = (xs * xs).sum(1)[:, None] + (ys * ys).sum(1)[None, :]
    k.addmm_(xs, ys.T, alpha=-2.0).clamp_min_(0.0)
    if kind == "squared_exponential":
        return k.mul_(-0.5).exp_()
    if kind == "matern52":
        r5 = k.mul_(5.0).sqrt_()
        e = torch.exp(-r5)
        return r5.mul_(r5 / 3.0 + 1.0).add_(1.0).mul_(e)  # (1 + r5 + r5^2 / 3) exp(-r5)
    raise ValueError(f"kernel: unknown GP kernel {kind!r}; known: {list(GP_KERNELS)}")


def _lml_terms(kind: str, X: torch.Tensor, y: torch.Tensor, log_ell: torch.Tensor, log_s2: torch.Tensor,
               log_noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log marginal likelihood at the profiled mean, that mean c, the Cholesky factor L of K_y,
    alpha = K_y^{-1}(y - c)) for one output (R&W eq. 2.30, module docstring)."""
    n = X.shape[0]
    K = torch.exp(log_s2) * ard_kernel(kind, X, X, torch.exp(log_ell))
    K = K + torch.exp(log_noise) * torch.eye(n, dtype=X.dtype, device=X.device)
    L = torch.linalg.cholesky(K)
    ones = torch.ones(n, 1, dtype=X.dtype, device=X.device)
    both = torch.cholesky_solve(torch.cat([y[:, None], ones], 1), L)  # K_y^{-1} [y, 1]
    c = both[:, 0].sum() / both[:, 1].sum()  # 1^T K^-1 y / 1^T K^-1 1
    alpha = both[:, 0] - c * both[:, 1]  # K_y^{-1} (y - c)
    lml = -0.5 * (y - c) @ alpha - torch.log(torch.diagonal(L)).sum() - 0.5 * n * math.log(2 * math.pi)
    return lml, c, L, alpha


def _lml_and_gradient(kind: str, X: torch.Tensor, y: torch.Tensor,
                      theta: torch.Tensor) -> tuple[float, torch.Tensor]:
    """log p(y | X, theta) at the profiled mean and its gradient in theta = (log ell_1..ell_d,
    log s^2, log sigma_n^2), in closed form (R&W eq. 5.9):

        d log p / d theta_j = 1/2 tr((alpha alpha^T - K_y^{-1}) dK_y/d theta_j),

    the mean held at its maximum-likelihood value (it maximises log p, so its own change
    contributes nothing: the envelope theorem). With W = alpha alpha^T - K_y^{-1}:

    - log sigma_n^2: dK_y = sigma_n^2 I, so 1/2 sigma_n^2 tr(W);
    - log s^2: dK_y = s^2 K_ell, so 1/2 s^2 sum(W * K_ell);
    - log ell_d: dk/d log ell_d = g(r) (x_d - x'_d)^2 / ell_d^2 with g = k for the squared
      exponential and g = 5/3 (1 + sqrt5 r) exp(-sqrt5 r) for Matern 5/2; with M = W * g and
      a = x_d / ell_d, sum_ij M_ij (a_i - a_j)^2 = 2 a^2 . M1 - 2 a^T M a.

    One Cholesky factor and one inverse, O(n^3 + n^2 d): about a fifth of autograd's time through
    the factorisation (bench/gp_fit.py). Raises ``torch.linalg.LinAlgError`` where K_y is not
    positive definite."""
    n, d = X.shape
    ell, s2, noise = torch.exp(theta[:d]), torch.exp(theta[d]), torch.exp(theta[d + 1])
    A = X / ell
    r2 = ((A * A).sum(1)[:, None] + (A * A).sum(1)[None, :] - 2.0 * A @ A.T).clamp_min(0.0)
    if kind == "squared_exponential":
        Kl = torch.exp(-0.5 * r2)
        g = Kl
    elif kind == "matern52":
        r5 = torch.sqrt(5.0 * r2)
        e = torch.exp(-r5)
        Kl = (1.0 + r5 + r5 * r5 / 3.0) * e
        g = (5.0 / 3.0) * (1.0 + r5) * e
    else:
        raise ValueError(f"kernel: unknown GP kernel {kind!r}; known: {list(GP_KERNELS)}")
    Ky = s2 * Kl
    Ky.diagonal().add_(noise)
    L, info = torch.linalg.cholesky_ex(Ky)
    if int(info) != 0:
        raise torch.linalg.LinAlgError("K_y is not positive definite")
    ones = torch.ones(n, 1, dtype=X.dtype, device=X.device)
    both = torch.cholesky_solve(torch.cat([y[:, None], ones], 1), L)
    c = both[:, 0].sum() / both[:, 1].sum()
    alpha = both[:, 0] - c * both[:, 1]
    lml = -0.5 * (y - c) @ alpha - torch.log(torch.diagonal(L)).sum() - 0.5 * n * math.log(2 * math.pi)
    W = torch.outer(alpha, alpha) - torch.cholesky_inverse(L)
    M = W * g
    grad_ell = s2 * ((A * A).T @ M.sum(1) - (A * (M @ A)).sum(0))  # 1/2 s^2 (2 a^2.M1 - 2 a^T M a)
    grad = torch.cat([grad_ell, (0.5 * s2 * (W * Kl).sum())[None], (0.5 * noise * torch.diagonal(W).sum())[None]])
    return float(lml), grad


def _loo_error(kind: str, X: torch.Tensor, y: torch.Tensor, theta: np.ndarray) -> float:
    """Closed-form leave-one-out squared error of the GP mean at log hyperparameters ``theta``
    (Rasmussen & Williams 2006, sec. 5.4.2, eq. 5.12): the residual of point i predicted from the
    others is [K_y^{-1}(y - c)]_i / [K_y^{-1}]_ii, with the constant mean c at its maximum-likelihood
    value on all points (not re-estimated without i). Returned as mean(r_i^2) / Var(y) (a
    standardised error, comparable across outputs); inf where K_y is not positive definite."""
    d = X.shape[1]
    t = torch.as_tensor(theta, dtype=X.dtype, device=X.device)
    with torch.no_grad():
        try:  # the likelihood's own factor, profiled mean and alpha (one place computes them)
            _, _, L, alpha = _lml_terms(kind, X, y, t[:d], t[d], t[d + 1])
        except torch.linalg.LinAlgError:
            return math.inf
        r = alpha / torch.diagonal(torch.cholesky_inverse(L))
        var = float(y.var(correction=0))  # as np.var
        return float((r * r).mean()) / (var if var > 0 else 1.0)


class GaussianProcess:
    """GP regression with ARD lengthscales, output scale, noise and a constant mean fitted by
    maximum marginal likelihood (module docstring). scikit-learn's habits: the constructor
    stores its arguments, ``fit`` returns self, learned state ends in ``_``.

    Parameters
    ----------
    kernel : "auto" | "matern52" | "squared_exponential"; "auto" fits both and keeps the one
        ``select`` prefers (summed over outputs; the chosen one is ``kernel_``)
    select : "loo" | "evidence": among the local optima of the starts (and the kernels with
        "auto"), keep the one of lowest leave-one-out error on the fitting points (the default)
        or the one of highest log marginal likelihood (module docstring)
    lengthscale, output_scale, noise : starting values (``optimize=True``; the first start) or
        the hyperparameters used as they are (``optimize=False``); None: the data's scales.
        ``lengthscale`` is one value or one per input.
    mean : the constant mean when ``optimize=False`` (None: its maximum-likelihood value)
    optimize : fit the hyperparameters by maximising the log marginal likelihood
    restarts : random starts besides the first
    max_fit_points : the hyperparameters are fitted on at most this many points (a random subset);
        None: :func:`default_fit_points` of the inputs' dimension (a job's default)
    refit_points : a subset fit that does not carry over is fitted again on up to this many
        points (``fit``: the evidence check below; None or <= max_fit_points: never)
    final_fit_points : the kept hyperparameters are then refined on up to this many points
        (``fit``: the final fit below; None or <= the fitting subset: never)
    lengthscale_bounds, output_scale_bounds, noise_bounds : relative bounds (module docstring)
    random_state : seed of the random starts and of the fitting subset
    device : "cpu" | "cuda" | "auto"
    fit_draws : ``fit`` is repeated this many times, each from its own seed (the first:
        ``random_state``), and the draw of lowest leave-one-out error on one common subset is kept
        (:meth:`_fit_best_draw`); 1: one fit
    """

    def __init__(self, kernel: str = AUTO, lengthscale=None, output_scale: float | None = None,
                 noise: float | None = None, mean=None, optimize: bool = True, restarts: int = 3,
                 max_fit_points: int | None = 1000, refit_points: int | None = 2000,
                 final_fit_points: int | None = FINAL_FIT_POINTS, lengthscale_bounds: tuple[float, float] = (1e-3, 1e4),
                 output_scale_bounds: tuple[float, float] = (1e-4, 1e6),
                 noise_bounds: tuple[float, float] = (1e-6, 1.0), random_state: int = 0, device: str = "cpu",
                 select: str = "loo", fit_draws: int = 1):
        self.kernel = kernel
        self.fit_draws = fit_draws
        self.select = select
        self.lengthscale = lengthscale
        self.output_scale = output_scale
        self.noise = noise
        self.mean = mean
        self.optimize = optimize
        self.restarts = restarts
        self.max_fit_points = max_fit_points
        self.refit_points = refit_points
        self.final_fit_points = final_fit_points
        self.lengthscale_bounds = lengthscale_bounds
        self.output_scale_bounds = output_scale_bounds
        self.noise_bounds = noise_bounds
        self.random_state = random_state
        self.device = device

    # -- fitting ------------------------------------------------------------------------------
    def _tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE, device=self.device_)

    def fit(self, X, y) -> "GaussianProcess":
        """Fit the hyperparameters (on a subset beyond ``max_fit_points``) and condition on every
        point. **Evidence check** of a subset fit: conditioned on all n points, the log marginal
        likelihood per point is normally *higher* than on the m fitting points (more data, better
        prediction: by 0.9-1.5 nats on Friedman 1 and 2 and Sobol G at n = 2,000, m = 300). Where
        it is lower, the subset's hyperparameters do not carry over (on the robustness study's
        p04, Sobol G in d = 7: ARD lengthscales of 3e4 in three inputs, fitted on 300 points,
        collapse the 2,000 points onto near-duplicates at a noise of 2e-6 Var(y); -12.6 nats per
        point on the subset, -58 on all, held-out Err 1.09-3.29 against 0.80 when fitted on all);
        then the fit is repeated on 4x as many points, up to ``refit_points``, until the check
        passes. ``fit_points_`` is the number of points the kept fit used.

        **Final fit** (:meth:`_final_fit`): the kept hyperparameters are then refined by the
        likelihood on up to ``final_fit_points`` points, from the kept optimum alone, and the
        refined ones replace them where their leave-one-out error on those points is lower."""
        if self.optimize and int(self.fit_draws) > 1:  # the whole of it once per draw (_fit_best_draw)
            return self._fit_best_draw(X, y)
        n, m = len(X), self._fit_points(X)
        cap = max(m, min(n, self.refit_points or 0))
        self._fit_on(X, y, m)
        while self.optimize and m < cap and np.any(self._evidence_gap(n) > 0):
            m = min(4 * m, cap)
            self._refit_on(X, y, m)
        self._final_fit(X, y)
        return self

    def _fit_best_draw(self, X, y) -> "GaussianProcess":
        """``fit`` repeated ``fit_draws`` times, draw k from its own seed (k = 0: ``random_state``
        itself, so the first draw is the one-draw fit), each with its own fitting subsets and random
        starts; kept: the draw of lowest closed-form leave-one-out error of the mean (R&W sec.
        5.4.2, summed over outputs) on one common subset of M = min(n, ``final_fit_points`` or
        2,000) points drawn from ``random_state`` apart from every draw's.

        Why: beyond the evidence check's 2,000 points the hyperparameters depend on which 2,000 of
        the n labels a fit saw. On the 8,000-label study's p12 (Sobol G, d = 8; docs/method.md,
        "Which fit is served"), the same 8,000 labels fitted from seeds 0-4 gave held-out Err 1.21,
        2.07, 0.74, 0.83 and 0.72 (Q's mixture + GP's five draws: 0.68-0.75); their leave-one-out
        errors on one common 2,000 points, 0.92, 1.85, 0.77, 0.91 and 0.60, order them but for one
        pair. Measured in the study (three draws for every GP, docs/results/budget-full-8000-gp-draws3)
        it did not mend that row: p12's served fit 1.21 -> 1.075 against Q's mixture + GP's 0.72, and
        the other rows within their ties; so one draw is the default. A draw costs one whole fit. ``fit_draw_`` is the kept draw, ``draw_loo_errors_``
        their errors on the common subset (rows ``draw_loo_rows_``), ``draw_seeds_`` their seeds."""
        import inspect

        params = {k: getattr(self, k) for k in inspect.signature(GaussianProcess.__init__).parameters if k != "self"}
        seeds = [int(self.random_state)] + [int(np.random.SeedSequence([int(self.random_state), k]).generate_state(1)[0])
                                            for k in range(1, int(self.fit_draws))]
        draws = [GaussianProcess(**{**params, "fit_draws": 1, "random_state": s}).fit(X, y) for s in seeds]
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(y, dtype=np.float64).reshape(len(X), -1)
        n, M = len(X), min(len(X), int(self.final_fit_points or FINAL_FIT_POINTS))
        rows = np.arange(n)
        if n > M:  # a stream of its own ("common" in ASCII): no draw's fitting subset
            rows = np.sort(np.random.default_rng([int(self.random_state), 0x636F6D6D6F6E, M]).choice(n, M, replace=False))
        Xc = draws[0]._tensor(X[rows])
        errors = []
        for g in draws:
            theta = np.concatenate([np.log(g.lengthscale_), np.log(g.output_scale_)[:, None], np.log(g.noise_)[:, None]], 1)
            errors.append(float(sum(_loo_error(g.kernel_, Xc, g._tensor(Y[rows, j]), theta[j]) for j in range(Y.shape[1]))))
        best = int(np.argmin(errors))  # the first of equal ones
        self.__dict__.update({k: v for k, v in vars(draws[best]).items() if k.endswith("_")})
        self.fit_draw_, self.draw_loo_errors_, self.draw_seeds_ = best, np.array(errors), np.array(seeds)
        self.draw_loo_rows_ = rows
        return self

    def _final_fit(self, X, y) -> None:
        """Refine the kept hyperparameters on M = min(n, ``final_fit_points``) points (all of them
        when n <= M, else a random subset drawn from ``random_state``): L-BFGS-B on the log
        marginal likelihood of those M points from the kept optimum alone (one start, the kernel
        already chosen), the refined values kept per output where their closed-form leave-one-out
        error on the M points is lower (``select="loo"``; ``"evidence"``: where their likelihood
        there is higher, as it is whenever the optimiser moved), then conditioned on every point.

        Why: the subset's hyperparameters are the likelihood's optimum on 300 points (at d <= 8),
        an estimate of the lengthscales that 2,000 labels pin down better. Measured on Q's
        mixture of four engineering functions at 2,000 labels (d 6-10, two draws each, held-out
        Err; docs/method.md, "The final fit"): OTL 3.2e-5 -> 2.1e-5 and 3.0e-5 -> 2.2e-5, piston
        5.8e-5 -> 3.9e-5 and 5.3e-5 -> 4.6e-5, borehole 4.9e-5 -> 4.4e-5 and 5.9e-5 -> 5.5e-5, wing
        weight 1.6e-5 -> 1.3e-5, at 15-60 s per fit on one core (an O(M^3) factorisation per step;
        the subset's fit took 2-7 s). The cap keeps that cost bounded at any n (at 8,000 labels
        the refinement is on 2,000 of them). ``final_fit_points_`` is M (0: no refinement) and
        ``final_fit_kept_`` says per output whether the refined values were kept."""
        n = len(X)
        M = min(n, int(self.final_fit_points or 0))
        self.final_fit_points_ = 0
        self.final_fit_kept_ = np.zeros(self.Y_.shape[1], dtype=bool)
        if not self.optimize or M <= self.fit_points_:
            return
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(y, dtype=np.float64).reshape(n, -1)
        changed = False
        for j in range(Y.shape[1]):
            rows = np.arange(n)
            if n > M:
                rows = np.sort(np.random.default_rng([self.random_state, j, M]).choice(n, M, replace=False))
            lo, hi = self._bounds(X, Y[:, j])
            Xf, yf = self._tensor(X[rows]), self._tensor(Y[rows, j])
            kept = np.log(np.concatenate([self.lengthscale_[j], [self.output_scale_[j], self.noise_[j]]]))
            theta, lml = self._maximise(Xf, yf, np.clip(kept, lo, hi), lo, hi)
            if lml <= -1e299:  # met the not-positive-definite wall at once: no optimum
                continue
            if self.select == "loo":
                better = _loo_error(self.kernel_, Xf, yf, theta) < _loo_error(self.kernel_, Xf, yf, kept)
            else:
                better = not np.array_equal(theta, kept)
            if better:
                d = X.shape[1]
                self.lengthscale_[j] = np.exp(theta[:d])
                self.output_scale_[j], self.noise_[j] = float(np.exp(theta[d])), float(np.exp(theta[d + 1]))
                self.final_fit_kept_[j], changed = True, True
        self.final_fit_points_ = M
        if changed:
            self._condition(self._given_mean())

    def _evidence_gap(self, n: int) -> np.ndarray:
        """Per output: log marginal likelihood per point on the fitting points minus that on all
        n points (> 0: the fit does not carry over; ``fit``'s evidence check)."""
        return self.fit_log_marginal_likelihood_ / min(self.fit_points_, n) - self.log_marginal_likelihood_ / n

    def _refit_on(self, X, y, m: int) -> None:
        """A refit of the evidence check on m points: the kernel already chosen only (``auto``
        compared the kernels on the subset; ``kernel_loo_error_`` and ``kernel_evidence_`` keep that
        comparison), from two
        starts: the data's scales and the last fit's optimum, without random starts. On p04's
        2,000 points one fit took 150 s with both kernels and three starts each (each likelihood
        step is an O(m^3) factorisation and inverse at m = 2,000)."""
        warm = np.concatenate([np.log(self.lengthscale_), np.log(self.output_scale_)[:, None],
                               np.log(self.noise_)[:, None]], 1)
        self.fit_points_ = min(m, len(X))
        self._fit_hyperparameters(X, y, self.kernel_, m, warm=warm)
        self._condition(self._given_mean())

    def _fit_on(self, X, y, m: int, condition: bool = True) -> None:
        """``fit`` with the hyperparameters fitted on at most m points (``condition=False``:
        without conditioning on all of them)."""
        self.fit_points_ = min(m, len(X))
        if self.kernel == AUTO:
            self._fit_auto(X, y, m, condition)
            return
        self._fit_hyperparameters(X, y, self.kernel, m)
        if condition:
            self._condition(self._given_mean())

    def fit_hyperparameters(self, X, y) -> "GaussianProcess":
        """``fit`` without conditioning on (X, y), so without its evidence check and final fit:
        the learned hyperparameters (``kernel_``, ``lengthscale_``, ``output_scale_``, ``noise_``,
        ``fit_log_marginal_likelihood_``) and nothing to predict with. For a caller that
        conditions other training sets at these values (a budgeted design's scores), it saves the
        O(n^3) factorisation of all n points (and the final fit's O(M^3) steps)."""
        self._fit_on(X, y, self._fit_points(X), condition=False)
        return self

    def _fit_points(self, X) -> int:
        """``max_fit_points``, or (None) :func:`default_fit_points` of the inputs' dimension."""
        if self.max_fit_points is not None:
            return int(self.max_fit_points)
        X = np.asarray(X)
        return default_fit_points(X.shape[1] if X.ndim == 2 else 1)

    def _given_mean(self):
        if self.mean is None:
            return None
        return np.broadcast_to(np.asarray(self.mean, dtype=np.float64), (self.Y_.shape[1],))

    def _fit_hyperparameters(self, X, y, kernel: str, fit_points: int, warm: np.ndarray | None = None) -> None:
        """Everything of ``fit`` but the conditioning: the learned hyperparameters and
        ``fit_log_marginal_likelihood_``, the maximised evidence on the fitting points (all of
        them up to ``fit_points``; NaN without ``optimize``). ``warm`` (outputs x (d + 2) log
        hyperparameters): a refit's starts, the data's scales and these, no random ones."""
        if kernel not in GP_KERNELS:
            raise ValueError(f"kernel: unknown GP kernel {kernel!r}; known: {[AUTO, *GP_KERNELS]}")
        if self.select not in SELECTIONS:
            raise ValueError(f"select: unknown selection {self.select!r}; known: {list(SELECTIONS)}")
        self.kernel_ = kernel
        self.device_ = resolve_device(self.device)
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.single_output_ = y.ndim == 1
        Y = y.reshape(len(y), -1)
        if X.ndim != 2 or len(X) != len(Y) or len(X) < 2:
            raise ValueError(f"X: expected (n, d) inputs with n >= 2 matching {len(Y)} labels, got shape {X.shape}")
        self.X_ = self._tensor(X)
        self.Y_ = Y
        self.n_features_in_ = X.shape[1]
        outputs = [self._fit_output(X, Y[:, j], j, fit_points, None if warm is None else warm[j])
                   for j in range(Y.shape[1])]
        self.lengthscale_ = np.stack([o[0] for o in outputs])  # (p, d)
        self.output_scale_ = np.array([o[1] for o in outputs])
        self.noise_ = np.array([o[2] for o in outputs])
        self.fit_log_marginal_likelihood_ = np.array([o[3] for o in outputs])
        self.fit_loo_error_ = np.array([o[4] for o in outputs])

    def _fit_auto(self, X, y, fit_points: int, condition: bool) -> None:
        """``kernel="auto"``: the hyperparameters fitted with each kernel on the same points
        (the same fitting subset, the same starts); the one of lower leave-one-out error on
        those points (``select="loo"``, summed over outputs) or of higher maximised log marginal
        likelihood (``"evidence"``: as many hyperparameters each, so the evidence compares them
        fairly) is conditioned on every point and kept. Without ``optimize`` the evidence of the
        given values on all points decides. Only the winner is conditioned: one O(n^3)
        factorisation of all n points, not one per kernel. On Table 1's g4 (d = 10, 2,000
        labels) the squared exponential's evidence is higher and its held-out Err half the
        Matern's (docs/method.md, "The model a lab deploys"); with ``select="loo"`` the budget
        study's g4 row is the same to the last digit (the same kernel kept)."""
        import inspect

        params = {k: getattr(self, k) for k in inspect.signature(GaussianProcess.__init__).parameters if k != "self"}
        fits = []
        for kind in GP_KERNELS:
            g = GaussianProcess(**{**params, "kernel": kind})
            g._fit_hyperparameters(X, y, kind, fit_points)
            if not self.optimize:  # nothing maximised: the evidence of the given values on all points
                g._condition(g._given_mean())
                g.fit_log_marginal_likelihood_ = g.log_marginal_likelihood_
            fits.append(g)
        if self.select == "loo" and self.optimize:
            best = min(fits, key=lambda g: float(np.sum(g.fit_loo_error_)))
        else:
            best = max(fits, key=lambda g: float(np.sum(g.fit_log_marginal_likelihood_)))
        if condition and not hasattr(best, "alpha_"):
            best._condition(best._given_mean())
        self.__dict__.update({k: v for k, v in vars(best).items() if k.endswith("_") and k != "fit_points_"})
        self.kernel_evidence_ = {g.kernel_: float(np.sum(g.fit_log_marginal_likelihood_)) for g in fits}
        self.kernel_loo_error_ = {g.kernel_: float(np.sum(g.fit_loo_error_)) for g in fits}

    def _fit_output(self, X: np.ndarray, y: np.ndarray, j: int, fit_points: int,
                    warm: np.ndarray | None = None) -> tuple[np.ndarray, float, float, float, float]:
        """(lengthscales, output scale, noise, LML and leave-one-out error on the fitting points)
        of output j at the local optimum ``select`` keeps among the starts'; the hyperparameters
        as given (and NaN, NaN) without ``optimize``; ``warm``: see ``_fit_hyperparameters``."""
        d = X.shape[1]
        var = float(np.var(y)) or 1.0
        spread = X.std(0)
        spread[spread == 0] = 1.0
        ell0 = np.broadcast_to(np.asarray(self.lengthscale if self.lengthscale is not None else spread,
                                          dtype=np.float64), (d,))
        s0 = self.output_scale if self.output_scale is not None else var
        n0 = self.noise if self.noise is not None else var / 100.0
        if not self.optimize:  # (a score of a budgeted design: conditioning is all it needs)
            return ell0.copy(), float(s0), float(n0), math.nan, math.nan
        lo, hi = self._bounds(X, y)
        rng = np.random.default_rng([self.random_state, j])
        rows = np.arange(len(X))
        if len(X) > fit_points:  # an O(n^3) likelihood: fitted on a subset, conditioned on all
            rows = np.sort(rng.choice(len(X), fit_points, replace=False))
        Xf, yf = self._tensor(X[rows]), self._tensor(y[rows])
        starts = [np.clip(np.log(np.concatenate([ell0, [s0, n0]])), lo, hi)]
        if warm is None:
            starts += [rng.uniform(lo, hi) for _ in range(self.restarts)]
        else:
            starts.append(np.clip(warm, lo, hi))
        optima = [self._maximise(Xf, yf, theta0, lo, hi) for theta0 in starts]
        if self.select == "loo":
            # a start that met the not-positive-definite wall at once is no optimum (its LOO, built
            # by another kernel routine, could still factor): never kept
            errors = [_loo_error(self.kernel_, Xf, yf, theta) if lml > -1e299 else math.inf for theta, lml in optima]
            # lowest leave-one-out error (starts that reach one optimum differ in round-off, so which
            # of them is kept moves the hyperparameters by about that much; the first of equal ones)
            i = int(np.argmin(errors))
            loo = errors[i]
        else:
            i = max(range(len(optima)), key=lambda k: optima[k][1])
            loo = _loo_error(self.kernel_, Xf, yf, optima[i][0])
        theta, lml = optima[i]
        return np.exp(theta[:d]), float(np.exp(theta[d])), float(np.exp(theta[d + 1])), float(lml), float(loo)

    def _bounds(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of the log hyperparameters (log ell_1..ell_d, log s^2, log sigma_n^2): the
        relative bounds times the spread of each input and Var(y) (module docstring)."""
        var = float(np.var(y)) or 1.0
        spread = X.std(0)
        spread[spread == 0] = 1.0
        lo = np.log(np.concatenate([spread * self.lengthscale_bounds[0], [var * self.output_scale_bounds[0],
                                                                          var * self.noise_bounds[0]]]))
        hi = np.log(np.concatenate([spread * self.lengthscale_bounds[1], [var * self.output_scale_bounds[1],
                                                                          var * self.noise_bounds[1]]]))
        return lo, hi

    def _maximise(self, X: torch.Tensor, y: torch.Tensor, theta0: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray) -> tuple[np.ndarray, float]:
        """L-BFGS-B on -log p from ``theta0`` (log scales) within [lo, hi]: (theta, log p)."""
        from scipy.optimize import minimize

        def negative(theta: np.ndarray) -> tuple[float, np.ndarray]:
            t = torch.as_tensor(theta, dtype=DTYPE, device=self.device_)
            try:
                lml, grad = _lml_and_gradient(self.kernel_, X, y, t)
            except torch.linalg.LinAlgError:  # not positive definite here: a wall for the line search
                return 1e300, np.zeros_like(theta)
            return -lml, -grad.cpu().numpy()

        res = minimize(negative, theta0, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
                       options={"maxiter": 200})
        return res.x, -float(res.fun)

    def _condition(self, mean) -> None:
        """Factor K_y and form alpha at the learned hyperparameters; the mean is ``mean`` when
        given, else its maximum-likelihood value. The same factor gives the log marginal
        likelihood on every point, ``log_marginal_likelihood_`` (R&W eq. 2.30):
        -1/2 (y - c)^T alpha - sum log diag L - n/2 log 2 pi."""
        self.chol_, self.alpha_, means, lml = [], [], [], []
        for j in range(self.Y_.shape[1]):
            y = self._tensor(self.Y_[:, j])
            ell = self._tensor(self.lengthscale_[j])
            with torch.no_grad():
                K = self.output_scale_[j] * ard_kernel(self.kernel_, self.X_, self.X_, ell)
                K.diagonal().add_(float(self.noise_[j]))
                L, info = torch.linalg.cholesky_ex(K)
                if int(info) != 0:
                    raise np.linalg.LinAlgError("K_y is not positive definite; raise the noise's lower bound")
                both = torch.cholesky_solve(torch.stack([y, torch.ones_like(y)], 1), L)
                c = float(mean[j]) if mean is not None else float(both[:, 0].sum() / both[:, 1].sum())
                alpha = both[:, 0] - c * both[:, 1]
                self.chol_.append(L)
                self.alpha_.append(alpha)
                means.append(c)
                lml.append(float(-0.5 * (y - c) @ alpha - torch.log(L.diagonal()).sum()
                                 - 0.5 * len(y) * math.log(2 * math.pi)))
        self.mean_ = np.array(means)
        self.log_marginal_likelihood_ = np.array(lml)

    # -- prediction ---------------------------------------------------------------------------
    def predict(self, X, return_std: bool = False):
        """Posterior mean (and the latent f's standard deviation) at ``X`` (R&W eqs. 2.25-2.26):
        (m,) for single-output labels, (m, p) otherwise."""
        X = self._tensor(X).reshape(-1, self.n_features_in_)
        p = len(self.alpha_)
        mu = np.empty((X.shape[0], p))
        sd = np.empty((X.shape[0], p))
        with torch.no_grad():
            for j in range(p):
                ell = self._tensor(self.lengthscale_[j])
                s2 = float(self.output_scale_[j])
                for i in range(0, X.shape[0], PREDICT_BLOCK):
                    k = s2 * ard_kernel(self.kernel_, self.X_, X[i:i + PREDICT_BLOCK], ell)  # (n, b)
                    mu[i:i + PREDICT_BLOCK, j] = (self.mean_[j] + k.T @ self.alpha_[j]).cpu().numpy()
                    if return_std:
                        v = torch.linalg.solve_triangular(self.chol_[j], k, upper=False)
                        var = (s2 - (v * v).sum(0)).clamp_min(0.0)
                        sd[i:i + PREDICT_BLOCK, j] = var.sqrt().cpu().numpy()
        if self.single_output_:
            mu, sd = mu[:, 0], sd[:, 0]
        return (mu, sd) if return_std else mu

    def loo_residuals(self, rows=None) -> np.ndarray:
        """Leave-one-out residuals y_i - mean_{-i}(x_i) of the conditioned model at its training
        points ``rows`` (None: all), in closed form (R&W sec. 5.4.2, eq. 5.12):
        [K_y^{-1}(y - c)]_i / [K_y^{-1}]_ii, the hyperparameters and the constant mean c held at
        their fitted values (not refitted without point i). [K_y^{-1}]_ii = ||L^{-1} e_i||^2 from
        the model's own Cholesky factor, in blocks of columns: O(n^2) per row asked for, no n x n
        inverse. (len(rows),) for single-output labels, (len(rows), p) otherwise."""
        n = len(self.X_)
        rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise ValueError(f"rows: training rows are 0..{n - 1}")
        out = np.empty((len(rows), len(self.alpha_)))
        block = max(1, LOO_BLOCK_ELEMENTS // max(n, 1))
        with torch.no_grad():
            for j, (L, alpha) in enumerate(zip(self.chol_, self.alpha_)):
                for s in range(0, len(rows), block):
                    r = torch.as_tensor(rows[s:s + block], device=L.device)
                    E = torch.zeros(n, len(r), dtype=L.dtype, device=L.device)
                    E[r, torch.arange(len(r), device=L.device)] = 1.0
                    diag = (torch.linalg.solve_triangular(L, E, upper=False) ** 2).sum(0)
                    out[s:s + block, j] = (alpha[r] / diag).cpu().numpy()
        return out[:, 0] if self.single_output_ else out

    def log_marginal_likelihood(self, theta=None, output: int = 0, mean=None) -> float:
        """log p(y | X, theta) of ``output`` (R&W eq. 2.30) at theta = (log ell, log s^2,
        log sigma_n^2) (default: the fitted ones), at the constant ``mean`` (default: its
        maximum-likelihood value)."""
        d = self.n_features_in_
        if theta is None:
            theta = np.concatenate([np.log(self.lengthscale_[output]),
                                    [np.log(self.output_scale_[output]), np.log(self.noise_[output])]])
        theta = np.asarray(theta, dtype=np.float64)
        y = self._tensor(self.Y_[:, output])
        if mean is None:
            with torch.no_grad():
                try:
                    return float(_lml_terms(self.kernel_, self.X_, y, *(self._tensor(v) for v in
                                                                        (theta[:d], theta[d], theta[d + 1])))[0])
                except torch.linalg.LinAlgError:
                    return -math.inf
        with torch.no_grad():
            K = np.exp(theta[d]) * ard_kernel(self.kernel_, self.X_, self.X_, self._tensor(np.exp(theta[:d])))
            K.diagonal().add_(float(np.exp(theta[d + 1])))
            L = torch.linalg.cholesky(K)
            r = y - float(mean)
            a = torch.cholesky_solve(r[:, None], L)[:, 0]
            return float(-0.5 * r @ a - torch.log(L.diagonal()).sum() - 0.5 * len(r) * math.log(2 * math.pi))

    # -- the document -------------------------------------------------------------------------
    def to_spec(self, training_set: bool = True) -> dict:
        """The versioned model document (:func:`lwl.models.from_spec` reads it back)."""
        from lwl import __version__

        doc = {"kind": DOCUMENT_KIND, "version": DOCUMENT_VERSION, "lwl_version": __version__, "model": "gp",
               "kernel": self.kernel_, "std": "latent: sqrt of the posterior variance of f (R&W eq. 2.26); add "
                                             "noise for that of a new measurement",
               "outputs": [{"lengthscale": self.lengthscale_[j].tolist(), "output_scale": float(self.output_scale_[j]),
                            "noise": float(self.noise_[j]), "mean": float(self.mean_[j]),
                            "log_marginal_likelihood": float(self.log_marginal_likelihood_[j])}
                           for j in range(len(self.alpha_))],
               "single_output": bool(self.single_output_)}
        if training_set:
            doc["training_set"] = {"inputs": self.X_.cpu().numpy().tolist(),
                                   "labels": (self.Y_[:, 0] if self.single_output_ else self.Y_).tolist()}
        return doc

    @classmethod
    def from_spec(cls, doc: dict, device: str = "cpu") -> "GaussianProcess":
        """The GP of a model document, conditioned on its training set at its hyperparameters
        and mean (no fitting: the same numbers wherever it is loaded)."""
        from lwl.models import document_training_set

        outs = doc["outputs"]
        ts = document_training_set(doc)
        if doc.get("kernel") not in GP_KERNELS:
            raise ValueError(f"kernel: unknown GP kernel {doc.get('kernel')!r}; known: {list(GP_KERNELS)}")
        gp = cls(kernel=doc["kernel"], optimize=False, device=device)
        gp.kernel_ = doc["kernel"]
        gp.device_ = resolve_device(device)
        X = np.asarray(ts["inputs"], dtype=np.float64)
        y = np.asarray(ts["labels"], dtype=np.float64)
        gp.single_output_ = y.ndim == 1
        gp.Y_ = y.reshape(len(y), -1)
        if gp.Y_.shape[1] != len(outs) or X.ndim != 2 or len(X) != len(gp.Y_):
            raise ValueError(f"training_set: {X.shape} inputs and {y.shape} labels do not fit {len(outs)} output(s)")
        gp.X_ = gp._tensor(X)
        gp.n_features_in_ = X.shape[1]
        gp.lengthscale_ = np.array([np.broadcast_to(o["lengthscale"], (X.shape[1],)) for o in outs], dtype=np.float64)
        gp.output_scale_ = np.array([o["output_scale"] for o in outs], dtype=np.float64)
        gp.noise_ = np.array([o["noise"] for o in outs], dtype=np.float64)
        gp._condition(np.array([o["mean"] for o in outs], dtype=np.float64))
        return gp


class KernelRidgeForm(NamedTuple):
    """A fitted GP's posterior mean written as isotropic KRR (:func:`as_kernel_ridge`): train KRR
    with ``kernel`` at lengthscale 1 and nugget N sigma2 = ``nugget`` on (X / ``input_scale``,
    y - ``mean``), predict at x / ``input_scale`` and add ``mean``."""

    kernel: str
    input_scale: np.ndarray  # (d,)
    nugget: float
    mean: float


def as_kernel_ridge(gp: "GaussianProcess", output: int = 0) -> KernelRidgeForm:
    """The posterior mean of a fitted single-output GP at fixed hyperparameters is kernel ridge
    regression (R&W eq. 2.25 with K = s^2 K_1 + noise I): with its ARD lengthscales absorbed into
    the inputs (squared exponential: x / (sqrt2 ell), for lwl's KRR convention exp(-r^2 / l^2);
    Matern 5/2: x / ell), the nugget noise / s^2 and the constant mean taken off the labels. The
    bilevel adjoint and score-function gradient (lwl.design.bilevel) then carry over unchanged
    (:meth:`lwl.design.budgeted.BudgetedBilevel.propose` moves a gp job this way)."""
    ell = np.asarray(gp.lengthscale_[output], dtype=np.float64)
    scale = math.sqrt(2.0) * ell if gp.kernel_ == "squared_exponential" else ell
    return KernelRidgeForm(gp.kernel_, scale, float(gp.noise_[output] / gp.output_scale_[output]),
                           float(gp.mean_[output]))


# -- the job spec's block for this component, and its registration (lwl.registry) --


class GPSpec(StrictModel):
    """Gaussian-process regression with ARD lengthscales, output scale, noise variance and a
    constant mean fitted by maximum marginal likelihood (the model a lab deploys; a budgeted
    job designs for it and serves it; its default)."""

    name: Literal["gp"] = "gp"
    kernel: Literal[(AUTO, *GP_KERNELS)] = Field(
        default=AUTO, description="auto: squared exponential and Matern 5/2 both fitted, the one select prefers "
                                  "kept; or one of them")
    restarts: int = Field(default=2, ge=0, le=50, description="random starts of the likelihood maximisation "
                                                                "besides the data-scaled one")
    max_fit_points: int | None = Field(
        default=None, ge=10, le=20_000,
        description="the hyperparameters are fitted on at most this many labelled points (drawn with the job's "
                    "seed); the model conditions on all of them. Default: the larger of 300 and 30 per "
                    "hyperparameter, 30 (d + 2) for d inputs")
    select: Literal[SELECTIONS] = Field(
        default="loo", description="which local optimum of the likelihood (and which kernel, with auto) is kept: loo, "
                                   "the one of lowest leave-one-out error on the fitting points; evidence, the one of "
                                   "highest marginal likelihood (lwl's choice before the leave-one-out selection: on noise-free labels "
                                   "it can keep an interpolant at the bounds that predicts worse)")
    refit_points: int = Field(default=2000, ge=10, le=20_000,
                              description="where the hyperparameters fitted on the subset do not carry over to every "
                                          "point (the evidence per point falls), they are fitted again on 4x as many "
                                          "points, up to this many")
    final_fit_points: int = Field(default=FINAL_FIT_POINTS, ge=0, le=20_000,
                                  description="the kept hyperparameters are refined by the likelihood on up to this "
                                              "many labelled points (from the kept optimum; kept where their "
                                              "leave-one-out error there is lower), then conditioned on all; 0: "
                                              "no refinement (the subset's fit is served)")
    fit_draws: int = Field(default=1, ge=1, le=10,
                           description="the whole fit is repeated this many times from different seeds (fitting "
                                       "subsets and starts) and the one of lowest leave-one-out error on one common "
                                       "subset of the labels is kept; each draw costs one fit. Default 1: three "
                                       "draws did not change a verdict of the 8,000-label study (docs/method.md, "
                                       "\"Several fits of the served GP\")")


MODELS.register("gp", GPSpec, document="lwl.models.gp:GaussianProcess.from_spec")
