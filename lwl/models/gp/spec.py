"""The job spec's ``gp`` block and its registration (lwl.registry), with the memory a budgeted gp
job's model may need."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from lwl.models.gp.conditioned import PREDICT_BLOCK, PREDICT_BLOCK_ELEMENTS
from lwl.models.gp.kernel import GP_KERNELS
from lwl.models.gp.search import (
    AUTO,
    DEFAULT_REFIT_POINTS,
    DEFAULT_RESTARTS,
    FINAL_FIT_POINTS,
    MAX_FIT_STEP_POINTS,
    MIN_FIT_POINTS,
    SELECTIONS,
    default_fit_points,
    fit_step_bytes,
)
from lwl.params import StrictModel
from lwl.registry import MODELS

# the most memory a budgeted gp job's served model may need (GPSpec.check_labels): a budget beyond it is refused at
# submit, naming the field (bench/gp_memory.py measures the GP's peak at 2,000, 8,000 and 20,000 labels); a deployment
# whose API and workers hold more sets LWL_GP_MEMORY_GB in both
GP_MEMORY_LIMIT_BYTES = int(float(os.environ.get("LWL_GP_MEMORY_GB", "6")) * 10**9)


def served_model_bytes(n: int, largest_fit: int) -> int:
    """The peak a budgeted gp job's model work may reach on n labels: a GP fitted to n points alone
    peaks at three n x n matrices (measured, bench/gp_memory.py: 9.99 GB at 20,000 points; torch's
    Cholesky with ``out=`` works in a copy), and the design holds one more factor while it fits
    another row set, so four of 8 n^2 bytes; a prediction block beside them, and the likelihood
    step of its largest fit (``largest_fit`` points, :func:`fit_step_bytes`)."""
    n = int(n)
    block = max(1, min(PREDICT_BLOCK, PREDICT_BLOCK_ELEMENTS // max(n, 1)))
    return 4 * 8 * n * n + 2 * 8 * n * block + fit_step_bytes(min(n, largest_fit))


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
                                       "draws did not change a verdict of the 8,000-label study "
                                       "(docs/results/budget-full-8000-gp-draws3/README.md, "
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
