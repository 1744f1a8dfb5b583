"""Gaussian measures on grid functions given by a Karhunen-Loeve expansion (KLE) with a
Matern-like spectrum, and their log-normal push-forward (paper SM NtD, Darcy, Burgers).

u = m + sum_j sqrt(lambda_j) xi_j phi_j,  xi_j ~ N(0, 1) i.i.d.,  with L^2-orthonormal phi_j:

- ``sine1d``:   phi_j = sqrt(2) sin(j pi x) on [0, 1], lambda_j = sigma^2 (pi^2 j^2 + tau^2)^(-alpha);
- ``sine2d``:   phi_jk = 2 sin(j pi x) sin(k pi y) on (0, 1)^2, lambda_jk = sigma^2 (pi^2 (j^2+k^2) + tau^2)^(-alpha);
- ``fourier``:  phi = sin(j x)/sqrt(pi), cos(j x)/sqrt(pi) on [0, 2 pi), lambda_j = sigma^2 (j^2 + tau^2)^(-alpha)
  (the paper's Burgers inputs; the interval length is 2 pi).

The mean is m(x) = ``shift`` + ``amplitude`` sin(``omega`` (x - 1/2)) (the NtD family's
10 sin(omega (t - 1/2)) with amplitude 10; 0 by default). Grid values are point evaluations
on ``grid`` points: x_i = i / (grid + 1) (interior) for the sine bases, x_i = 2 pi i / grid
for the Fourier basis. Two KLEs on the same basis have the closed forms

    W2^2 = ||m - m'||^2_{L^2} + sum_j (sqrt(lambda_j) - sqrt(lambda'_j))^2,
    second moment = ||m||^2_{L^2} + sum_j lambda_j,

O(modes), no dense covariance (:func:`kle_w2_squared`, :meth:`KLEGaussian.second_moment`);
the L^2 norm of the mean difference uses the grid's quadrature.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from lwl.grids import trapezoid_weights, trapezoid_weights_1d
from lwl.measures.base import Measure, SeedLike, as_generator, register_family
from lwl.params import StrictModel

BASES = ("sine1d", "sine2d", "fourier")


def _grid_points(basis: str, grid: int, endpoints: bool = False) -> np.ndarray:
    if basis == "fourier":
        return 2 * np.pi * np.arange(grid) / grid
    if endpoints:  # nodes 0, 1/(grid-1), ..., 1 (the Darcy solver's grid, boundary included)
        return np.arange(grid) / (grid - 1)
    return np.arange(1, grid + 1) / (grid + 1)


@register_family("kle")
class KLEGaussian(Measure):
    """Gaussian KLE measure on grid functions (see the module docstring)."""

    def __init__(self, basis: str = "sine1d", grid: int = 64, modes: int | None = None, alpha: float = 2.0,
                 tau: float = 3.0, sigma: float = 1.0, shift: float = 0.0, amplitude: float = 0.0,
                 omega: float = 0.0, endpoints: bool = False):
        if basis not in BASES:
            raise ValueError(f"basis: one of {BASES}, got {basis!r}")
        if grid < 2:
            raise ValueError("grid: at least 2 points")
        if not (tau >= 0 and sigma >= 0 and alpha > 0):
            raise ValueError("alpha must be > 0, tau and sigma >= 0")
        if endpoints and basis == "fourier":
            raise ValueError("endpoints: only the sine bases have a closed grid")
        self.basis, self.grid, self.endpoints = basis, int(grid), bool(endpoints)
        # Fourier: frequencies below Nyquist, where the grid values of sin and cos stay orthonormal;
        # a closed sine grid of G nodes carries G - 2 discretely orthonormal sines
        default = grid // 2 - 1 if basis == "fourier" else (grid - 2 if endpoints else grid)
        self.modes = int(modes or default)
        self.alpha, self.tau, self.sigma = float(alpha), float(tau), float(sigma)
        self.shift, self.amplitude, self.omega = float(shift), float(amplitude), float(omega)
        self._x = _grid_points(basis, self.grid, self.endpoints)

    # -- spectrum and basis -----------------------------------------------------------------
    def eigenvalues(self) -> np.ndarray:
        j = np.arange(1, self.modes + 1, dtype=np.float64)
        if self.basis == "sine1d":
            return self.sigma**2 * (np.pi**2 * j**2 + self.tau**2) ** (-self.alpha)
        if self.basis == "sine2d":
            jj = j[:, None] ** 2 + j[None, :] ** 2
            return (self.sigma**2 * (np.pi**2 * jj + self.tau**2) ** (-self.alpha)).ravel()
        lam = self.sigma**2 * (j**2 + self.tau**2) ** (-self.alpha)
        return np.repeat(lam, 2)  # sine and cosine of each frequency

    def _sine_table(self) -> np.ndarray:
        j = np.arange(1, self.modes + 1)
        return np.sqrt(2) * np.sin(np.pi * np.outer(j, self._x))

    def _eigenfunctions(self) -> np.ndarray:
        """(n_eigen, n_points) grid values of the L^2-orthonormal eigenfunctions."""
        j = np.arange(1, self.modes + 1)
        x = self._x
        if self.basis == "sine1d":
            return np.sqrt(2) * np.sin(np.pi * np.outer(j, x))
        if self.basis == "sine2d":
            s = np.sqrt(2) * np.sin(np.pi * np.outer(j, x))  # (modes, grid)
            return np.einsum("ja,kb->jkab", s, s).reshape(self.modes**2, self.grid**2)
        out = np.empty((2 * self.modes, self.grid))
        out[0::2] = np.sin(np.outer(j, x)) / np.sqrt(np.pi)
        out[1::2] = np.cos(np.outer(j, x)) / np.sqrt(np.pi)
        return out

    def mean_function(self) -> np.ndarray:
        if self.basis == "sine2d":
            X, Y = np.meshgrid(self._x, self._x, indexing="ij")
            base = np.sin(self.omega * (X - 0.5)) * np.sin(self.omega * (Y - 0.5))
        else:
            base = np.sin(self.omega * (self._x - 0.5))
        return (self.shift + self.amplitude * base).ravel()

    @property
    def dim(self) -> int:
        return self.grid**2 if self.basis == "sine2d" else self.grid

    def quadrature_weight(self) -> float:
        """Grid spacing weight w with ||f||^2_{L^2} ~ w sum_i f(x_i)^2 for functions vanishing at
        the ends (exact for the eigenfunctions); :meth:`quadrature_weights` adds the trapezoid
        end weights of a closed grid."""
        if self.basis == "fourier":
            return 2 * np.pi / self.grid
        h = 1.0 / (self.grid - 1 if self.endpoints else self.grid + 1)
        return h * h if self.basis == "sine2d" else h

    def nodes(self) -> np.ndarray:
        """(dim, 1) or, for sine2d, (dim, 2): the coordinates of the field's values, in the order
        a sample flattens them (``indexing="ij"``), beside :meth:`quadrature_weights`."""
        if self.basis != "sine2d":
            return self._x[:, None].copy()
        X, Y = np.meshgrid(self._x, self._x, indexing="ij")
        return np.stack([X.ravel(), Y.ravel()], 1)

    def quadrature_weights(self) -> np.ndarray:
        """Per-point weights w_i with ||f||^2_{L^2} ~ sum_i w_i f(x_i)^2 (trapezoid on closed grids,
        so a constant c has norm c^2 exactly)."""
        if self.basis == "fourier" or not self.endpoints:
            return np.full(self.dim, self.quadrature_weight())
        return trapezoid_weights(self.grid) if self.basis == "sine2d" else trapezoid_weights_1d(self.grid)

    # -- measure interface --------------------------------------------------------------------
    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        coef = as_generator(seed).standard_normal((n, self.eigenvalues().size)) * np.sqrt(self.eigenvalues())
        if self.basis == "fourier":
            # sum_j (c_sj sin(j x) + c_cj cos(j x)) / sqrt(pi) by one inverse real FFT: O(grid log grid)
            # per sample, where the dense eigenfunction matrix would take O(grid^2) memory
            spec = np.zeros((n, self.grid // 2 + 1), dtype=complex)
            spec[:, 1:self.modes + 1] = (self.grid / 2 / np.sqrt(np.pi)) * (coef[:, 1::2] - 1j * coef[:, 0::2])
            x = np.fft.irfft(spec, n=self.grid, axis=1)
        elif self.basis == "sine2d":
            # separable: u = S^T C S with the (modes, grid) sine table S, O(grid^3) per sample where
            # the dense (modes^2, grid^2) eigenfunction matrix would be 128 MB at 64^2
            s = self._sine_table()
            c = coef.reshape(n, self.modes, self.modes)
            x = np.einsum("ja,njk,kb->nab", s, c, s, optimize=True).reshape(n, self.dim)
        else:
            x = coef @ self._eigenfunctions()
        x += self.mean_function()
        return x

    def second_moment(self) -> float:
        """E||u||^2_{L^2} = ||m||^2 + sum_j lambda_j."""
        m = self.mean_function()
        return float(self.quadrature_weights() @ (m * m) + self.eigenvalues().sum())

    def _spec_fields(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("basis", "grid", "modes", "alpha", "tau", "sigma", "shift",
                                               "amplitude", "omega", "endpoints")}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "KLEGaussian":
        fields = {k: doc[k] for k in ("basis", "grid", "modes", "alpha", "tau", "sigma", "shift", "amplitude",
                                      "omega", "endpoints") if k in doc}
        return cls(**fields)


def kle_w2_squared(a: KLEGaussian, b: KLEGaussian) -> float:
    """Closed-form W2^2 in L^2 between two KLE Gaussians on the same basis and grid."""
    if (a.basis, a.grid, a.modes, a.endpoints) != (b.basis, b.grid, b.modes, b.endpoints):
        raise ValueError("kle_w2_squared: the measures must share basis, grid, modes and endpoints")
    dm = a.mean_function() - b.mean_function()
    dl = np.sqrt(a.eigenvalues()) - np.sqrt(b.eigenvalues())
    return float(a.quadrature_weights() @ (dm * dm) + dl @ dl)


@register_family("lognormal")
class LogNormal(Measure):
    """The push-forward exp(u) of a Gaussian measure (e.g. Darcy conductivities)."""

    def __init__(self, base: Measure):
        self.base = base

    @property
    def dim(self) -> int:
        return self.base.dim

    @property
    def grid(self) -> int:
        """The base's grid (a field measure's; AttributeError where the base has none)."""
        return self.base.grid

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        return np.exp(self.base.sample(n, seed))

    def _spec_fields(self) -> dict[str, Any]:
        return {"base": self.base.to_spec()}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "LogNormal":
        from lwl.measures.base import from_spec

        return cls(from_spec(doc["base"]))


def darcy_test_member(rng: np.random.Generator, grid: int, endpoints: bool = False, rho=None) -> KLEGaussian:
    """One Darcy test member: m ~ rho([0,1]), alpha ~ rho([2,3]), tau ~ rho([1,4]),
    sigma = tau^(alpha - 1), rho the paper's law p ~ 1 - cos x on the interval (paper SM Darcy,
    :mod:`lwl.measures.cosine_law`; ``rho`` another law's draw function)."""
    from lwl.measures.cosine_law import draw_paper

    rho = rho or draw_paper
    alpha, tau = rho(rng, 2, 3), rho(rng, 1, 4)
    return KLEGaussian("sine2d", grid, modes=None, alpha=alpha, tau=tau, sigma=tau ** (alpha - 1),
                       shift=rho(rng, 0, 1), endpoints=endpoints)


