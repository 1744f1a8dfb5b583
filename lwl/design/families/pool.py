"""A weighted pool (a differentiable coreset): nu_theta = sum_p w_p N(x_p, h^2 S S^T) over a
pool {x_p} of Q's validation points, S S^T Q's covariance; the bilevel method moves the
weights w = softmax(logits) and the bandwidth h.

This family contains what the coreset baselines choose from (with h -> 0 and weights on a
subset it is a coreset), so the bilevel gradient can compete with them on their own ground,
while h > 0 keeps the design a density that can put samples between the pool's points.

In Q's whitened coordinates (x~ = S^{-1}(x - mu_Q)), with u_ip = |x~_i - x~_p|^2,
log N_p(x_i) = -u_ip / (2 h^2) - d log h + const, and with responsibilities
r_ip = w_p N_p(x_i) / p_theta(x_i) the score of sum_i c_i log p_theta(x_i) is

    d/dlogit_p = sum_i c_i (r_ip - w_p),    d/dlog h = sum_i c_i sum_p r_ip (u_ip / h^2 - d).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field
from scipy.linalg import solve_triangular
from scipy.special import logsumexp

from lwl.design.adaptive import WhitenedGaussian
from lwl.design.families.base import Params, softmax
from lwl.measures import WeightedPool
from lwl.params import MAX_SEED, StrictModel
from lwl.registry import FAMILIES
from lwl.streams import STREAM_POOL

MAX_LOGIT = 8.0
MIN_LOG_H, MAX_LOG_H = float(np.log(1e-3)), float(np.log(3.0))


def scott_bandwidth(pool_size: int, dim: int) -> float:
    """Scott's rule in whitened coordinates, P^(-1/(d+4)): the initial design is Q's KDE."""
    return float(pool_size ** (-1.0 / (dim + 4)))


def pool_points(q, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(points, weights): all of Q's validation points with weights w_k / M_k when there are at
    most ``size``, else ``size`` of them drawn without replacement with those probabilities
    (seeded) and equal weights."""
    pts = np.concatenate(q.validation)
    a = q.point_weights(q.validation, q.weights)
    if len(pts) <= size:
        return pts, a / a.sum()
    idx = np.sort(np.random.default_rng([seed, STREAM_POOL]).choice(len(pts), size=size, replace=False, p=a / a.sum()))
    return pts[idx], np.full(size, 1.0 / size)


