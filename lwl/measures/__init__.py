"""Probability measures: samplers with explicit seeds and versioned distribution specs."""

from lwl.measures.base import Measure, as_generator, from_spec
from lwl.measures.clipped import Clipped
from lwl.measures.empirical import Empirical
from lwl.measures.gaussian import MIN_DIAG, Gaussian, gaussian_log_prob, project_cholesky
from lwl.measures.kle import KLEGaussian, LogNormal, kle_w2_squared
from lwl.measures.mixture import Mixture
from lwl.measures.particles import LogSineParticles
from lwl.measures.pool import WeightedPool
from lwl.measures.on_domain import constrain, on_domain
from lwl.measures.truncated import Truncated
from lwl.measures.uniform import UniformBox

__all__ = [
    "Measure", "from_spec", "as_generator",
    "Gaussian", "gaussian_log_prob", "project_cholesky", "MIN_DIAG",
    "UniformBox", "Truncated", "Clipped", "constrain", "on_domain", "Mixture", "Empirical", "WeightedPool",
    "KLEGaussian", "LogNormal", "kle_w2_squared", "LogSineParticles",
]
