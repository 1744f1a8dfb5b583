"""Log-sine particles: the empirical measure (1/N) sum_q delta_{a_q} of N fields
a_q = exp(L c_q) on the closed grid x grid nodes of [0, 1]^2 (boundary nodes included),
(L c)(x, y) = sum_ij c_ij 2 sin(i pi x) sin(j pi y) (paper SM RTE, eqn rte_particleform).

This is the result of particle AMA (:mod:`lwl.design.particles`). Its distribution spec stores
the coefficients c (N x modes x modes) rather than the fields: 20^2 numbers per particle instead
of 51^2. Sampling draws particles with replacement, like :class:`lwl.measures.Empirical`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lwl.grids import unit_nodes
from lwl.measures.base import Measure, SeedLike, as_generator, as_matrix, register_family


def sine_table(modes: int, grid: int) -> np.ndarray:
    """(modes, grid): sqrt(2) sin(i pi x) on the nodes x = 0, 1/(grid-1), ..., 1."""
    return math.sqrt(2) * np.sin(math.pi * np.outer(np.arange(1, modes + 1), unit_nodes(grid)))


@register_family("particles")
class LogSineParticles(Measure):
    def __init__(self, coefficients, grid: int):
        if coefficients is None:
            raise ValueError("coefficients: missing")
        try:
            c = as_matrix(coefficients, "coefficients")
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc) if str(exc).startswith("coefficients") else f"coefficients: {exc}") from None
        if c.ndim != 3 or c.shape[0] == 0 or c.shape[1] != c.shape[2] or c.shape[1] == 0:
            raise ValueError(f"coefficients: expected an (N, modes, modes) array, got shape {c.shape}")
        if int(grid) < 3:
            raise ValueError(f"grid: at least 3 nodes per side, got {grid}")
        self.coefficients, self.grid = c, int(grid)

    @property
    def dim(self) -> int:
        return self.grid**2

    @property
    def modes(self) -> int:
        return self.coefficients.shape[1]

    def fields(self, c: np.ndarray | None = None) -> np.ndarray:
        """exp(L c) for (n, modes, modes) coefficients (default: every particle) -> (n, grid^2)."""
        c = self.coefficients if c is None else np.asarray(c, dtype=np.float64)
        S = sine_table(self.modes, self.grid)
        return np.exp(np.einsum("ia,nij,jb->nab", S, c, S).reshape(len(c), -1))

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        idx = as_generator(seed).integers(0, self.coefficients.shape[0], size=n)
        return self.fields(self.coefficients[idx])

    def mean_and_cov(self):
        a = self.fields()
        return a.mean(0), np.cov(a, rowvar=False, bias=True).reshape(self.dim, self.dim)

    def _spec_fields(self) -> dict[str, Any]:
        return {"grid": self.grid, "modes": self.modes, "coefficients": self.coefficients.tolist()}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "LogSineParticles":
        if "grid" not in doc:
            raise ValueError("grid: missing")
        return cls(doc.get("coefficients"), doc["grid"])
