"""The paper's family: one Gaussian N(m, LL^T), theta = (m, L) (SM "Bilevel minimization")."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from lwl.design.adaptive import WhitenedGaussian
from lwl.design.families.base import Params
from lwl.measures import Gaussian, project_cholesky
from lwl.measures.gaussian import moment_matched, regularised_cholesky
from lwl.params import StrictModel, check_spd
from lwl.registry import FAMILIES


class GaussianFamily:
    """N(m, LL^T); phi = (m~, log diag L~, offdiag L~) with m = mu_Q + S m~, L = S L~."""

    name = "gaussian"
    initial_is_baseline = "normal"  # theta^0 = N(mean, cov) is the normal baseline: no candidate of its own
    param_names = ("mean", "chol")

    def __init__(self, spec, coords: WhitenedGaussian):
        self.spec = spec  # GaussianFamilySpec with mean and cov filled in
        self.coords = coords

    def initial(self) -> Params:
        g = Gaussian(self.spec.mean, cov=self.spec.cov)
        return {"mean": g.mean, "chol": g.chol}

    def start_points(self, moment_matched: bool = True) -> list[tuple[str, Params]]:
        """Q's moment-matched Gaussian (in the free parameters) then theta^0; theta^0 only when
        ``moment_matched`` is False or the two coincide."""
        given = self.initial()
        free = self.spec.free
        mean = self.coords.centre if "mean" in free else given["mean"]
        chol = self.coords.S if "cov" in free else given["chol"]
        if not moment_matched or (np.allclose(mean, given["mean"]) and np.allclose(chol, given["chol"])):
            return [("given", given)]
        return [("moment_matched", {"mean": mean, "chol": chol}), ("given", given)]

    def broadened(self, params: Params, factor: float) -> Params | None:
        """N(m, factor * LL^T): the same mean, the covariance scaled (None when it is not free)."""
        if "cov" not in self.spec.free:
            return None
        return {"mean": params["mean"], "chol": np.sqrt(factor) * params["chol"]}

    def measure(self, params: Params) -> Gaussian:
        return Gaussian.from_parameters(params["mean"], params["chol"])

    def to_phi(self, params: Params) -> np.ndarray:
        return self.coords.to_phi(params["mean"], params["chol"])

    def from_phi(self, phi: np.ndarray) -> Params:
        mean, chol = self.coords.from_phi(phi)
        return {"mean": mean, "chol": chol}

    def mask(self) -> np.ndarray:
        return self.coords.mask(self.spec.free)

    def bounds(self, phi0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.coords.bounds(phi0)

    def score(self, params: Params, x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.measure(params).score(x, weights=c)  # closed form, O(n d^2)

    def phi_gradient(self, phi: np.ndarray, grads: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return self.coords.gradient(phi, *grads)

    def plain_step(self, params: Params, grads: tuple[np.ndarray, np.ndarray], step: float) -> tuple[Params, float]:
        """theta <- theta - t grad with diag(L) clamped at 1e-7 (the paper's projection)."""
        g_mean, g_chol = grads
        free = self.spec.free
        mean = params["mean"] - step * g_mean if "mean" in free else params["mean"]
        chol = project_cholesky(params["chol"] - step * g_chol) if "cov" in free else params["chol"]
        return {"mean": mean, "chol": chol}, float(np.sqrt(np.sum(g_mean**2) + np.sum(g_chol**2)))

    def diagnostics(self, params: Params) -> dict:
        return {}


def build(spec, coords: WhitenedGaussian, q) -> GaussianFamily:
    """The bilevel builder registered for ``gaussian`` (the ``register`` call at the end of this module)."""
    return GaussianFamily(spec, coords)


def fill(family, q, seed: int):
    """A Gaussian family's missing mean / cov: Q's moment-matched Gaussian."""
    filled = []
    if family.mean is None or family.cov is None:
        mean, cov = moment_matched(np.concatenate(q.validation), q.point_weights(q.validation, q.weights))
        if family.mean is None:
            family.mean = mean.tolist()
            filled.append("mean")
        if family.cov is None:
            L = regularised_cholesky(cov, rel=1e-6)  # positive definite even for degenerate Q samples
            family.cov = (L @ L.T).tolist()
            filled.append("cov")
    return family, filled


# -- the job spec's block for this component, and its registration (lwl.registry) --


class GaussianFamilySpec(StrictModel):
    """nu_theta = N(m, LL^T) with theta^0 = (mean, chol(cov)); ``free`` lists what moves.

    A missing ``mean`` or ``cov`` is taken from Q's moment-matched Gaussian (the weighted mean
    and covariance of Q's validation samples) when the job starts; the result's ``spec`` holds
    the values used."""

    name: Literal["gaussian"] = "gaussian"
    dim_field: ClassVar[str] = "mean"  # the field that fixes the dimension (for error messages)
    mean: list[float] | None = Field(default=None, min_length=1, description="default: the mean of Q's validation samples")
    cov: list[list[float]] | None = Field(default=None, min_length=1,
                                          description="default: the covariance of Q's validation samples")
    free: list[Literal["mean", "cov"]] = Field(default_factory=lambda: ["mean", "cov"])

    @model_validator(mode="after")
    def _spd(self):
        if self.mean is not None and self.cov is not None:
            check_spd(self.mean, self.cov)
        elif self.mean is not None and len(self.mean) == 0:
            raise ValueError("mean: must have at least one entry")
        elif self.cov is not None:
            check_spd([0.0] * len(self.cov), self.cov)
        return self

    @property
    def dim(self) -> int | None:
        if self.mean is not None:
            return len(self.mean)
        return len(self.cov) if self.cov is not None else None


FAMILIES.register("gaussian", GaussianFamilySpec, bilevel=build, fill=fill, paper_optimizer=True)