# -- the job spec's block of a KLE Gaussian (test members, the kle family) ----------------------


class KLEParameters(StrictModel):
    """A Matern-like KLE Gaussian on grid functions (:class:`lwl.measures.KLEGaussian`):
    sqrt(lambda_j) = sigma (c j^2 + tau^2)^(-alpha/2) on the sine basis of [0, 1] (``sine1d``),
    of (0, 1)^2 (``sine2d``) or the Fourier basis of [0, 2 pi) (``fourier``); mean
    shift + amplitude sin(omega (x - 1/2)); ``endpoints`` puts the sine grid's nodes on the
    boundary (Darcy)."""

    basis: Literal["sine1d", "sine2d", "fourier"] = "sine1d"
    grid: int = Field(ge=2, le=16384)
    modes: int | None = Field(default=None, ge=1)
    alpha: float = Field(default=2.0, gt=0)
    tau: float = Field(default=3.0, ge=0)
    sigma: float = Field(default=1.0, ge=0)
    shift: float = 0.0
    amplitude: float = 0.0
    omega: float = 0.0
    endpoints: bool = False

    def measure(self):
        from lwl.measures import KLEGaussian

        try:
            return KLEGaussian(**self.model_dump(include=set(KLEParameters.model_fields)))
        except ValueError as exc:
            raise ValueError(str(exc)) from None

    @property
    def dim(self) -> int:
        return self.grid**2 if self.basis == "sine2d" else self.grid
