"""Gaussian-process regression with fitted hyperparameters: the surrogate a lab deploys
(docs/method/gp.md, "The model a lab deploys"). The estimator is :class:`GaussianProcess`
(:mod:`lwl.models.gp.estimator`, which maps its parts); importing this package registers a job's
``gp`` block (:mod:`lwl.models.gp.spec`). The names below are those ``lwl.models.gp`` has always
offered."""

from lwl.models.gp.conditioned import (
    FACTORS,
    JITTER_LADDER,
    LOO_BLOCK_ELEMENTS,
    PREDICT_BLOCK,
    PREDICT_BLOCK_ELEMENTS,
    STDS,
    _lml_terms,
    duplicate_groups,
)
from lwl.models.gp.document import (
    DOCUMENT_KIND,
    DOCUMENT_VERSION,
    KernelRidgeForm,
    as_kernel_ridge,
)
from lwl.models.gp.estimator import GaussianProcess
from lwl.models.gp.kernel import (
    GP_KERNELS,
    KERNEL_BLOCK_ELEMENTS,
    ard_kernel,
)
from lwl.models.gp.search import (
    AUTO,
    DEFAULT_REFIT_POINTS,
    DEFAULT_RESTARTS,
    FINAL_FIT_POINTS,
    FIT_POINTS_PER_HYPERPARAMETER,
    FIT_POINTS_RULE,
    MAX_FIT_STEP_POINTS,
    MIN_FIT_POINTS,
    NOISE_FLOOR,
    SELECTIONS,
    START_NOISE_LOW,
    _lml_and_gradient,
    _loo_error,
    default_fit_points,
    fit_step_bytes,
)
from lwl.models.gp.spec import GP_MEMORY_LIMIT_BYTES, GPSpec, served_model_bytes
from lwl.models.gp.standardisation import Standardisation

__all__ = ["AUTO", "DEFAULT_REFIT_POINTS", "DEFAULT_RESTARTS", "DOCUMENT_KIND", "DOCUMENT_VERSION",
           "FACTORS", "FINAL_FIT_POINTS", "FIT_POINTS_PER_HYPERPARAMETER", "FIT_POINTS_RULE", "GP_KERNELS",
           "GP_MEMORY_LIMIT_BYTES", "JITTER_LADDER", "KERNEL_BLOCK_ELEMENTS", "LOO_BLOCK_ELEMENTS",
           "MAX_FIT_STEP_POINTS", "MIN_FIT_POINTS", "NOISE_FLOOR", "PREDICT_BLOCK", "PREDICT_BLOCK_ELEMENTS",
           "SELECTIONS", "START_NOISE_LOW", "STDS", "GPSpec", "GaussianProcess", "KernelRidgeForm",
           "Standardisation", "_lml_and_gradient", "_lml_terms", "_loo_error", "ard_kernel",
           "as_kernel_ridge", "default_fit_points", "duplicate_groups", "fit_step_bytes",
           "served_model_bytes"]
