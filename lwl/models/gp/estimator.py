"""Gaussian-process regression with fitted hyperparameters: the surrogate a lab deploys
(docs/method/gp.md, "The model a lab deploys").

The estimator, in three parts by concern (scikit-learn's habits: the constructor stores its
arguments, ``fit`` returns self, learned state ends in ``_``):

- :mod:`lwl.models.gp.search`: the hyperparameter search (likelihood and gradient, starts,
  bounds and noise floor, the choice among optima and kernels, the evidence check, the final fit);
- :mod:`lwl.models.gp.conditioned`: the model conditioned at fixed hyperparameters (the factor of
  K_y and its jitter ladder, prediction, leave-one-out, the log marginal likelihood);
- :mod:`lwl.models.gp.document`: the model document (``to_spec``, ``from_spec``) and
  ``to_sklearn``;

over :mod:`lwl.models.gp.kernel` (the ARD kernels) and :mod:`lwl.models.gp.standardisation` (the
units a fit works in); :mod:`lwl.models.gp.spec` is a job's ``gp`` block.

**Multi-output** labels (n, p): p independent GPs, one set of hyperparameters (and mean) per
output.
"""

from __future__ import annotations

from typing import Self

from lwl.models.gp.document import ModelDocument
from lwl.models.gp.search import (
    AUTO,
    DEFAULT_REFIT_POINTS,
    DEFAULT_RESTARTS,
    FACTORS,
    FINAL_FIT_POINTS,
    HyperparameterSearch,
)


class GaussianProcess(HyperparameterSearch, ModelDocument):
    """GP regression with ARD lengthscales, output scale, noise and a constant mean fitted by
    maximum marginal likelihood (:mod:`lwl.models.gp.search`). scikit-learn's habits: the constructor
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
        or the one of highest log marginal likelihood (:mod:`lwl.models.gp.search`)
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
    lengthscale_bounds, output_scale_bounds : relative bounds (:mod:`lwl.models.gp.search`)
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

    def fit(self, X, y) -> Self:
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

    def fit_hyperparameters(self, X, y, *, check: bool = True) -> Self:
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


    def diagnosis(self, document: dict, labels, weights, loo_rows=None):
        """Its reading on Q's validation labels (lwl.models.diagnosis.Diagnosable; gp_diagnosis.served_diagnosis)."""
        from lwl.models.gp_diagnosis import served_diagnosis, stalled_search_warnings

        out = served_diagnosis(self, document, labels, weights, loo_rows)
        out.warnings[:0] = stalled_search_warnings(self.search_stalled(), self.kernel_)
        return out
