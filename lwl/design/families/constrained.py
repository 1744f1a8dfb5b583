"""Any bilevel family restricted to the job's input domain D (``domain`` in the job spec).

With q_theta the family's density (Gaussian, mixture, auto, pool), the constrained family is

    p_theta(x) = q_theta(x) 1_D(x) / Z(theta),    Z(theta) = int_D q_theta,

sampled by rejection (:class:`lwl.measures.Truncated`). Its parameters, whitened coordinates,
start points and parameter box are the inner family's: only the law of the draws changes, and a
domain that does not bind changes nothing.

The bilevel gradient is a score-function gradient, sum_i c_i grad_theta log p_theta(u_i)
(:mod:`lwl.design.bilevel`); D does not depend on theta, so with s_theta = grad_theta log q_theta

    grad_theta log p_theta(x) = s_theta(x) - grad_theta log Z(theta),
    grad_theta log Z(theta) = int_D grad q_theta / Z = E_{p_theta}[s_theta],

and the weighted score is sum_i c_i s_theta(u_i) - (sum_i c_i) E_{p_theta}[s_theta]. The
expectation is a Monte Carlo mean over ``normaliser_samples`` draws of p_theta (no oracle labels),
seeded by theta itself: the score stays a function of (theta, u, c), so a checkpointed run
resumes bit for bit. Tests check it against finite differences of the exact log-density.
"""

from __future__ import annotations

import hashlib

import numpy as np

from lwl.design.families.base import BilevelFamily, Params
from lwl.domain import Domain
from lwl.measures import Measure
from lwl.measures.truncated import MIN_DESIGN_SHARE, Truncated
from lwl.streams import STREAM_NORMALISER

NORMALISER_SAMPLES = 4096  # draws of p_theta behind E[s_theta] in each score
INSIDE_SAMPLES = 4096  # draws of q_theta behind the share-inside check of a step


class ConstrainedFamily:
    """The inner family's q_theta restricted to D (module docstring); every other attribute
    (start points, broadening, diagnostics, ...) is the inner family's."""

    def __init__(self, inner: BilevelFamily, domain: Domain, seed: int,
                 normaliser_samples: int = NORMALISER_SAMPLES):
        self.inner, self.domain, self.seed = inner, domain, int(seed)
        self.normaliser_samples = int(normaliser_samples)

    def __getattr__(self, name):  # only called for what this class does not define
        if name == "inner":  # not set yet (a copy under construction): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def measure(self, params: Params) -> Measure:
        return Truncated(self.inner.measure(params), self.domain)

    def _stream(self, params: Params, purpose: int) -> list[int]:
        """A seed that is a function of theta (and the job's seed): the same theta, the same draws."""
        h = hashlib.blake2b(digest_size=8)
        for n in self.inner.param_names:
            h.update(np.ascontiguousarray(params[n], dtype=np.float64).tobytes())
        return [self.seed, STREAM_NORMALISER, purpose, int.from_bytes(h.digest(), "little")]

    def normaliser_score(self, params: Params) -> tuple[np.ndarray, ...]:
        """E_{p_theta}[s_theta] = grad_theta log Z(theta), a Monte Carlo mean (module docstring)."""
        M = self.normaliser_samples
        x = self.measure(params).sample(M, self._stream(params, 0))
        return tuple(self.inner.score(params, x, np.full(M, 1.0 / M)))

    def score(self, params: Params, x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
        """sum_i c_i grad log p_theta(x_i) = sum_i c_i s_theta(x_i) - (sum_i c_i) E_p[s_theta]."""
        c = np.asarray(c, dtype=np.float64)
        total = float(c.sum())
        raw = self.inner.score(params, x, c)
        if total == 0.0:
            return tuple(raw)
        return tuple(g - total * gz for g, gz in zip(raw, self.normaliser_score(params)))

    def share_inside(self, params: Params) -> float:
        """The share of q_theta's mass in D, estimated on INSIDE_SAMPLES draws."""
        x = self.inner.measure(params).sample(INSIDE_SAMPLES, self._stream(params, 1))
        return float(self.domain.contains(x).mean())

    def admissible(self, params: Params) -> bool:
        """A step may go to theta only when q_theta keeps at least MIN_DESIGN_SHARE of its mass in
        D: below MIN_INSIDE it cannot be sampled (and such a law is a runaway, not a design)."""
        return self.share_inside(params) >= MIN_DESIGN_SHARE


def constrain_family(family: BilevelFamily, domain: Domain | None, seed: int) -> BilevelFamily:
    """``family`` restricted to ``domain`` (unchanged without one)."""
    return family if domain is None else ConstrainedFamily(family, domain, seed)
