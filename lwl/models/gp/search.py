"""The hyperparameter search of lwl's GP: the log marginal likelihood and its gradient, the
starts, bounds and noise floor, the choice among local optima and kernels, the evidence check,
the final fit and several fit draws.

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
every draw (docs/method/gp.md, "Which local optimum is kept"). LOO on the fitting points stands in
for held-out error; it cannot see what conditioning on every point does (the evidence check does).
"""

from __future__ import annotations

import math
from typing import Self

import numpy as np
import torch

from lwl.device import DTYPE, resolve_device
from lwl.models.gp.conditioned import (
    FACTORS,
    ConditionedModel,
    _lml_terms,
    duplicate_groups,
    profiled_mean,
)
from lwl.models.gp.kernel import GP_KERNELS, split_theta, unknown_kernel

AUTO = "auto"  # both kernels fitted, the one of lower leave-one-out error kept (GaussianProcess.fit)
SELECTIONS = ("loo", "evidence")  # how a fit chooses among its local optima and kernels (GaussianProcess)
DEFAULT_RESTARTS = 2  # a job's (GPSpec.restarts) and the constructor's
DEFAULT_REFIT_POINTS = 2000  # a job's (GPSpec.refit_points) and the constructor's
# the noise's lower bound in standardised units (Var(y) = 1) unless the data resolve less (GaussianProcess.noise_floor):
# scikit-learn's alpha; lwl's fixed 1e-6 before smoothed deterministic labels at 1e-3 of their spread
NOISE_FLOOR = 1e-10
# the random starts' noise is drawn log-uniform from here (standardised) up, not from the floor: a start
# at 1e-10 sits on the noise-free ridge, and the draws from the old 1e-6 floor are kept so that the
# optimum a start reaches does not move with the floor (p04's 2,000 points: 0.9205 held-out Err with
# draws from 1e-10, 0.8289 from 1e-6 or 1e-8; docs/results/budget-full-2000-gp-units/README.md); the
# optimiser still goes down to the floor
START_NOISE_LOW = 1e-6
MIN_FIT_POINTS = 300  # the likelihood's fitting subset of a gp job at d <= 8 (default_fit_points)
FIT_POINTS_PER_HYPERPARAMETER = 30
FIT_POINTS_RULE = f"max({MIN_FIT_POINTS}, {FIT_POINTS_PER_HYPERPARAMETER} (d + 2))"  # default_fit_points, in words
FINAL_FIT_POINTS = 2000  # the final fit's points (GaussianProcess._final_fit): a bounded O(M^3) per step
MAX_FIT_STEP_POINTS = 10_000  # one likelihood step holds about 7 m^2 float64 (fit_step_bytes): 5.6 GB at 10,000


def fit_step_bytes(m: int) -> int:
    """The float64 temporaries of one likelihood step on m points (:func:`_lml_and_gradient`):
    r^2, the kernel, its derivative factor, K_y, its factor, K_y^{-1} and W, about 7 m^2."""
    return 7 * 8 * int(m) ** 2


def default_fit_points(d: int) -> int:
    """The fitting subset of a gp whose ``max_fit_points`` is None (a job's default): the larger of
    300 and 30 points per hyperparameter, 30 (d + 2) (d lengthscales, the output scale, the
    noise). Why: 300 points do not pin 22 hyperparameters down. Measured (docs/method/gp.md, "How
    many points the likelihood is fitted on"): on the Welch et al. (1992) function (d = 20,
    2,000 labels of a three-member Q), fits on 300 points reached held-out Err 0.0031 on two of
    four draws of the same law against 0.0004-0.0005 on the others; on 450, 600 or 1,000 points
    all four read 0.00037-0.00046; on a smooth function of 30 inputs, 300 / 600 / 960 points gave
    0.027-0.032 / 0.018-0.021 / 0.015-0.016 on three draws. Below d = 9 the rule is 300, the
    default before it (the committed studies' problems at d <= 8 keep their numbers)."""
    return max(MIN_FIT_POINTS, FIT_POINTS_PER_HYPERPARAMETER * (int(d) + 2))


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
    ell, s2, noise = (torch.exp(t) for t in split_theta(theta))
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
        raise unknown_kernel(kind)
    Ky = s2 * Kl
    Ky.diagonal().add_(noise)
    L, info = torch.linalg.cholesky_ex(Ky)
    if int(info) != 0:
        raise torch.linalg.LinAlgError("K_y is not positive definite")
    lml, _, alpha = profiled_mean(L, y)
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
    t = torch.as_tensor(theta, dtype=X.dtype, device=X.device)
    with torch.no_grad():
        try:  # the likelihood's own factor, profiled mean and alpha (one place computes them)
            _, _, L, alpha = _lml_terms(kind, X, y, *split_theta(t))
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


