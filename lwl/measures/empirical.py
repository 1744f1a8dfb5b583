"""Empirical measure (1/M) sum_m delta_{v_m}, sampled with replacement."""

from __future__ import annotations

from typing import Any

import numpy as np

from lwl.measures.base import Measure, SeedLike, as_generator, as_matrix, register_family


@register_family("empirical")
class Empirical(Measure):
    def __init__(self, points):
        self.points = as_matrix(points, "points")
        if self.points.ndim != 2 or self.points.shape[0] == 0:
            raise ValueError(f"points: expected a non-empty (M, d) array, got shape {self.points.shape}")

    @property
    def dim(self) -> int:
        return self.points.shape[1]

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        idx = as_generator(seed).integers(0, self.points.shape[0], size=n)
        return self.points[idx].copy()

    def mean_and_cov(self):
        return self.points.mean(0), np.cov(self.points, rowvar=False, bias=True).reshape(self.dim, self.dim)

    def _spec_fields(self) -> dict[str, Any]:
        return {"points": self.points.tolist()}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "Empirical":
        return cls(doc.get("points"))
