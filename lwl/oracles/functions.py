"""The benchmark functions of the paper's Table 1 (SM eqn app_test_functions).

g1 Sobol G, g2 Friedman-1, g3 Friedman-2 and g4 a kernel expansion, each defined for any
input dimension d >= the number of coordinates it reads. Written once for numpy and torch
with :func:`lwl.arrays.namespace` dispatch. ``params.scale`` multiplies every label (units,
and the robustness study's output scales); the default 1 is the paper's function.
"""

from __future__ import annotations

import math

import numpy as np

from lwl.arrays import asarray_like, namespace
from lwl.oracles.base import Oracle, register_oracle


class BenchmarkFunction(Oracle):
    """A scalar test function g, labelled as ``scale * g(x)``."""

    def __init__(self, dim: int | None = None, scale: float = 1.0):
        super().__init__(dim)
        if not (np.isfinite(scale) and scale != 0):
            raise ValueError("oracle.params.scale: must be finite and non-zero")
        self.scale = float(scale)

    def label(self, inputs):
        out = super().label(inputs)
        return out if self.scale == 1.0 else self.scale * out


@register_oracle("sobol_g")
class SobolG(BenchmarkFunction):
    """g1(x) = prod_j (|4 x_j - 2| + a_j) / (1 + a_j), a_j = (j - 2)/2, j = 1..d."""

    min_dim = 1

    def _label(self, x):
        xp = namespace(x)
        a = asarray_like((np.arange(1, x.shape[1] + 1) - 2.0) / 2.0, x)
        return xp.prod((xp.abs(4.0 * x - 2.0) + a[None, :]) / (1.0 + a[None, :]), 1)


@register_oracle("friedman1")
class Friedman1(BenchmarkFunction):
    """g2(x) = 10 sin(pi x1 x2) + 20 (x3 - 1/2)^2 + 10 x4 + 5 x5."""

    min_dim = 5

    def _label(self, x):
        xp = namespace(x)
        return (10.0 * xp.sin(math.pi * x[:, 0] * x[:, 1]) + 20.0 * (x[:, 2] - 0.5) ** 2
                + 10.0 * x[:, 3] + 5.0 * x[:, 4])


@register_oracle("friedman2")
class Friedman2(BenchmarkFunction):
    """g3(x) = sqrt((100 x1)^2 + (x3 b - 1 / (b (10 x4 + 1)))^2), b = 520 pi x2 + 40 pi."""

    min_dim = 4

    def _label(self, x):
        xp = namespace(x)
        b = 520.0 * math.pi * x[:, 1] + 40.0 * math.pi
        inner = x[:, 2] * b - 1.0 / (b * (10.0 * x[:, 3] + 1.0))
        return xp.sqrt((100.0 * x[:, 0]) ** 2 + inner**2)


@register_oracle("kernel_expansion")
class KernelExpansion(BenchmarkFunction):
    """g4(x) = sum_{l <= L} c_l exp(-||x - x_l||^2 / l^2), c_l ~ U(-1, 1), x_l ~ U(-4, 4)^d.

    The centres and coefficients are drawn once from ``seed``, so they are fixed for a given
    (dim, centres, seed). The input dimension must be given (``params.dim``) because the
    centres live in R^d.
    """

    min_dim = 1

    def __init__(self, dim: int = 10, centres: int = 1000, lengthscale: float = 5.0,
                 seed: int = 0, low: float = -4.0, high: float = 4.0, scale: float = 1.0):
        super().__init__(dim, scale)
        if centres < 1:
            raise ValueError("oracle.params.centres: must be >= 1")
        if not lengthscale > 0:
            raise ValueError("oracle.params.lengthscale: must be > 0")
        rng = np.random.default_rng(seed)
        self.coefficients = rng.uniform(-1.0, 1.0, size=centres)
        self.centres = rng.uniform(low, high, size=(centres, dim))
        self.lengthscale = lengthscale

    def lipschitz_bound(self) -> float:
        """|scale| sum_l |c_l| sqrt(2) e^(-1/2) / l: each bump's gradient 2 r / l^2 e^(-r^2 / l^2)
        peaks at r = l / sqrt(2) (lwl.bound uses it as the exact Lip(G*))."""
        return float(abs(self.scale) * np.abs(self.coefficients).sum() * math.sqrt(2.0) * math.exp(-0.5)
                     / self.lengthscale)

    def _label(self, x):
        xp = namespace(x)
        c = asarray_like(self.centres, x)
        sq = (x * x).sum(1)[:, None] + (c * c).sum(1)[None, :] - 2.0 * (x @ c.T)
        return xp.exp(-xp.clip(sq, 0.0, None) / self.lengthscale**2) @ asarray_like(self.coefficients, x)
