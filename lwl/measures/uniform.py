"""Uniform measure on an axis-aligned box [low, high] in R^d (the paper's U([0,1]^d) baseline)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lwl.measures.base import Measure, SeedLike, as_generator, as_matrix, register_family


@register_family("uniform")
class UniformBox(Measure):
    def __init__(self, low, high):
        self.low = as_matrix(low, "low")
        self.high = as_matrix(high, "high", self.low.shape)
        if self.low.ndim != 1:
            raise ValueError("low: expected a vector")
        if np.any(self.high <= self.low):
            raise ValueError("high: every upper bound must exceed its lower bound")

    @classmethod
    def unit(cls, d: int) -> "UniformBox":
        return cls(np.zeros(d), np.ones(d))

    @property
    def dim(self) -> int:
        return self.low.shape[0]

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        x = as_generator(seed).random((n, self.dim))
        x *= self.high - self.low
        x += self.low
        return x

    def mean_and_cov(self):
        width = self.high - self.low
        return (self.low + self.high) / 2, np.diag(width**2 / 12)

    def _spec_fields(self) -> dict[str, Any]:
        return {"low": self.low.tolist(), "high": self.high.tolist()}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "UniformBox":
        return cls(doc.get("low"), doc.get("high"))