class PoolFamily:
    """params: logits (P,), log_h (1,); phi = (logits - mean(logits), log_h)."""

    name = "pool"
    param_names = ("logits", "log_h")

    def __init__(self, spec, coords: WhitenedGaussian, q):
        self.spec, self.coords = spec, coords  # PoolFamilySpec with pool_seed and bandwidth filled in
        self.points, self.weights0 = pool_points(q, spec.pool_size, spec.pool_seed or 0)
        self.P, self.d = self.points.shape
        self.points_w = self.whiten(self.points)

    def whiten(self, x: np.ndarray) -> np.ndarray:
        return solve_triangular(self.coords.S, (x - self.coords.centre).T, lower=True, check_finite=False).T

    def initial(self) -> Params:
        h = self.spec.bandwidth if self.spec.bandwidth is not None else scott_bandwidth(self.P, self.d)
        return {"logits": np.log(self.weights0), "log_h": np.array([np.log(h)])}

    def start_points(self, moment_matched: bool = True) -> list[tuple[str, Params]]:
        return [("given", self.initial())]

    def broadened(self, params: Params, factor: float) -> Params | None:
        """The bandwidth that scales the pool's covariance by ``factor``: each kernel is h^2 Sigma_hat
        around points of covariance ~Sigma_hat, so (1 + h'^2) = factor (1 + h^2) (None when the
        bandwidth is not free)."""
        if "bandwidth" not in self.spec.free:
            return None
        h2 = float(np.exp(2 * params["log_h"][0]))
        h_new = np.sqrt(max(factor * (1.0 + h2) - 1.0, 1e-12))
        return {**params, "log_h": np.array([np.clip(np.log(h_new), MIN_LOG_H, MAX_LOG_H)])}

    def weights(self, params: Params) -> np.ndarray:
        return softmax(params["logits"])

    def measure(self, params: Params) -> WeightedPool:
        return WeightedPool(self.points, self.weights(params), float(np.exp(params["log_h"][0])) * self.coords.S)

    def to_phi(self, params: Params) -> np.ndarray:
        return np.concatenate([params["logits"] - params["logits"].mean(), params["log_h"]])

    def from_phi(self, phi: np.ndarray) -> Params:
        return {"logits": phi[:self.P].copy(), "log_h": phi[self.P:].copy()}

    def mask(self) -> np.ndarray:
        free = self.spec.free
        return np.concatenate([np.full(self.P, 1.0 if "weights" in free else 0.0),
                               [1.0 if "bandwidth" in free else 0.0]])

    def bounds(self, phi0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = np.concatenate([np.full(self.P, -MAX_LOGIT), [MIN_LOG_H]])
        hi = np.concatenate([np.full(self.P, MAX_LOGIT), [MAX_LOG_H]])
        return np.minimum(lo, phi0), np.maximum(hi, phi0)

    def _sq_distances(self, x: np.ndarray) -> np.ndarray:
        xt = self.whiten(x)
        u = (xt * xt).sum(1)[:, None] + (self.points_w ** 2).sum(1)[None, :] - 2.0 * xt @ self.points_w.T
        return np.maximum(u, 0.0)

    def log_prob(self, params: Params, x: np.ndarray) -> np.ndarray:
        """log p_theta(x), shape (n,)."""
        return logsumexp(self._joint(params, self._sq_distances(x)), axis=1)

    def _joint(self, params: Params, u: np.ndarray) -> np.ndarray:
        h = float(np.exp(params["log_h"][0]))
        logdet = self.d * np.log(h) + float(np.sum(np.log(np.diag(self.coords.S))))
        with np.errstate(divide="ignore"):
            return (np.log(self.weights(params))[None, :] - u / (2 * h * h) - logdet
                    - 0.5 * self.d * np.log(2 * np.pi))

    def score(self, params: Params, x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u = self._sq_distances(x)
        joint = self._joint(params, u)
        r = np.exp(joint - logsumexp(joint, axis=1, keepdims=True))
        h2 = float(np.exp(2 * params["log_h"][0]))
        g_logits = c @ r - c.sum() * self.weights(params)
        g_log_h = np.array([float(c @ (r * (u / h2 - self.d)).sum(1))])
        return g_logits, g_log_h

    def phi_gradient(self, phi: np.ndarray, grads) -> np.ndarray:
        return np.concatenate(grads)

    def plain_step(self, params: Params, grads, step: float):
        raise ValueError("algorithm.optimizer: the paper's plain step is defined for the gaussian family only")

    def diagnostics(self, params: Params) -> dict:
        w = self.weights(params)
        return {"pool_size": self.P, "bandwidth": float(np.exp(params["log_h"][0])),
                "effective_points": float(1.0 / np.sum(w * w)),
                "weight_quantiles": {q: float(np.quantile(w * self.P, q)) for q in (0.1, 0.5, 0.9)}}


def build(spec, coords: WhitenedGaussian, q) -> PoolFamily:
    """The bilevel builder registered for ``pool`` (the ``register`` call at the end of this module)."""
    return PoolFamily(spec, coords, q)


def fill(family, q, seed: int):
    """A pool family's missing seed (the job's) and bandwidth (Scott's rule on the pool)."""
    filled = []
    if family.pool_seed is None:
        family.pool_seed = seed
        filled.append("pool_seed")
    if family.bandwidth is None:
        size = min(family.pool_size, sum(len(x) for x in q.validation))
        family.bandwidth = scott_bandwidth(size, q.dim)
        filled.append("bandwidth")
    return family, filled


# -- the job spec's block for this component, and its registration (lwl.registry) --


class PoolFamilySpec(StrictModel):
    """nu_theta = sum_p w_p N(x_p, h^2 C_Q) over a pool {x_p} of Q's validation points (all of
    them, or ``pool_size`` drawn with probabilities w_k / M_k), C_Q Q's covariance; the bilevel
    method moves the weights and the bandwidth h (adaptive optimiser). Initially Q's kernel
    density estimate: the points' own weights and Scott's bandwidth P^(-1/(d+4)). A
    differentiable coreset (lwl.design.families.pool)."""

    name: Literal["pool"] = "pool"
    dim_field: ClassVar[str] = "name"
    pool_size: int = Field(default=1000, ge=2, le=20_000)
    bandwidth: float | None = Field(default=None, gt=0, le=3, description="h in standard deviations of Q; "
                                    "default: Scott's rule P^(-1/(d+4))")
    pool_seed: int | None = Field(default=None, ge=0, le=MAX_SEED, description="default: the job's seed")
    free: list[Literal["weights", "bandwidth"]] = Field(default_factory=lambda: ["weights", "bandwidth"],
                                                        min_length=1)


FAMILIES.register("pool", PoolFamilySpec, bilevel=build, fill=fill)
