"""A measure restricted to an input domain D (:class:`lwl.domain.Domain`):

    p^D(x) = q(x) 1_D(x) / Z,    Z = P_q(X in D) = int_D q,

the law of X ~ q conditioned on X in D. Sampling is rejection: draw from q, keep the draws in
D, draw again (from the same generator) until n are kept. When every one of the first n draws
lies in D the samples equal ``base.sample(n, seed)`` bit for bit, so a domain that does not
bind changes nothing.

Z is exact where a closed form exists (a Gaussian or a mixture of Gaussians on a box: the
multivariate normal CDF, 1-d by erf), a randomised quasi-Monte Carlo estimate for Gaussians under
linear constraints A x <= b, and a seeded Monte Carlo estimate otherwise (other base laws), with
its standard error in :meth:`Truncated.normaliser`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lwl.domain import Domain
from lwl.measures.base import Measure, SeedLike, as_generator, from_spec, register_family

# a law with less than this share of its mass in D is refused: rejection would draw more than
# 1 / MIN_INSIDE points per sample kept, and the law is no longer the one that was meant
MIN_INSIDE = 1e-3
# a design keeps at least this share of q_theta's mass in D: ten times what rejection can draw
# from (MIN_INSIDE), so that the design's estimate on its INSIDE_SAMPLES draws (about 41 hits at
# the bar; lwl.design.families.constrained) never lets through a law that /samples cannot draw
MIN_DESIGN_SHARE = 10 * MIN_INSIDE
NORMALISER_MC = 1 << 18  # Monte Carlo draws of Z where it has no closed form nor a Gaussian base
QMC_LOG2, QMC_REPLICAS = 17, 8  # randomised QMC of Z for a Gaussian base under linear constraints
MOMENT_SAMPLES = 1 << 16  # draws behind mean_and_cov (a Monte Carlo estimate)
_SEED = 20_261_127  # the fixed stream of those estimates (never a job's)


def box_probability(mean: np.ndarray, cov: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """P(low <= X <= high) for X ~ N(mean, cov): erf in 1-d, else scipy's multivariate normal
    CDF (Genz's quasi-Monte Carlo, absolute error ~1e-7 at the tolerances asked here)."""
    if len(mean) == 1:
        s = math.sqrt(cov[0, 0]) * math.sqrt(2.0)
        return 0.5 * (math.erf((high[0] - mean[0]) / s) - math.erf((low[0] - mean[0]) / s))
    from scipy.stats import multivariate_normal

    p = multivariate_normal.cdf(high, mean, cov, lower_limit=low, abseps=1e-9, releps=1e-7,
                                maxpts=200_000 * len(mean), rng=np.random.default_rng(_SEED))
    return float(min(max(p, 0.0), 1.0))


@register_family("truncated")
class Truncated(Measure):
    """``base`` restricted to ``domain`` (see the module docstring)."""

    def __init__(self, base: Measure, domain: Domain):
        if base.dim != domain.dim:
            raise ValueError(f"domain: dimension {domain.dim} does not match the distribution's {base.dim}")
        self.base, self.domain = base, domain
        self._z: tuple[float, float] | None = None

    @property
    def dim(self) -> int:
        return self.base.dim

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        """n draws of q kept in D (rejection, module docstring); raises ValueError when q puts
        less than MIN_INSIDE of its mass in D."""
        rng = as_generator(seed)
        x = self.base.sample(n, rng)
        inside = self.domain.contains(x)
        if inside.all():
            return x
        kept, drawn, accepted = [x[inside]], n, int(inside.sum())
        while accepted < n:
            rate = max(accepted / drawn, MIN_INSIDE)
            if drawn >= max(n, 1000) / MIN_INSIDE:  # the share is below MIN_INSIDE, beyond doubt
                raise ValueError(f"domain: the distribution puts {accepted / drawn:.2g} of its mass inside the "
                                 f"domain (at least {MIN_INSIDE:g} needed to draw from it)")
            m = int(min(math.ceil(1.2 * (n - accepted) / rate) + 64, 4_000_000))
            x = self.base.sample(m, rng)
            inside = self.domain.contains(x)
            kept.append(x[inside])
            drawn += m
            accepted += int(inside.sum())
        return np.concatenate(kept)[:n]

    def normaliser(self) -> tuple[float, float]:
        """(Z, its standard error): 0 when exact (Gaussian or Gaussian mixture base, box
        domain); randomised QMC for Gaussian bases under A x <= b (:meth:`_qmc_share`); else a
        Monte Carlo estimate from NORMALISER_MC draws of q."""
        if self._z is None:
            self._z = self._normaliser()
        return self._z

    def _normaliser(self) -> tuple[float, float]:
        from lwl.measures.gaussian import Gaussian
        from lwl.measures.mixture import Mixture

        d = self.domain
        comps, weights = ([self.base], np.ones(1)) if not isinstance(self.base, Mixture) else (
            self.base.components, self.base.weights)
        if all(isinstance(c, Gaussian) for c in comps):
            if d.is_box:
                z = sum(w * box_probability(c.mean, c.cov, d.low, d.high) for w, c in zip(weights, comps))
                return float(z), 0.0
            parts = [self._qmc_share(c) for c in comps]
            return (float(sum(w * z for w, (z, _) in zip(weights, parts))),
                    float(math.sqrt(sum((w * se) ** 2 for w, (_, se) in zip(weights, parts)))))
        x = self.base.sample(NORMALISER_MC, [_SEED, 1])
        z = float(d.contains(x).mean())
        return z, math.sqrt(max(z * (1 - z), 1e-300) / NORMALISER_MC)

    def _qmc_share(self, g) -> tuple[float, float]:
        """P(X in D) for X ~ N(m, L L^T) by randomised quasi-Monte Carlo: QMC_REPLICAS scrambled
        Sobol' sets of 2^k points mapped by m + L Phi^{-1}(u); the estimate is their mean, its
        standard error their spread (an indicator is not smooth, but in low dimension the error
        still falls much faster than Monte Carlo's N^(-1/2))."""
        from scipy.special import ndtri
        from scipy.stats import qmc

        k = QMC_LOG2 if g.dim <= 16 else QMC_LOG2 - 3
        shares = []
        for r in range(QMC_REPLICAS):
            u = qmc.Sobol(g.dim, scramble=True, seed=np.random.default_rng([_SEED, 3, r])).random_base2(k)
            shares.append(self.domain.contains(g.mean + ndtri(u) @ g.chol.T).mean())
        return float(np.mean(shares)), float(np.std(shares, ddof=1) / math.sqrt(QMC_REPLICAS))

    def log_prob(self, x: np.ndarray) -> np.ndarray:
        """log p^D(x) = log q(x) - log Z in D, -inf outside (needs ``base.log_prob``)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        out = np.full(len(x), -np.inf)
        inside = self.domain.contains(x)
        if inside.any():
            out[inside] = self.base.log_prob(x[inside]) - math.log(self.normaliser()[0])
        return out

    def mean_and_cov(self) -> tuple[np.ndarray, np.ndarray]:
        """Monte Carlo moments from MOMENT_SAMPLES draws of a fixed stream (no closed form in
        general: pictures and the bound's second moment use them)."""
        x = self.sample(MOMENT_SAMPLES, [_SEED, 2])
        m = x.mean(0)
        c = (x - m).T @ (x - m) / len(x)
        return m, 0.5 * (c + c.T)

    def _spec_fields(self) -> dict[str, Any]:
        return {"domain": self.domain.to_json(), "base": self.base.to_spec()}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "Truncated":
        if not isinstance(doc.get("domain"), dict) or not isinstance(doc.get("base"), dict):
            raise ValueError("truncated: needs a domain object and a base distribution spec")
        return cls(from_spec(doc["base"]), Domain.from_json(doc["domain"]))
