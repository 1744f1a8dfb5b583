"""Finite mixture sum_k w_k mu_k of measures on the same space."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from lwl.measures.base import Measure, SeedLike, as_generator, as_matrix, from_spec, register_family


@register_family("mixture")
class Mixture(Measure):
    def __init__(self, components: Sequence[Measure], weights=None):
        if not components:
            raise ValueError("components: a mixture needs at least one component")
        self.components = list(components)
        k = len(self.components)
        w = np.full(k, 1.0 / k) if weights is None else as_matrix(weights, "weights", (k,))
        if np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights: must be non-negative with a positive sum")
        self.weights = w / w.sum()
        dims = {c.dim for c in self.components}
        if len(dims) != 1:
            raise ValueError(f"components: dimensions differ: {sorted(dims)}")

    @property
    def dim(self) -> int:
        return self.components[0].dim

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        rng = as_generator(seed)
        which = rng.choice(len(self.components), size=n, p=self.weights)
        out = np.empty((n, self.dim))
        for k, comp in enumerate(self.components):
            rows = np.flatnonzero(which == k)
            if rows.size:
                out[rows] = comp.sample(rows.size, rng)
        return out

    def log_prob(self, x: np.ndarray) -> np.ndarray:
        """log sum_k w_k p_k(x) (needs every component's ``log_prob``)."""
        from scipy.special import logsumexp

        with np.errstate(divide="ignore"):
            parts = np.stack([np.log(w) + c.log_prob(x) for w, c in zip(self.weights, self.components)], axis=1)
        return logsumexp(parts, axis=1)

    def mean_and_cov(self):
        moments = [c.mean_and_cov() for c in self.components]
        mean = sum(w * m for w, (m, _) in zip(self.weights, moments))
        second = sum(w * (c + np.outer(m, m)) for w, (m, c) in zip(self.weights, moments))
        return mean, second - np.outer(mean, mean)

    def _spec_fields(self) -> dict[str, Any]:
        return {"weights": self.weights.tolist(), "components": [c.to_spec() for c in self.components]}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "Mixture":
        comps = doc.get("components")
        if not isinstance(comps, list):
            raise ValueError("components: expected a list of distribution specs")
        return cls([from_spec(c) for c in comps], doc.get("weights"))
