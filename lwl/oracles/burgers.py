"""Viscous Burgers' equation u_t + u u_x = nu u_xx on a periodic interval (paper SM Burgers).

The oracle maps initial conditions a = u(., 0) on the uniform grid x_j = j L / n to u(., T) on
the same grid. Pseudo-spectral in space (real FFT, 2/3-rule dealiasing of u u_x = (u^2/2)_x)
and ETDRK4 in time (Cox & Matthews 2002 with the contour-integral coefficients of Kassam &
Trefethen 2005), so the stiff viscous part exp(-nu k^2 t) is integrated exactly and the time
step is limited only by the advective CFL number. Rows of a batch are solved together.

``modes``: solve on the lowest ``modes`` Fourier modes only and pad the result back to n
points. With nu = 0.1 the solution's spectrum decays far below round-off within a few hundred
modes, so this is exact to double precision and makes the paper's n = 8192 cheap; tests check
it against the full-grid solve.
"""

from __future__ import annotations

import math

import numpy as np

from lwl.oracles.base import Oracle, as_numpy, register_oracle


def etdrk4_coefficients(lin: np.ndarray, h: float, contour_points: int = 32):
    """E, E/2, Q, f1, f2, f3 for the diagonal linear operator ``lin`` and step ``h``."""
    r = np.exp(1j * np.pi * (np.arange(1, contour_points + 1) - 0.5) / contour_points)
    LR = h * lin[:, None] + r[None, :]
    Q = h * np.real(np.mean((np.exp(LR / 2) - 1) / LR, axis=1))
    f1 = h * np.real(np.mean((-4 - LR + np.exp(LR) * (4 - 3 * LR + LR**2)) / LR**3, axis=1))
    f2 = h * np.real(np.mean((2 + LR + np.exp(LR) * (-2 + LR)) / LR**3, axis=1))
    f3 = h * np.real(np.mean((-4 - 3 * LR - LR**2 + np.exp(LR) * (4 - LR)) / LR**3, axis=1))
    return np.exp(h * lin), np.exp(h * lin / 2), Q, f1, f2, f3


def solve_burgers(u0: np.ndarray, *, viscosity: float, length: float, time: float,
                  modes: int | None = None, cfl: float = 0.4, steps: int | None = None) -> np.ndarray:
    """u(., time) for each row of ``u0`` (shape (batch, n), uniform periodic grid)."""
    u0 = np.atleast_2d(np.asarray(u0, dtype=np.float64))
    n = u0.shape[1]
    full = np.fft.rfft(u0, axis=1)
    m = n if modes is None else min(2 * modes, n)  # solve grid
    v = full[:, : m // 2 + 1].copy() * (m / n)
    if m < n and m % 2 == 0:
        v[:, -1] = v[:, -1].real  # the solve grid's Nyquist mode is real
    k = 2 * np.pi / length * np.arange(m // 2 + 1)
    dealias = np.arange(m // 2 + 1) < (m // 3)
    if steps is None:
        amp = max(float(np.max(np.abs(u0))), 1e-12)  # max |u| never grows (maximum principle)
        steps = max(1, math.ceil(time / (cfl * (length / m) / amp)))
    h = time / steps
    E, E2, Q, f1, f2, f3 = etdrk4_coefficients(-viscosity * k**2, h)
    g = -0.5j * k * dealias

    def nonlinear(w):
        return g * np.fft.rfft(np.fft.irfft(w, n=m, axis=1) ** 2, axis=1)

    for _ in range(steps):
        Nv = nonlinear(v)
        a = E2 * v + Q * Nv
        Na = nonlinear(a)
        b = E2 * v + Q * Na
        Nb = nonlinear(b)
        c = E2 * a + Q * (2 * Nb - Nv)
        Nc = nonlinear(c)
        v = E * v + Nv * f1 + 2 * (Na + Nb) * f2 + Nc * f3
    out = np.zeros((u0.shape[0], n // 2 + 1), dtype=complex)
    out[:, : m // 2 + 1] = v * (n / m)
    return np.fft.irfft(out, n=n, axis=1)


@register_oracle("burgers")
class Burgers(Oracle):
    """a = u(., 0) on n grid points -> u(., time); params viscosity (0.1), length (2 pi),
    time (1.0), modes (solve on this many Fourier modes; None = the full grid), cfl (0.4)."""

    min_dim = 4

    def __init__(self, viscosity: float = 0.1, length: float = 2 * math.pi, time: float = 1.0,
                 modes: int | None = None, cfl: float = 0.4):
        super().__init__(None)
        if not (viscosity > 0 and length > 0 and time > 0 and 0 < cfl <= 1):
            raise ValueError("oracle.params: viscosity, length, time must be > 0 and 0 < cfl <= 1")
        self.viscosity, self.length, self.time, self.modes, self.cfl = viscosity, length, time, modes, cfl

    @property
    def output_shape(self):  # same grid as the input
        return ()

    def output_grid(self, input_dim: int):
        return (self.length * np.arange(input_dim) / input_dim)[:, None], np.full(input_dim, self.length / input_dim)

    def _label(self, inputs):
        x = as_numpy(inputs)
        return solve_burgers(x, viscosity=self.viscosity, length=self.length, time=self.time,
                             modes=self.modes, cfl=self.cfl)