def subset(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """The rows of a random subset of m of n points, sorted (drawn from ``rng``); every row where
    n <= m (nothing drawn)."""
    if n <= m:
        return np.arange(n)
    return np.sort(rng.choice(n, m, replace=False))


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


class HyperparameterSearch(ConditionedModel):
    """The fit's search on top of the conditioned model (:class:`ConditionedModel`): the evidence
    check conditions on every point to read it. Reads the constructor's settings of
    :class:`lwl.models.gp.GaussianProcess`."""

    def noise_floor(self, j: int = 0) -> float:
        """The lower bound of output j's sigma_n^2 in standardised units (Var(y) = 1) when
        ``noise_bounds[0]`` is None: the larger of :data:`NOISE_FLOOR` and the square of what the
        data resolve (:meth:`Standardisation.resolution`). Why: a deterministic
        simulator's labels carry no noise, and a floor of a fixed 1e-6 Var(y) (lwl's before)
        smoothed them at 1e-3 of their spread, where scikit-learn's standardised GP interpolates
        at 1e-10 (docs/method/gp.md, "The served GP in a lab's units"); below what float64 inputs and
        labels resolve, a smaller nugget fits round-off."""
        if self.noise_bounds[0] is not None:
            return float(self.noise_bounds[0])
        return max(NOISE_FLOOR, float(self.resolution_[j]) ** 2)

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

        return {k: getattr(self, k) for k in inspect.signature(type(self).__init__).parameters if k != "self"}

    def _fit_best_draw(self, X, y) -> Self:
        """``fit`` repeated ``fit_draws`` times, draw k from its own seed (k = 0: ``random_state``
        itself, so the first draw is the one-draw fit), each with its own fitting subsets and random
        starts; kept: the draw of lowest closed-form leave-one-out error of the mean (R&W sec.
        5.4.2, summed over outputs) on one common subset of M = min(n, ``final_fit_points`` or
        2,000) points drawn from ``random_state`` apart from every draw's.

        Why: beyond the evidence check's 2,000 points the hyperparameters depend on which 2,000 of
        the n labels a fit saw. On the 8,000-label study's p12 (Sobol G, d = 8;
        docs/results/budget-full-8000-gp-draws3/README.md, "Which fit is served"), the same 8,000
        labels fitted from seeds 0-4 gave held-out Err 1.21,
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
        # a stream of its own ("common" in ASCII): no draw's fitting subset
        rows = subset(n, M, np.random.default_rng([int(self.random_state), 0x636F6D6D6F6E, M]))
        errors, kept = [], []
        for s in seeds:
            g = type(self)(**{**params, "fit_draws": 1, "random_state": s}).fit(X, y)
            errors.append(float(sum(_loo_error(g.kernel_, *g._fitting_points(rows, j), g._theta(j))
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
        Err; docs/method/gp.md, "The final fit"): OTL 3.2e-5 -> 2.1e-5 and 3.0e-5 -> 2.2e-5, piston
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
            rows = subset(n, M, np.random.default_rng([self.random_state, j, M]))
            lo, hi = self._bounds(j)
            Xf, yf = self._fitting_points(rows, j)
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
            raise unknown_kernel(kernel, [AUTO, *GP_KERNELS])
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
        Matern's (docs/method/gp.md, "The model a lab deploys"); with ``select="loo"`` the budget
        study's g4 row is the same to the last digit (the same kernel kept)."""
        params = self._params()
        fits = []
        for kind in GP_KERNELS:
            g = type(self)(**{**params, "kernel": kind})
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

    def _start(self, j: int) -> tuple[np.ndarray, float, float]:
        """Output j's first start in the user's units: the hyperparameters as given, else the data's
        scales (each input's spread, Var(y), Var(y) / 100)."""
        d, p = self.n_features_in_, self.Y_.shape[1]
        s = self.standardisation_
        v = float(s.y_scale[j]) ** 2
        given_ell = _per_output(self.lengthscale, p, "lengthscale", d)
        given_s2, given_noise = _per_output(self.output_scale, p, "output_scale"), _per_output(self.noise, p, "noise")
        ell0 = given_ell[j] if given_ell is not None else s.x_scale.copy()
        s0 = float(given_s2[j]) if given_s2 is not None else v
        n0 = float(given_noise[j]) if given_noise is not None else v / 100.0
        return np.asarray(ell0, dtype=np.float64), s0, n0

    def search_stalled(self) -> np.ndarray:
        """Per output: whether the fitted hyperparameters are the search's first start itself
        (:meth:`_start`, clipped to the bounds) to round-off, i.e. the likelihood search never moved
        from it (False without ``optimize``: nothing was searched). Why: L-BFGS-B's first step from
        the data's scales can land where K_y does not factor; ``_maximise`` answers that region with a
        wall, and the search then ends at its start, reported as converged (p04 of the gp budget
        study, docs/results/budget-full-2000-gp-units/README.md, 2026-12-07). Such hyperparameters
        are not fitted to the labels; the served model's diagnosis says so
        (:meth:`lwl.models.GaussianProcess.diagnosis`)."""
        out = np.zeros(self.Y_.shape[1], dtype=bool)
        for j in range(len(out) if self.optimize else 0):
            lo, hi = self._bounds(j)
            start = np.clip(self._to_standard(j, *self._start(j)), lo, hi)
            out[j] = bool(np.allclose(self._theta(j), start, rtol=0.0, atol=1e-9))
        return out

    def _fit_output(self, j: int, fit_points: int,
                    warm: np.ndarray | None = None) -> tuple[np.ndarray, float, float, float, float]:
        """(lengthscales, output scale, noise, LML and leave-one-out error on the fitting points)
        of output j, in the user's units, at the local optimum ``select`` keeps among the
        starts' (fitted on the standardised data); the hyperparameters as given (and NaN, NaN)
        without ``optimize``; ``warm``: see ``_fit_hyperparameters``."""
        ell0, s0, n0 = self._start(j)
        if not self.optimize:  # (a score of a budgeted design: conditioning is all it needs)
            return np.asarray(ell0, dtype=np.float64).copy(), s0, n0, math.nan, math.nan
        lo, hi = self._bounds(j)
        rng = np.random.default_rng([self.random_state, j])
        rows = subset(len(self.Ys_), fit_points, rng)  # an O(n^3) likelihood: fitted on a subset, conditioned on all
        Xf, yf = self._fitting_points(rows, j)
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

    def _fitting_points(self, rows: np.ndarray, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, output j's labels) of the training ``rows``, standardised: what a likelihood is fitted on."""
        return self.Xs_[torch.as_tensor(rows, device=self.Xs_.device)], self._tensor(self.Ys_[rows, j])

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
