"""The Burgers solver against third-party data and under refinement."""

import numpy as np
import pytest

from lwl.measures import KLEGaussian
from lwl.oracles import make_oracle
from lwl.oracles.burgers import solve_burgers
from tests.conftest import ROOT

DATA = ROOT.parent / "shared" / "data" / "burgers_raissi_deepxde.npz"


def fourier_eval(u: np.ndarray, x: np.ndarray, x0: float, period: float) -> np.ndarray:
    """The trigonometric interpolant of grid values u (grid x0 + j period / n) at points x."""
    n = len(u)
    c = np.fft.rfft(u) / n
    w = np.full(n // 2 + 1, 2.0)
    w[0] = w[-1] = 1.0
    k = np.arange(n // 2 + 1)
    return np.real((w * c)[None] * np.exp(2j * np.pi * k[None] * (x[:, None] - x0) / period)).sum(1)


@pytest.mark.skipif(not DATA.exists(), reason="shared reference data not present")
def test_matches_the_raissi_deepxde_reference_solution():
    # u_t + u u_x = (0.01/pi) u_xx, u(x,0) = -sin(pi x): odd, so the periodic problem of period 2
    d = np.load(DATA)
    x, t, usol = d["x"][:, 0], d["t"][:, 0], d["usol"]
    n = 2048
    u0 = -np.sin(np.pi * (-1 + 2 * np.arange(n) / n))
    for j in (25, 50, 99):  # before, at and after the steep front forms
        u = solve_burgers(u0, viscosity=0.01 / np.pi, length=2.0, time=t[j])[0]
        err = np.linalg.norm(fourier_eval(u, x, -1.0, 2.0) - usol[:, j]) / np.linalg.norm(usol[:, j])
        assert err <= 1e-4, (t[j], err)


def _paper_inputs(n: int, batch: int, seed: int = 0) -> np.ndarray:
    """The paper's training family (alpha, tau, sigma) = (3, 1.4, 5) on n points of [0, 2 pi)."""
    return KLEGaussian("fourier", grid=n, alpha=3.0, tau=1.4, sigma=5.0).sample(batch, seed)


def test_time_step_and_mode_refinement():
    a = _paper_inputs(1024, 3)
    kw = dict(viscosity=0.1, length=2 * np.pi, time=1.0)
    fine = solve_burgers(a, cfl=0.1, **kw)
    coarse = solve_burgers(a, cfl=0.4, **kw)
    assert np.linalg.norm(coarse - fine) / np.linalg.norm(fine) < 1e-9
    # solving on the lowest 256 modes is exact to round-off at nu = 0.1 ...
    trunc = solve_burgers(a, modes=256, cfl=0.4, **kw)
    assert np.linalg.norm(trunc - coarse) / np.linalg.norm(coarse) < 1e-9
    # ... while too few modes is visibly wrong: the comparison can fail
    assert np.linalg.norm(solve_burgers(a, modes=8, **kw) - coarse) / np.linalg.norm(coarse) > 1e-3


def test_conservation_decay_and_oracle_interface():
    a = _paper_inputs(512, 2, seed=1) + 0.7  # non-zero mean
    o = make_oracle({"name": "burgers", "params": {"viscosity": 0.1}})
    u = o.label(a)
    assert u.shape == a.shape
    np.testing.assert_allclose(u.mean(1), a.mean(1), rtol=1e-12)  # the mean is conserved
    assert np.all(np.var(u, 1) < np.var(a, 1))  # viscosity dissipates energy
    # a constant state is a steady solution
    np.testing.assert_allclose(o.label(np.full((1, 64), 2.5)), 2.5, rtol=1e-13)
