"""Gaussian-process regression with fitted hyperparameters: the surrogate a lab deploys
(docs/method.md, "The model a lab deploys").

Prior f ~ GP(c, s^2 k_ell), observations y = f(x) + eps, eps ~ N(0, sigma_n^2), with an ARD
kernel (one lengthscale per input), Rasmussen & Williams (2006) conventions, as scikit-learn's
``RBF`` and ``Matern(nu=2.5)``:

- ``squared_exponential``: k(x, x') = exp(-r^2 / 2),
- ``matern52``: k(x, x') = (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r),

with r^2 = sum_d (x_d - x'_d)^2 / ell_d^2. (lwl's KRR kernel of the paper, exp(-||x-x'||^2 / l^2),
has no 1/2: an isotropic GP lengthscale ell is the KRR l / sqrt(2).)

**Units.** A lab sends inputs in its own units (Pa, m, K, ohm: spreads from 1e-3 to 1e4, an
input whose zero is far from its spread) and labels in its own. The fit works in standardised
coordinates (:class:`Standardisation`): each input centred at its mean and scaled by its standard
deviation over the training set, each output's labels likewise. Every hyperparameter it learns
or is given, and every prediction, is in the user's units: ell_d = ell_d^s x_scale_d,
s^2 = s_s^2 y_scale^2, sigma_n^2 = sigma_s^2 y_scale^2, c = y_loc + y_scale c_s, log likelihoods
carry the labels' Jacobian -n log y_scale. So a fit is the same whatever affine units it is posed
in (up to round-off), and r^2 is formed on centred inputs (|x|^2 + |y|^2 - 2 x.y on inputs offset
by 1e6 with a spread of 1e-3 cancels to noise and K_y fails to factor).

**Hyperparameters** theta = (log ell_1..ell_d, log s^2, log sigma_n^2) maximise the log marginal
likelihood (R&W eq. 2.30, with the constant mean c):

    log p(y | X, theta) = -1/2 (y - c)^T K_y^{-1} (y - c) - 1/2 log |K_y| - n/2 log 2 pi,
    K_y = s^2 K_ell(X, X) + sigma_n^2 I.

The constant mean is profiled out: for each theta, c is its maximum-likelihood value
c = 1^T K_y^{-1} y / 1^T K_y^{-1} 1 (generalised least squares), so the optimiser sees
max_c log p. The maximisation is L-BFGS-B (scipy) on log scales with the gradient in closed form
(:func:`_lml_and_gradient`, checked against torch autograd in the tests), in float64, on the
standardised data, from ``restarts`` + 1 starts: the data's own scales (ell_d = the spread of
input d, s^2 = Var(y), sigma_n^2 = Var(y)/100), then draws log-uniform within the bounds from
``random_state`` (the noise's from :data:`START_NOISE_LOW` Var(y) up, not from the floor). Bounds are relative to the data: ell_d in ``lengthscale_bounds`` x the spread
of input d, s^2 in ``output_scale_bounds`` x Var(y), sigma_n^2 up to ``noise_bounds[1]`` x Var(y)
and down to the **noise floor** (:meth:`GaussianProcess.noise_floor`): 1e-10 Var(y) (scikit-learn's
``alpha`` on standardised labels), or the square of what float64 inputs and labels resolve where
that is more (an input offset far beyond 1e6 of its spreads). A deterministic simulator's labels carry no noise; the floor before
was 1e-6 Var(y), which smoothed them at 1e-3 of their spread. Where K_y still fails to factor, the
noise is raised along a jitter ladder and the raise recorded (``jitter_``). With more than
``max_fit_points`` points the hyperparameters are fitted on a random subset of that size (an
O(n^3) evaluation per step); the model then conditions on every point.

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

the variance of the latent f; ``predict``'s std is by default that of a new measurement,
sqrt(var + sigma_n^2), the error bar a lab reads (scikit-learn's with a ``WhiteKernel``), and
``std="latent"`` gives f's alone. The mean is kernel
ridge regression with the kernel s^2 k_ell and ridge sigma_n^2 on y - c: for fixed hyperparameters
the bilevel inner problem of the paper with this kernel.

**Multi-output** labels (n, p): p independent GPs, one set of hyperparameters (and mean) per
output.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
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
PREDICT_BLOCK = 4096  # test points per kernel block in predict (fewer where n is large: PREDICT_BLOCK_ELEMENTS)
PREDICT_BLOCK_ELEMENTS = 1 << 25  # n x test points of one predict block (268 MB of float64; two such temporaries)
STDS = ("measurement", "latent")  # what predict's std is of: a new measurement (latent + noise) or f alone
DEFAULT_RESTARTS = 2  # a job's (GPSpec.restarts) and the constructor's
DEFAULT_REFIT_POINTS = 2000  # a job's (GPSpec.refit_points) and the constructor's
# the noise's lower bound in standardised units (Var(y) = 1) unless the data resolve less (GaussianProcess.noise_floor):
# scikit-learn's alpha; lwl's fixed 1e-6 before smoothed deterministic labels at 1e-3 of their spread
NOISE_FLOOR = 1e-10
# the random starts' noise is drawn log-uniform from here (standardised) up, not from the floor: a start
# at 1e-10 sits on the noise-free ridge, and the draws from the old 1e-6 floor are kept so that the
# optimum a start reaches does not move with the floor (p04's 2,000 points: 0.9205 held-out Err with
# draws from 1e-10, 0.8289 from 1e-6 or 1e-8; docs/method.md); the optimiser still goes down to the floor
START_NOISE_LOW = 1e-6
# where K_y does not factor, the noise is raised by these multiples of the output scale in turn (GaussianProcess._condition)
JITTER_LADDER = (1e-10, 1e-8, 1e-6, 1e-4)
KERNEL_BLOCK_ELEMENTS = 1 << 24  # elements of one block of rows of the Matern kernel's in-place evaluation (128 MB)
LOO_BLOCK_ELEMENTS = 1 << 22  # n x columns of one block of loo_residuals (32 MB of float64)
MIN_FIT_POINTS = 300  # the likelihood's fitting subset of a gp job at d <= 8 (default_fit_points)
FIT_POINTS_PER_HYPERPARAMETER = 30
FIT_POINTS_RULE = f"max({MIN_FIT_POINTS}, {FIT_POINTS_PER_HYPERPARAMETER} (d + 2))"  # default_fit_points, in words
FINAL_FIT_POINTS = 2000  # the final fit's points (GaussianProcess._final_fit): a bounded O(M^3) per step


# the most memory a budgeted gp job's served model may need (GPSpec.check_labels): a budget beyond it is refused at
# submit, naming the field (bench/gp_memory.py measures the GP's peak at 2,000, 8,000 and 20,000 labels); a deployment
# whose API and workers hold more sets LWL_GP_MEMORY_GB in both
GP_MEMORY_LIMIT_BYTES = int(float(os.environ.get("LWL_GP_MEMORY_GB", "6")) * 10**9)
MAX_FIT_STEP_POINTS = 10_000  # one likelihood step holds about 7 m^2 float64 (fit_step_bytes): 5.6 GB at 10,000


def fit_step_bytes(m: int) -> int:
    """The float64 temporaries of one likelihood step on m points (:func:`_lml_and_gradient`):
    r^2, the kernel, its derivative factor, K_y, its factor, K_y^{-1} and W, about 7 m^2."""
    return 7 * 8 * int(m) ** 2


def served_model_bytes(n: int, largest_fit: int) -> int:
    """The peak a budgeted gp job's model work may reach on n labels: a GP fitted to n points alone
    peaks at three n x n matrices (measured, bench/gp_memory.py: 9.99 GB at 20,000 points; torch's
    Cholesky with ``out=`` works in a copy), and the design holds one more factor while it fits
    another row set, so four of 8 n^2 bytes; a prediction block beside them, and the likelihood
    step of its largest fit (``largest_fit`` points, :func:`fit_step_bytes`)."""
    n = int(n)
    block = max(1, min(PREDICT_BLOCK, PREDICT_BLOCK_ELEMENTS // max(n, 1)))
    return 4 * 8 * n * n + 2 * 8 * n * block + fit_step_bytes(min(n, largest_fit))


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
        # (1 + r5 + r5^2 / 3) exp(-r5) by blocks of rows: its two temporaries are a block each, not two more
        # n x n matrices (at 20,000 points 3.2 GB apiece); elementwise, so the numbers are those of one pass
        rows = max(1, KERNEL_BLOCK_ELEMENTS // max(r5.shape[1], 1))
        for i in range(0, r5.shape[0], rows):
            b = r5[i:i + rows]
            e = torch.exp(-b)
            b.mul_(b / 3.0 + 1.0).add_(1.0).mul_(e)
        return r5
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
    standardised error, comparable across outputs); inf where K_y is not positive definite.

    **Duplicate inputs** (an instrument measuring one setting twice) are left out together: the
    residuals of a group G of equal inputs predicted from the rest are ([K_y^{-1}]_GG)^{-1}
    [K_y^{-1}(y - c)]_G (the block form of eq. 5.12). Left out one at a time, each would be
    predicted by its twin: on deterministic labels an interpolant with lengthscales 1e-4 of the
    spread (the twin's value at the twin, the mean elsewhere, held-out Err 0.44) scored a
    leave-one-out error of 1e-23 and was kept (``tests/lwl/models/test_gp_units.py``)."""
    d = X.shape[1]
    t = torch.as_tensor(theta, dtype=X.dtype, device=X.device)
    with torch.no_grad():
        try:  # the likelihood's own factor, profiled mean and alpha (one place computes them)
            _, _, L, alpha = _lml_terms(kind, X, y, t[:d], t[d], t[d + 1])
        except torch.linalg.LinAlgError:
            return math.inf
        inverse = torch.cholesky_inverse(L)
        r = alpha / torch.diagonal(inverse)
        for group in duplicate_groups(X):
            g = torch.as_tensor(group, device=X.device)
            try:
                r[g] = torch.linalg.solve(inverse[g][:, g], alpha[g])
            except torch.linalg.LinAlgError:
                return math.inf
        var = float(y.var(correction=0))  # as np.var
        return float((r * r).mean()) / (var if var > 0 else 1.0)


