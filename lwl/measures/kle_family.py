"""A KLE Gaussian family with named free parameters, differentiable in torch (AMA's nu_theta).

theta collects the free parameters of a :class:`~lwl.measures.KLEGaussian` template (any of
``shift``, ``omega``, ``amplitude``, ``alpha``, ``tau``, ``sigma``); the others stay at the
template's values. Samples are reparametrised, u(theta, xi) = m_theta + sum_j sqrt(lambda_j(theta))
xi_j phi_j with standard normal xi held fixed (the paper's "fixed sets of coefficients" that make
the distribution step deterministic), so the training error term of the AMA bound is a smooth
function of theta. W2^2 to a KLE on the same basis and the second moment are the closed forms
of :mod:`lwl.measures.kle`, written in torch so the bound can be differentiated by autograd.
Sampling at theta with noise drawn from ``seed`` equals ``measure(theta).sample(n, seed)``.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from lwl.measures import KLEGaussian
from lwl.measures.base import SeedLike, as_generator
from lwl.measures.kle import KLEParameters
from lwl.registry import FAMILIES

PARAMETERS = ("shift", "omega", "amplitude", "alpha", "tau", "sigma")
_T = torch.float64


class KLEFamily:
    def __init__(self, template: KLEGaussian, free: list[str], bounds: dict[str, tuple[float, float]] | None = None):
        unknown = [p for p in free if p not in PARAMETERS]
        if unknown or not free:
            raise ValueError(f"free: choose one or more of {PARAMETERS}, got {free}")
        self.template, self.free = template, list(free)
        self.bounds = {p: tuple(map(float, (bounds or {}).get(p, (-np.inf, np.inf)))) for p in self.free}
        t = template
        self._x = torch.as_tensor(t._x, dtype=_T)
        self._w = torch.as_tensor(t.quadrature_weights(), dtype=_T)
        j = torch.arange(1, t.modes + 1, dtype=_T)
        self._j2 = (j[:, None] ** 2 + j[None, :] ** 2).reshape(-1) if t.basis == "sine2d" else j ** 2
        if t.basis != "fourier":
            self._sines = math.sqrt(2) * torch.sin(math.pi * torch.outer(j, self._x))  # (modes, grid)

    # -- parameters --------------------------------------------------------------------------
    def theta0(self) -> np.ndarray:
        return np.array([getattr(self.template, p) for p in self.free], dtype=np.float64)

    def clip(self, theta: np.ndarray) -> np.ndarray:
        lo, hi = zip(*(self.bounds[p] for p in self.free))
        return np.clip(np.asarray(theta, dtype=np.float64), lo, hi)

    def values(self, theta) -> dict:
        """All six parameters at theta: tensors for the free ones, floats for the rest."""
        out = {p: getattr(self.template, p) for p in PARAMETERS}
        out.update({p: theta[i] for i, p in enumerate(self.free)})
        return out

    def measure(self, theta) -> KLEGaussian:
        t = self.template
        v = {p: float(x) for p, x in self.values(np.asarray(theta, dtype=np.float64)).items()}
        return KLEGaussian(t.basis, t.grid, t.modes, endpoints=t.endpoints, **v)

    # -- closed forms in torch ---------------------------------------------------------------
    def sqrt_eigenvalues(self, theta: torch.Tensor) -> torch.Tensor:
        v = self.values(theta)
        scale = 1.0 if self.template.basis == "fourier" else math.pi ** 2
        s = v["sigma"] * (scale * self._j2 + v["tau"] ** 2) ** (-v["alpha"] / 2)
        return s.repeat_interleave(2) if self.template.basis == "fourier" else s

    def mean_function(self, theta: torch.Tensor) -> torch.Tensor:
        v = self.values(theta)
        if self.template.basis == "sine2d":
            s = torch.sin(v["omega"] * (self._x - 0.5))
            base = torch.outer(s, s).reshape(-1)
        else:
            base = torch.sin(v["omega"] * (self._x - 0.5))
        return v["shift"] + v["amplitude"] * base

    def second_moment(self, theta: torch.Tensor) -> torch.Tensor:
        m = self.mean_function(theta)
        return self._w @ (m * m) + self.sqrt_eigenvalues(theta).square().sum()

    def w2_squared(self, theta: torch.Tensor, other: KLEGaussian) -> torch.Tensor:
        """W2^2(nu_theta, other) = ||m - m'||^2 + sum_j (sqrt(lambda_j) - sqrt(lambda'_j))^2."""
        t = self.template
        if (other.basis, other.grid, other.modes, other.endpoints) != (t.basis, t.grid, t.modes, t.endpoints):
            raise ValueError("test distributions: KLE members must share the family's basis, grid, modes, endpoints")
        dm = self.mean_function(theta) - torch.as_tensor(other.mean_function(), dtype=_T)
        dl = self.sqrt_eigenvalues(theta) - torch.as_tensor(np.sqrt(other.eigenvalues()), dtype=_T)
        return self._w @ (dm * dm) + dl @ dl

    # -- reparametrised samples ----------------------------------------------------------------
    def noise(self, n: int, seed: SeedLike) -> np.ndarray:
        """The standard normal coefficients KLEGaussian.sample draws for (n, seed)."""
        return as_generator(seed).standard_normal((n, self.template.eigenvalues().size))

    def sample(self, theta: torch.Tensor, xi) -> torch.Tensor:
        """u(theta, xi), (n, dim): differentiable in theta."""
        t = self.template
        coef = torch.as_tensor(xi, dtype=_T) * self.sqrt_eigenvalues(theta)
        n = coef.shape[0]
        if t.basis == "fourier":
            spec = torch.zeros((n, t.grid // 2 + 1), dtype=torch.complex128)
            spec[:, 1:t.modes + 1] = (t.grid / 2 / math.sqrt(math.pi)) * torch.complex(coef[:, 1::2], -coef[:, 0::2])
            x = torch.fft.irfft(spec, n=t.grid, dim=1)
        elif t.basis == "sine2d":
            c = coef.reshape(n, t.modes, t.modes)
            x = torch.einsum("ja,njk,kb->nab", self._sines, c, self._sines).reshape(n, -1)
        else:
            x = coef @ self._sines
        return x + self.mean_function(theta)


# -- the job spec's block for this component, and its registration (lwl.registry) --


class KLEFamilySpec(KLEParameters):
    """nu_theta = a KLE Gaussian (AMA); ``free`` names the parameters that move, ``bounds``
    their box (required by differential evolution)."""
    name: Literal["kle"] = "kle"
    dim_field: ClassVar[str] = "grid"
    free: list[Literal["shift", "omega", "amplitude", "alpha", "tau", "sigma"]] = Field(min_length=1)
    bounds: dict[str, Annotated[list[float], Field(min_length=2, max_length=2)]] = Field(
        default_factory=dict, description="[lower, upper] per free parameter")

    @model_validator(mode="after")
    def _bounds(self):
        for p, (lo, hi) in self.bounds.items():
            if p not in self.free:
                raise ValueError(f"bounds.{p}: not a free parameter")
            if not lo < hi:
                raise ValueError(f"bounds.{p}: lower bound must be below the upper bound")
            if not lo <= getattr(self, p) <= hi:
                raise ValueError(f"bounds.{p}: the initial value {getattr(self, p)} lies outside [{lo}, {hi}]")
        self.measure()
        return self

    def kle_parameters(self) -> KLEParameters:
        return KLEParameters(**self.model_dump(exclude={"name", "free", "bounds"}))


FAMILIES.register("kle", KLEFamilySpec, moved_by="ama")
