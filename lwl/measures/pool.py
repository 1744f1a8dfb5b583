"""A weighted pool: sum_p w_p N(x_p, L L^T), Gaussians of one shape centred on fixed points
(a kernel density estimate with weights; the design of the ``pool`` family)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lwl.measures.base import Measure, SeedLike, as_generator, as_matrix, register_family


@register_family("weighted_pool")
class WeightedPool(Measure):
    def __init__(self, points, weights, chol):
        self.points = as_matrix(points, "points")
        if self.points.ndim != 2 or self.points.shape[0] == 0:
            raise ValueError(f"points: expected a non-empty (P, d) array, got shape {self.points.shape}")
        P, d = self.points.shape
        w = as_matrix(weights, "weights", (P,))
        if np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights: must be non-negative with a positive sum")
        self.weights = w / w.sum()
        self.chol = np.tril(as_matrix(chol, "chol", (d, d)))
        if np.any(np.diag(self.chol) <= 0):
            raise ValueError("chol: the diagonal must be positive")

    @property
    def dim(self) -> int:
        return self.points.shape[1]

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        """Pick centres by weight, then add L z: the same seed gives the same bits."""
        rng = as_generator(seed)
        idx = rng.choice(self.points.shape[0], size=n, p=self.weights)
        return self.points[idx] + rng.standard_normal((n, self.dim)) @ self.chol.T

    def log_prob(self, x: np.ndarray) -> np.ndarray:
        """log sum_p w_p N(x; x_p, L L^T), with z = L^{-1}(x - x_p) formed as L^{-1}x - L^{-1}x_p."""
        from scipy.linalg import solve_triangular
        from scipy.special import logsumexp

        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        xt = solve_triangular(self.chol, x.T, lower=True).T
        pt = solve_triangular(self.chol, self.points.T, lower=True).T
        u = np.maximum((xt * xt).sum(1)[:, None] + (pt * pt).sum(1)[None, :] - 2.0 * xt @ pt.T, 0.0)
        const = float(np.sum(np.log(np.diag(self.chol)))) + 0.5 * self.dim * np.log(2 * np.pi)
        with np.errstate(divide="ignore"):
            return logsumexp(np.log(self.weights)[None, :] - 0.5 * u, axis=1) - const

    def mean_and_cov(self):
        mean = self.weights @ self.points
        centred = self.points - mean
        return mean, (centred * self.weights[:, None]).T @ centred + self.chol @ self.chol.T

    def _spec_fields(self) -> dict[str, Any]:
        return {"points": self.points.tolist(), "weights": self.weights.tolist(), "chol": self.chol.tolist()}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "WeightedPool":
        return cls(doc.get("points"), doc.get("weights"), doc.get("chol"))