def duplicate_groups(X: torch.Tensor | np.ndarray) -> list[np.ndarray]:
    """The row indices of each group of two or more equal rows of ``X`` (none: an empty list)."""
    a = X.cpu().numpy() if isinstance(X, torch.Tensor) else np.asarray(X)
    _, inverse, counts = np.unique(a, axis=0, return_inverse=True, return_counts=True)
    if counts.max(initial=0) < 2:
        return []
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(counts)[:-1]
    return [rows for rows in np.split(order, bounds) if len(rows) > 1]


@dataclass(frozen=True)
class Standardisation:
    """The affine map a fit works through (module docstring, "Units"): inputs centred and scaled
    per input, x_s = (x - x_loc) / x_scale, labels per output, y_s = (y - y_loc) / y_scale, each
    scale the training set's standard deviation (1 where it is 0). A function of the training set
    alone, so a document's loader forms the same map from the same points."""

    x_loc: np.ndarray  # (d,)
    x_scale: np.ndarray  # (d,)
    y_loc: np.ndarray  # (p,)
    y_scale: np.ndarray  # (p,)

    @classmethod
    def of(cls, X: np.ndarray, Y: np.ndarray) -> "Standardisation":
        # column by column: an output's map is the same alone as beside others (a reduction over a
        # strided column sums in another order, and an ulp of scale moves an interpolant's predictions)
        cols = [np.ascontiguousarray(Y[:, j]) for j in range(Y.shape[1])]
        y_loc = np.array([c.mean() for c in cols])
        y_scale = np.array([c.std() for c in cols])
        xcols = [np.ascontiguousarray(X[:, k]) for k in range(X.shape[1])]  # and whatever X's memory order
        x_loc = np.array([c.mean() for c in xcols])
        x_scale = np.array([c.std() for c in xcols])
        x_scale[~(x_scale > 0)] = 1.0
        y_scale[~(y_scale > 0)] = 1.0
        return cls(x_loc, x_scale, y_loc, y_scale)

    def inputs(self, X: np.ndarray) -> np.ndarray:
        return (X - self.x_loc) / self.x_scale

    def resolution(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Per output, the smallest label difference the data resolve in standardised units: float64
        round-off of the labels (eps |y| / y_scale) and of the inputs carried through a change of
        the function over one input spread (eps |x| / x_scale; an input offset far from its spread,
        a wavelength in metres or a temperature in K read to mK, resolves only that finely)."""
        eps = np.finfo(np.float64).eps
        x_part = float(np.max(np.abs(X) / self.x_scale)) if X.size else 0.0
        return eps * (np.max(np.abs(Y), 0) / self.y_scale + x_part)

    def to_json(self) -> dict:
        return {"input_loc": self.x_loc.tolist(), "input_scale": self.x_scale.tolist(),
                "label_loc": self.y_loc.tolist(), "label_scale": self.y_scale.tolist()}


def _per_output(value, p: int, what: str, width: int | None = None) -> np.ndarray | None:
    """A hyperparameter given once or per output, as (p,) (or (p, width) for lengthscales)."""
    if value is None:
        return None
    a = np.asarray(value, dtype=np.float64)
    shape = (p,) if width is None else (p, width)
    if width is not None and a.ndim == 2 and a.shape != shape:
        raise ValueError(f"{what}: per-output values of shape {shape}, got {a.shape}")
    if width is None and a.ndim == 1 and a.shape != shape:
        raise ValueError(f"{what}: one value or one per output ({p}), got {a.shape}")
    try:
        return np.broadcast_to(a, shape).copy()
    except ValueError:
        raise ValueError(f"{what}: one value, one per input ({width}) or one row per output {shape}; got "
                         f"{a.shape}") from None


class GaussianProcess:
    """GP regression with ARD lengthscales, output scale, noise and a constant mean fitted by
    maximum marginal likelihood (module docstring). scikit-learn's habits: the constructor
    stores its arguments, ``fit`` returns self, learned state ends in ``_``. The constructor's
    defaults are a job's (:class:`GPSpec`); every hyperparameter given or learned is in the
    user's units (inputs' and labels'), the fit itself works in standardised ones
    (:class:`Standardisation`).

    Parameters
    ----------
    kernel : "auto" | "matern52" | "squared_exponential"; "auto" fits both and keeps the one
        ``select`` prefers (summed over outputs; the chosen one is ``kernel_``)
    select : "loo" | "evidence": among the local optima of the starts (and the kernels with
        "auto"), keep the one of lowest leave-one-out error on the fitting points (the default)
        or the one of highest log marginal likelihood (module docstring)
    lengthscale, output_scale, noise : starting values (``optimize=True``; the first start) or
        the hyperparameters used as they are (``optimize=False``); None: the data's scales.
        ``lengthscale`` is one value, one per input, or one row per output; ``output_scale`` and
        ``noise`` one value or one per output.
    mean : the constant mean when ``optimize=False`` (None: its maximum-likelihood value); one
        value or one per output
    optimize : fit the hyperparameters by maximising the log marginal likelihood
    restarts : random starts besides the first
    max_fit_points : the hyperparameters are fitted on at most this many points (a random subset);
        None: :func:`default_fit_points` of the inputs' dimension (a job's default)
    refit_points : a subset fit that does not carry over is fitted again on up to this many
        points (``fit``: the evidence check below; None or <= max_fit_points: never)
    final_fit_points : the kept hyperparameters are then refined on up to this many points
        (``fit``: the final fit below; None or <= the fitting subset: never)
    lengthscale_bounds, output_scale_bounds : relative bounds (module docstring)
    noise_bounds : (lower, upper) of sigma_n^2 relative to Var(y); lower None: the noise floor
        of the data (:meth:`noise_floor`)
    random_state : seed of the random starts and of the fitting subset
    device : "cpu" | "cuda" | "auto"
    fit_draws : ``fit`` is repeated this many times, each from its own seed (the first:
        ``random_state``), and the draw of lowest leave-one-out error on one common subset is kept
        (:meth:`_fit_best_draw`); 1: one fit
    """

    def __init__(self, kernel: str = AUTO, lengthscale=None, output_scale=None, noise=None, mean=None,
                 optimize: bool = True, restarts: int = DEFAULT_RESTARTS, max_fit_points: int | None = None,
                 refit_points: int | None = DEFAULT_REFIT_POINTS, final_fit_points: int | None = FINAL_FIT_POINTS,
                 lengthscale_bounds: tuple[float, float] = (1e-3, 1e4),
                 output_scale_bounds: tuple[float, float] = (1e-4, 1e6),
                 noise_bounds: tuple[float | None, float] = (None, 1.0), random_state: int = 0, device: str = "cpu",
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

    # -- units --------------------------------------------------------------------------------
    def _tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE, device=self.device_)

    def _set_data(self, X: np.ndarray, Y: np.ndarray) -> None:
        """The training set in the user's units (``X_``, ``Y_``) and in standardised ones (``Xs_``,
        ``Ys_``), with the map between them (``standardisation_``)."""
        X = np.ascontiguousarray(X)  # as a document's loader will hold it (a column-major X sums in another order)
        self.standardisation_ = Standardisation.of(X, Y)
        self.X_ = self._tensor(X)
        self.Y_ = Y
        self.Xs_ = self._tensor(self.standardisation_.inputs(X))
        self.Ys_ = (Y - self.standardisation_.y_loc) / self.standardisation_.y_scale
        self.n_features_in_ = X.shape[1]

    def _to_standard(self, j: int, lengthscale, output_scale, noise) -> np.ndarray:
        """User-unit hyperparameters of output j as standardised log theta (log ell, log s^2, log sigma_n^2)."""
        s = self.standardisation_
        v = float(s.y_scale[j]) ** 2
        return np.log(np.concatenate([np.asarray(lengthscale, dtype=np.float64) / s.x_scale,
                                      [float(output_scale) / v, float(noise) / v]]))

    def _from_standard(self, j: int, theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Standardised log theta of output j as user-unit (lengthscales, output scale, noise)."""
        s, d = self.standardisation_, self.n_features_in_
        v = float(s.y_scale[j]) ** 2
        return np.exp(theta[:d]) * s.x_scale, float(np.exp(theta[d])) * v, float(np.exp(theta[d + 1])) * v

    def _lml_to_user(self, lml: float, j: int, n: int) -> float:
        """A standardised label's log density as the user's label's: the Jacobian of y = y_loc + y_scale y_s."""
        return float(lml) - n * math.log(float(self.standardisation_.y_scale[j]))

    def noise_floor(self, j: int = 0) -> float:
        """The lower bound of output j's sigma_n^2 in standardised units (Var(y) = 1) when
        ``noise_bounds[0]`` is None: the larger of :data:`NOISE_FLOOR` and the square of what the
        data resolve (:meth:`Standardisation.resolution`). Why: a deterministic
        simulator's labels carry no noise, and a floor of a fixed 1e-6 Var(y) (lwl's before)
        smoothed them at 1e-3 of their spread, where scikit-learn's standardised GP interpolates
        at 1e-10 (docs/method.md, "The served GP in a lab's units"); below what float64 inputs and
        labels resolve, a smaller nugget fits round-off."""
        if self.noise_bounds[0] is not None:
            return float(self.noise_bounds[0])
        return max(NOISE_FLOOR, float(self.resolution_[j]) ** 2)

    # -- fitting ------------------------------------------------------------------------------
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
        self._fit_checked(X, y)
        self._final_fit(X, y)
        return self

    def _fit_checked(self, X, y) -> None:
        """The subset fit, conditioned on every point, refitted on 4x as many points up to
        ``refit_points`` while its evidence does not carry over (``fit``'s evidence check)."""
        n, m = len(X), self._fit_points(X)
        cap = max(m, min(n, self.refit_points or 0))
        self._fit_on(X, y, m)
        while self.optimize and m < cap and np.any(self._evidence_gap(n) > 0):
            m = min(4 * m, cap)
            self._refit_on(X, y, m)

    def _params(self) -> dict:
        import inspect

        return {k: getattr(self, k) for k in inspect.signature(GaussianProcess.__init__).parameters if k != "self"}

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
        the other rows within their ties; so one draw is the default. A draw costs one whole fit.
        Each draw keeps its hyperparameters only (its factors are dropped as soon as it is scored:
        at 8,000 points one factor is 0.5 GB); the kept draw is conditioned again. ``fit_draw_`` is
        the kept draw, ``draw_loo_errors_`` their errors on the common subset (rows
        ``draw_loo_rows_``), ``draw_seeds_`` their seeds."""
        params = self._params()
        seeds = [int(self.random_state)] + [int(np.random.SeedSequence([int(self.random_state), k]).generate_state(1)[0])
                                            for k in range(1, int(self.fit_draws))]
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(y, dtype=np.float64).reshape(len(X), -1)
        n, M = len(X), min(len(X), int(self.final_fit_points or FINAL_FIT_POINTS))
        rows = np.arange(n)
        if n > M:  # a stream of its own ("common" in ASCII): no draw's fitting subset
            rows = np.sort(np.random.default_rng([int(self.random_state), 0x636F6D6D6F6E, M]).choice(n, M, replace=False))
        errors, kept = [], []
        for s in seeds:
            g = GaussianProcess(**{**params, "fit_draws": 1, "random_state": s}).fit(X, y)
            Xc = g.Xs_[torch.as_tensor(rows, device=g.Xs_.device)]
            errors.append(float(sum(_loo_error(g.kernel_, Xc, g._tensor(g.Ys_[rows, j]), g._theta(j))
                                    for j in range(Y.shape[1]))))
            for k in FACTORS:  # hyperparameters only: one draw's factors at a time
                g.__dict__.pop(k, None)
            kept.append(g)
        best = int(np.argmin(errors))  # the first of equal ones
        self.__dict__.update({k: v for k, v in vars(kept[best]).items() if k.endswith("_")})
        self._condition(self.mean_)
        self.fit_draw_, self.draw_loo_errors_, self.draw_seeds_ = best, np.array(errors), np.array(seeds)
        self.draw_loo_rows_ = rows
        return self

    def _theta(self, j: int) -> np.ndarray:
        """Output j's fitted hyperparameters as standardised log theta."""
        return self._to_standard(j, self.lengthscale_[j], self.output_scale_[j], self.noise_[j])

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
        changed = False
        for j in range(self.Y_.shape[1]):
            rows = np.arange(n)
            if n > M:
                rows = np.sort(np.random.default_rng([self.random_state, j, M]).choice(n, M, replace=False))
            lo, hi = self._bounds(j)
            Xf = self.Xs_[torch.as_tensor(rows, device=self.Xs_.device)]
            yf = self._tensor(self.Ys_[rows, j])
            kept = self._theta(j)
            theta, lml = self._maximise(Xf, yf, np.clip(kept, lo, hi), lo, hi)
            if lml <= -1e299:  # met the not-positive-definite wall at once: no optimum
                continue
            if self.select == "loo":
                better = _loo_error(self.kernel_, Xf, yf, theta) < _loo_error(self.kernel_, Xf, yf, kept)
            else:
                better = not np.array_equal(theta, kept)
            if better:
                self.lengthscale_[j], self.output_scale_[j], self.noise_[j] = self._from_standard(j, theta)
                self.final_fit_kept_[j], changed = True, True
        self.final_fit_points_ = M
        if changed:
            self._condition(self._given_mean())

    def _evidence_gap(self, n: int) -> np.ndarray:
        """Per output: log marginal likelihood per point on the fitting points minus that on all
        n points (> 0: the fit does not carry over; ``fit``'s evidence check). Both in the user's
        units: the labels' Jacobian is the same per point on both sides."""
        return self.fit_log_marginal_likelihood_ / min(self.fit_points_, n) - self.log_marginal_likelihood_ / n

    def _refit_on(self, X, y, m: int) -> None:
        """A refit of the evidence check on m points: the kernel already chosen only (``auto``
        compared the kernels on the subset; ``kernel_loo_error_`` and ``kernel_evidence_`` keep that
        comparison), from two starts: the data's scales and the last fit's optimum, without random
        starts. On p04's 2,000 points one fit took 150 s with both kernels and three starts each
        (each likelihood step is an O(m^3) factorisation and inverse at m = 2,000)."""
        warm = np.stack([self._theta(j) for j in range(self.Y_.shape[1])])
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

    def fit_hyperparameters(self, X, y, *, check: bool = True) -> "GaussianProcess":
        """The learned hyperparameters (``kernel_``, ``lengthscale_``, ``output_scale_``,
        ``noise_``, ``fit_log_marginal_likelihood_``) without keeping a model conditioned on
        (X, y), so without its final fit: for a caller that conditions other training sets at
        these values (a budgeted design's scores). With ``check`` (the default) the subset fit
        passes ``fit``'s evidence check first (conditioned on every point to read it, the
        factor then dropped), refitted on more points where it does not carry over: a collapsed
        subset fit would otherwise score every candidate of a round. ``check=False`` saves that
        O(n^3) factorisation."""
        n, m = len(X), self._fit_points(X)
        if not check or not self.optimize or n <= m:
            self._fit_on(X, y, m, condition=False)
        else:
            self._fit_checked(X, y)
            for k in FACTORS:
                self.__dict__.pop(k, None)
            self.__dict__.pop("log_marginal_likelihood_", None)
        self.evidence_checked_ = bool(check and self.optimize)
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
        return _per_output(self.mean, self.Y_.shape[1], "mean")

    def _fit_hyperparameters(self, X, y, kernel: str, fit_points: int, warm: np.ndarray | None = None) -> None:
        """Everything of ``fit`` but the conditioning: the learned hyperparameters and
        ``fit_log_marginal_likelihood_``, the maximised evidence on the fitting points (all of
        them up to ``fit_points``; NaN without ``optimize``). ``warm`` (outputs x (d + 2)
        standardised log hyperparameters): a refit's starts, the data's scales and these, no random ones."""
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
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):
            raise ValueError("X, y: inputs and labels must be finite numbers")
        self._set_data(X, Y)
        self.resolution_ = self.standardisation_.resolution(X, Y)
        outputs = [self._fit_output(j, fit_points, None if warm is None else warm[j]) for j in range(Y.shape[1])]
        self.lengthscale_ = np.stack([o[0] for o in outputs])  # (p, d)
        self.output_scale_ = np.array([o[1] for o in outputs])
        self.noise_ = np.array([o[2] for o in outputs])
        self.jitter_ = np.zeros(len(outputs))  # fitted afresh: no raise yet (_condition records one)
        self.fit_log_marginal_likelihood_ = np.array([o[3] for o in outputs])
        self.fit_loo_error_ = np.array([o[4] for o in outputs])
        self.noise_floor_ = np.array([self.noise_floor(j) * float(self.standardisation_.y_scale[j]) ** 2
                                      for j in range(Y.shape[1])])

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
        params = self._params()
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

    def _fit_output(self, j: int, fit_points: int,
                    warm: np.ndarray | None = None) -> tuple[np.ndarray, float, float, float, float]:
        """(lengthscales, output scale, noise, LML and leave-one-out error on the fitting points)
        of output j, in the user's units, at the local optimum ``select`` keeps among the
        starts' (fitted on the standardised data); the hyperparameters as given (and NaN, NaN)
        without ``optimize``; ``warm``: see ``_fit_hyperparameters``."""
        d, p = self.n_features_in_, self.Y_.shape[1]
        s = self.standardisation_
        v = float(s.y_scale[j]) ** 2
        given_ell = _per_output(self.lengthscale, p, "lengthscale", d)
        given_s2, given_noise = _per_output(self.output_scale, p, "output_scale"), _per_output(self.noise, p, "noise")
        # the data's scales in the user's units: each input's spread, Var(y), Var(y) / 100
        ell0 = given_ell[j] if given_ell is not None else s.x_scale.copy()
        s0 = float(given_s2[j]) if given_s2 is not None else v
        n0 = float(given_noise[j]) if given_noise is not None else v / 100.0
        if not self.optimize:  # (a score of a budgeted design: conditioning is all it needs)
            return np.asarray(ell0, dtype=np.float64).copy(), s0, n0, math.nan, math.nan
        lo, hi = self._bounds(j)
        rng = np.random.default_rng([self.random_state, j])
        n = len(self.Ys_)
        rows = np.arange(n)
        if n > fit_points:  # an O(n^3) likelihood: fitted on a subset, conditioned on all
            rows = np.sort(rng.choice(n, fit_points, replace=False))
        Xf = self.Xs_[torch.as_tensor(rows, device=self.Xs_.device)]
        yf = self._tensor(self.Ys_[rows, j])
        starts = [np.clip(self._to_standard(j, ell0, s0, n0), lo, hi)]
        if warm is None:
            drawn_lo = lo.copy()
            drawn_lo[-1] = min(max(lo[-1], math.log(START_NOISE_LOW)), hi[-1])
            starts += [rng.uniform(drawn_lo, hi) for _ in range(self.restarts)]
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
        ell, s2, noise = self._from_standard(j, theta)
        return ell, s2, noise, self._lml_to_user(lml, j, len(rows)), float(loo)

    def _bounds(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of output j's standardised log hyperparameters (log ell_1..ell_d, log s^2,
        log sigma_n^2): the relative bounds (each input's spread and Var(y) are 1 there), the
        noise's lower one :meth:`noise_floor`."""
        d = self.n_features_in_
        lo = np.log(np.concatenate([np.full(d, self.lengthscale_bounds[0]),
                                    [self.output_scale_bounds[0], self.noise_floor(j)]]))
        hi = np.log(np.concatenate([np.full(d, self.lengthscale_bounds[1]),
                                    [self.output_scale_bounds[1], self.noise_bounds[1]]]))
        return lo, np.maximum(hi, lo)

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
        """Factor K_y and form alpha at the learned hyperparameters, in standardised units from
        the user-unit values (so a document's loader, which has only those, factors the same
        numbers); the mean is ``mean`` (user units) when given, else its maximum-likelihood
        value. The same factor gives the log marginal likelihood on every point,
        ``log_marginal_likelihood_`` (R&W eq. 2.30, in the user's units):
        -1/2 (y - c)^T alpha - sum log diag L - n/2 log 2 pi.

        **Jitter.** Where K_y does not factor (a noise at its floor beside near-duplicate inputs),
        the noise is raised along :data:`JITTER_LADDER` (multiples of the output scale) until it
        does; the raise is added to the served ``noise_`` (the document then factors at once) and
        recorded in ``jitter_`` (user units, 0 where none was needed). Past the last rung a
        ``numpy.linalg.LinAlgError`` says so."""
        s = self.standardisation_
        p = self.Y_.shape[1]
        self.chol_, self.alpha_, means, lml = [], [], [], []
        jitter = np.zeros(p)
        for j in range(p):
            y = self._tensor(self.Ys_[:, j])
            theta = self._theta(j)
            d = self.n_features_in_
            ell, s2, noise = self._tensor(np.exp(theta[:d])), float(np.exp(theta[d])), float(np.exp(theta[d + 1]))
            L, added = _factor_with_jitter(self.kernel_, self.Xs_, ell, s2, noise)
            if added:  # served at the noise it factored with, in the user's units
                jitter[j] = added * float(s.y_scale[j]) ** 2
            with torch.no_grad():
                both = torch.cholesky_solve(torch.stack([y, torch.ones_like(y)], 1), L)
                user = float(mean[j]) if mean is not None else \
                    float(s.y_loc[j]) + float(s.y_scale[j]) * float(both[:, 0].sum() / both[:, 1].sum())
                # the standardised mean from the user-unit one, as a document's loader forms it
                c = (user - float(s.y_loc[j])) / float(s.y_scale[j])
                alpha = both[:, 0] - c * both[:, 1]
            self.chol_.append(L)
            self.alpha_.append(alpha)
            means.append(user)
            lml.append(self._lml_to_user(float(-0.5 * (y - c) @ alpha - torch.log(L.diagonal()).sum()
                                               - 0.5 * len(y) * math.log(2 * math.pi)), j, len(y)))
        self.mean_ = np.array(means)
        self.log_marginal_likelihood_ = np.array(lml)
        if not hasattr(self, "jitter_") or len(self.jitter_) != p:
            self.jitter_ = np.zeros(p)
        if np.any(jitter):  # factored again from the raised user-unit noise: the numbers its document gives
            self.noise_ = self.noise_ + jitter
            self.jitter_ = self.jitter_ + jitter  # kept across later conditionings (reset where noise_ is fitted)
            self._condition(self.mean_ if mean is None else mean)

    # -- prediction ---------------------------------------------------------------------------
    def _inputs(self, X) -> torch.Tensor:
        """``X`` as (m, d) standardised inputs, or a ValueError naming the width it expected."""
        X = np.asarray(X, dtype=np.float64)
        d = self.n_features_in_
        if X.ndim == 1 and d == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"X: expected (m, {d}) inputs (the model's input dimension is {d}), got shape {X.shape}")
        return self._tensor(self.standardisation_.inputs(X))

    def predict(self, X, return_std: bool = False, std: str = "measurement"):
        """Posterior mean (and standard deviation) at ``X`` (R&W eqs. 2.25-2.26): (m,) for
        single-output labels, (m, p) otherwise. ``std="measurement"`` (the default, as
        scikit-learn's with a ``WhiteKernel``): the std of a new measurement y* = f(x*) + eps,
        sqrt(var f(x*) + sigma_n^2), the error bar a label taken there falls within;
        ``std="latent"``: that of f(x*) alone (0 at a training point as the noise goes to 0).
        ``X`` must be (m, d) for the model's d inputs ((m,) when d = 1); another width is refused."""
        if std not in STDS:
            raise ValueError(f"std: one of {list(STDS)}, got {std!r}")
        if not return_std:
            return self.predict_stds(X, stds=False)[0]
        mean, measurement, latent = self.predict_stds(X)
        return mean, (measurement if std == "measurement" else latent)

    def predict_stds(self, X, stds: bool = True) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(mean, measurement std, latent std) at ``X`` in one pass (:meth:`predict`; the
        service's ``POST /predict`` answers all three); the stds None without ``stds``."""
        Xs = self._inputs(X)
        s = self.standardisation_
        p, n, d = len(self.alpha_), len(self.Xs_), self.n_features_in_
        mu = np.empty((Xs.shape[0], p))
        var = np.empty((Xs.shape[0], p))
        noise = np.empty(p)
        block = max(1, min(PREDICT_BLOCK, PREDICT_BLOCK_ELEMENTS // max(n, 1)))
        with torch.no_grad():
            for j in range(p):
                theta = self._theta(j)
                ell, s2, noise[j] = self._tensor(np.exp(theta[:d])), float(np.exp(theta[d])), float(np.exp(theta[d + 1]))
                c = (float(self.mean_[j]) - float(s.y_loc[j])) / float(s.y_scale[j])
                for i in range(0, Xs.shape[0], block):
                    k = s2 * ard_kernel(self.kernel_, self.Xs_, Xs[i:i + block], ell)  # (n, b)
                    mu[i:i + block, j] = (c + k.T @ self.alpha_[j]).cpu().numpy()
                    if stds:
                        v = torch.linalg.solve_triangular(self.chol_[j], k, upper=False)
                        var[i:i + block, j] = (s2 - (v * v).sum(0)).clamp_min(0.0).cpu().numpy()
        mu = s.y_loc + s.y_scale * mu
        latent = measurement = None
        if stds:
            latent = s.y_scale * np.sqrt(var)
            measurement = s.y_scale * np.sqrt(var + noise)
        if self.single_output_:
            mu = mu[:, 0]
            latent, measurement = (None, None) if not stds else (latent[:, 0], measurement[:, 0])
        return mu, measurement, latent

    def loo(self, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Leave-one-out residuals y_i - mean_{-i}(x_i) of the conditioned model at its training
        points ``rows`` (None: all) and the std of that prediction of the measurement y_i, in
        closed form (R&W sec. 5.4.2, eq. 5.12): residual [K_y^{-1}(y - c)]_i / [K_y^{-1}]_ii,
        variance 1 / [K_y^{-1}]_ii, the hyperparameters and the constant mean c held at their
        fitted values (not refitted without point i). [K_y^{-1}]_ii = ||L^{-1} e_i||^2 from the
        model's own Cholesky factor, in blocks of columns: O(n^2) per row asked for, no n x n
        inverse. Equal inputs are left out together, as in :func:`_loo_error` (the variance of
        each: the diagonal of ([K_y^{-1}]_GG)^{-1}). Each (len(rows),) for single-output labels,
        (len(rows), p) otherwise, in the labels' units."""
        n = len(self.Xs_)
        rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise ValueError(f"rows: training rows are 0..{n - 1}")
        res = np.empty((len(rows), len(self.alpha_)))
        sd = np.empty((len(rows), len(self.alpha_)))
        block = max(1, LOO_BLOCK_ELEMENTS // max(n, 1))
        with torch.no_grad():
            for j, (L, alpha) in enumerate(zip(self.chol_, self.alpha_)):
                scale = float(self.standardisation_.y_scale[j])
                for s in range(0, len(rows), block):
                    r = torch.as_tensor(rows[s:s + block], device=L.device)
                    E = torch.zeros(n, len(r), dtype=L.dtype, device=L.device)
                    E[r, torch.arange(len(r), device=L.device)] = 1.0
                    diag = (torch.linalg.solve_triangular(L, E, upper=False) ** 2).sum(0)
                    res[s:s + block, j] = (alpha[r] / diag).cpu().numpy() * scale
                    sd[s:s + block, j] = diag.rsqrt().cpu().numpy() * scale
                where = {int(row): k for k, row in enumerate(rows)}
                for group in duplicate_groups(self.Xs_):  # equal inputs left out together (_loo_error)
                    asked = [g for g in group if int(g) in where]
                    if not asked:
                        continue
                    gi = torch.as_tensor(group, device=L.device)
                    E = torch.zeros(n, len(group), dtype=L.dtype, device=L.device)
                    E[gi, torch.arange(len(group), device=L.device)] = 1.0
                    V = torch.linalg.solve_triangular(L, E, upper=False)
                    block_inverse = torch.linalg.inv(V.T @ V)  # ([K_y^{-1}]_GG)^{-1}
                    r = (block_inverse @ alpha[gi]).cpu().numpy() * scale
                    v = torch.diagonal(block_inverse).sqrt().cpu().numpy() * scale
                    for k, g in enumerate(group):
                        if int(g) in where:
                            res[where[int(g)], j], sd[where[int(g)], j] = r[k], v[k]
        if self.single_output_:
            return res[:, 0], sd[:, 0]
        return res, sd

    def loo_residuals(self, rows=None) -> np.ndarray:
        """The residuals of :meth:`loo` alone."""
        return self.loo(rows)[0]

    def log_marginal_likelihood(self, theta=None, output: int = 0, mean=None) -> float:
        """log p(y | X, theta) of ``output`` (R&W eq. 2.30) at theta = (log ell, log s^2,
        log sigma_n^2) in the user's units (default: the fitted ones), at the constant ``mean``
        (default: its maximum-likelihood value); computed in standardised units and carried back
        by the labels' Jacobian."""
        d = self.n_features_in_
        s = self.standardisation_
        if theta is None:
            theta_s = self._theta(output)
        else:
            theta = np.asarray(theta, dtype=np.float64)
            theta_s = self._to_standard(output, np.exp(theta[:d]), np.exp(theta[d]), np.exp(theta[d + 1]))
        y = self._tensor(self.Ys_[:, output])
        n = len(y)
        t = [self._tensor(v) for v in (theta_s[:d], theta_s[d], theta_s[d + 1])]
        with torch.no_grad():
            if mean is None:
                try:
                    return self._lml_to_user(float(_lml_terms(self.kernel_, self.Xs_, y, *t)[0]), output, n)
                except torch.linalg.LinAlgError:
                    return -math.inf
            K = torch.exp(t[1]) * ard_kernel(self.kernel_, self.Xs_, self.Xs_, torch.exp(t[0]))
            K.diagonal().add_(float(torch.exp(t[2])))
            L, info = torch.linalg.cholesky_ex(K)
            if int(info) != 0:
                return -math.inf
            r = y - (float(mean) - float(s.y_loc[output])) / float(s.y_scale[output])
            a = torch.cholesky_solve(r[:, None], L)[:, 0]
            return self._lml_to_user(float(-0.5 * r @ a - torch.log(L.diagonal()).sum()
                                           - 0.5 * n * math.log(2 * math.pi)), output, n)

    def diagnosis(self, document: dict, labels, weights, loo_rows=None):
        """Its reading on Q's validation labels (lwl.models.diagnosis.Diagnosable; gp_diagnosis.served_diagnosis)."""
        from lwl.models.gp_diagnosis import served_diagnosis

        return served_diagnosis(self, document, labels, weights, loo_rows)

    # -- the document -------------------------------------------------------------------------
    def to_spec(self, training_set: bool = True) -> dict:
        """The versioned model document (:func:`lwl.models.from_spec` reads it back): every
        hyperparameter in the user's units; ``standardisation`` is the map the model computes
        through (a function of the training set; informative, the loader forms it again)."""
        from lwl import __version__

        doc = {"kind": DOCUMENT_KIND, "version": DOCUMENT_VERSION, "lwl_version": __version__, "model": "gp",
               "kernel": self.kernel_,
               "std": "measurement: sqrt of the posterior variance of f (R&W eq. 2.26) plus the noise, the std of a new "
                      "measurement (scikit-learn's with a WhiteKernel); latent_std leaves the noise out",
               "outputs": [{"lengthscale": self.lengthscale_[j].tolist(), "output_scale": float(self.output_scale_[j]),
                            "noise": float(self.noise_[j]), "mean": float(self.mean_[j]),
                            "jitter": float(self.jitter_[j]),
                            "log_marginal_likelihood": float(self.log_marginal_likelihood_[j])}
                           for j in range(len(self.alpha_))],
               "standardisation": self.standardisation_.to_json(),
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
        Y = y.reshape(len(y), -1)
        if Y.shape[1] != len(outs) or X.ndim != 2 or len(X) != len(Y):
            raise ValueError(f"training_set: {X.shape} inputs and {y.shape} labels do not fit {len(outs)} output(s)")
        gp._set_data(X, Y)
        gp.lengthscale_ = np.array([np.broadcast_to(o["lengthscale"], (X.shape[1],)) for o in outs], dtype=np.float64)
        gp.output_scale_ = np.array([o["output_scale"] for o in outs], dtype=np.float64)
        gp.noise_ = np.array([o["noise"] for o in outs], dtype=np.float64)
        gp.jitter_ = np.array([o.get("jitter", 0.0) for o in outs], dtype=np.float64)  # the fit's record (in noise_)
        gp._condition(np.array([o["mean"] for o in outs], dtype=np.float64))
        return gp

    def to_sklearn(self, output: int = 0):
        """scikit-learn's ``GaussianProcessRegressor`` of this model's output ``output``, fitted
        (``optimizer=None``) at the same hyperparameters in the user's units:
        ``ConstantKernel(s^2) * RBF(ell)`` (squared exponential) or ``* Matern(ell, nu=2.5)``,
        ``+ WhiteKernel(sigma_n^2)``, all fixed, on the labels minus the constant mean, with that
        mean restored in ``predict`` (its ``_y_train_mean``, the attribute ``normalize_y`` sets:
        scikit-learn has no constant-mean prior). ``predict(x, return_std=True)`` then gives this
        model's mean and measurement std; its ``kernel_`` is the document's kernel. Beside this
        model's standardised computation it agrees to round-off (rtol about 1e-8 on a well
        conditioned K_y)."""
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

        ell = self.lengthscale_[output]
        base = RBF(ell, "fixed") if self.kernel_ == "squared_exponential" else Matern(ell, "fixed", nu=2.5)
        kernel = ConstantKernel(float(self.output_scale_[output]), "fixed") * base + \
            WhiteKernel(float(self.noise_[output]), "fixed")
        X = self.X_.cpu().numpy()
        y = self.Y_[:, output] - float(self.mean_[output])
        reg = GaussianProcessRegressor(kernel, alpha=0.0, optimizer=None, normalize_y=False).fit(X, y)
        reg._y_train_mean = np.asarray(float(self.mean_[output]))
        return reg


def _factor_with_jitter(kind: str, Xs: torch.Tensor, ell: torch.Tensor, s2: float,
                        noise: float) -> tuple[torch.Tensor, float]:
    """(L, added): the Cholesky factor of K_y = s2 K_ell(Xs, Xs) + (noise + added) I, written over
    K (torch factors in a copy, so two n x n matrices while it factors, one after: at 20,000 points
    3.2 GB each; bench/gp_memory.py), with ``added`` the first rung of
    :data:`JITTER_LADDER` (times s2) at which it factors (0: at once). Raises
    ``numpy.linalg.LinAlgError`` past the last rung."""
    for rung in (0.0, *JITTER_LADDER):
        added = rung * s2
        with torch.no_grad():
            K = ard_kernel(kind, Xs, Xs, ell).mul_(s2)
            K.diagonal().add_(noise + added)
            info = torch.empty((), dtype=torch.int32, device=K.device)
            L, info = torch.linalg.cholesky_ex(K, out=(K, info))
        if int(info) == 0:
            return L, added
        del K, L
    raise np.linalg.LinAlgError(f"K_y is not positive definite even with a jitter of {JITTER_LADDER[-1]:g} times the "
                                f"output scale added to the noise")


FACTORS = ("chol_", "alpha_")  # a conditioned model's O(n^2) state (what fit_draws drops between draws)


class KernelRidgeForm(NamedTuple):
    """A fitted GP's posterior mean written as isotropic KRR (:func:`as_kernel_ridge`): train KRR
    with ``kernel`` at lengthscale 1 and nugget N sigma2 = ``nugget`` on ((X - ``input_loc``) /
    ``input_scale``, y - ``mean``), predict at (x - ``input_loc``) / ``input_scale`` and add ``mean``
    (centred: a kernel formed as |x|^2 + |y|^2 - 2 x.y cancels on inputs offset far from their spread)."""

    kernel: str
    input_scale: np.ndarray  # (d,)
    nugget: float
    mean: float
    input_loc: np.ndarray | None = None  # (d,): inputs are centred first, (x - input_loc) / input_scale


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
                           float(gp.mean_[output]), gp.standardisation_.x_loc.copy())


# -- the job spec's block for this component, and its registration (lwl.registry) --


class GPSpec(StrictModel):
    """Gaussian-process regression with ARD lengthscales, output scale, noise variance and a
    constant mean fitted by maximum marginal likelihood (the model a lab deploys; a budgeted
    job designs for it and serves it; its default)."""

    name: Literal["gp"] = "gp"
    kernel: Literal[(AUTO, *GP_KERNELS)] = Field(
        default=AUTO, description="auto: squared exponential and Matern 5/2 both fitted, the one select prefers "
                                  "kept; or one of them")
    restarts: int = Field(default=DEFAULT_RESTARTS, ge=0, le=50, description="random starts of the likelihood maximisation "
                                                                "besides the data-scaled one")
    max_fit_points: int | None = Field(
        default=None, ge=10, le=MAX_FIT_STEP_POINTS,
        description="the hyperparameters are fitted on at most this many labelled points (drawn with the job's "
                    "seed); the model conditions on all of them. Default: the larger of 300 and 30 per "
                    "hyperparameter, 30 (d + 2) for d inputs")
    select: Literal[SELECTIONS] = Field(
        default="loo", description="which local optimum of the likelihood (and which kernel, with auto) is kept: loo, "
                                   "the one of lowest leave-one-out error on the fitting points; evidence, the one of "
                                   "highest marginal likelihood (lwl's choice before the leave-one-out selection: on noise-free labels "
                                   "it can keep an interpolant at the bounds that predicts worse)")
    refit_points: int = Field(default=DEFAULT_REFIT_POINTS, ge=10, le=MAX_FIT_STEP_POINTS,
                              description="where the hyperparameters fitted on the subset do not carry over to every "
                                          "point (the evidence per point falls), they are fitted again on 4x as many "
                                          "points, up to this many")
    final_fit_points: int = Field(default=FINAL_FIT_POINTS, ge=0, le=MAX_FIT_STEP_POINTS,
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


    noise_floor: float | None = Field(
        default=None, gt=0, le=1.0,
        description="the lower bound of the fitted noise variance as a fraction of Var(y). Default (null): 1e-10, or "
                    "more where the inputs' and labels' float64 digits resolve less (an input offset far from its "
                    "spread); lwl's floor before was 1e-6, which smooths a deterministic simulator's labels")

    def check_labels(self, n: int, initial: int = 0, d: int | None = None) -> None:
        """A budget whose n labels (``initial`` of them the lab's own) would make the model work pass
        :data:`GP_MEMORY_LIMIT_BYTES` (:func:`served_model_bytes`) is refused at submit, naming the field
        and the largest budget that fits."""
        fit_points = self.max_fit_points or (default_fit_points(d) if d else MIN_FIT_POINTS)
        largest = max(fit_points, self.refit_points, self.final_fit_points)
        need = served_model_bytes(n, largest)
        if need <= GP_MEMORY_LIMIT_BYTES:
            return
        fits = int(n)
        while fits > 1 and served_model_bytes(fits, largest) > GP_MEMORY_LIMIT_BYTES:
            fits = int(fits * 0.99)
        raise ValueError(f"budget: a gp model on {n} labels needs about {need / 1e9:.1f} GB (four {n} x {n} matrices "
                         f"while a second factor is formed, and a likelihood step), more than the {GP_MEMORY_LIMIT_BYTES / 1e9:.0f} GB a job may use; "
                         f"a budget of up to about {max(fits - int(initial), 1)} labels fits")


MODELS.register("gp", GPSpec, document="lwl.models.gp:GaussianProcess.from_spec")
