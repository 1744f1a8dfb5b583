"""The radiative transport solver: adjoint gradient, free streaming, particle balance."""

import numpy as np
import pytest

from lwl.oracles import make_oracle
from lwl.oracles.rte import RTESolver


@pytest.mark.parametrize("method", ["schur", "direct"])
def test_adjoint_gradient_matches_finite_differences(method):
    G, D, eps = 9, 8, 0.5
    rng = np.random.default_rng(0)
    a = np.exp(0.3 * rng.standard_normal((G, G)))
    w = rng.standard_normal(G * G)
    grad = RTESolver(a, eps, D, method).gradient(w)

    def loss(x):
        return w @ RTESolver(x.reshape(G, G), eps, D, method).density()

    h = 1e-6
    for k in (0, 10, 40, 80):
        e = np.zeros(G * G)
        e[k] = h
        fd = (loss(a.ravel() + e) - loss(a.ravel() - e)) / (2 * h)
        assert grad[k] == pytest.approx(fd, rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("eps", [1 / 8, 2.0, 8.0])
def test_schur_gmres_equals_the_direct_factorisation(eps):
    G = 21
    a = np.exp(0.5 * np.random.default_rng(2).standard_normal((G, G)))
    fast, ref = RTESolver(a, eps, 12, "schur"), RTESolver(a, eps, 12, "direct")
    np.testing.assert_allclose(fast.density(), ref.density(), rtol=1e-9, atol=1e-12)
    w = np.random.default_rng(3).standard_normal(G * G)
    np.testing.assert_allclose(fast.gradient(w), ref.gradient(w), rtol=1e-7, atol=1e-10)


def _free_streaming_density(G, theta):
    """Exact rho for a = 0: each inflow value travels along its ray from x = 0."""
    x = np.linspace(0, 1, G)
    X, Y = np.meshgrid(x, x, indexing="ij")
    rho = np.zeros_like(X)
    for t in theta:
        c, s = np.cos(t), np.sin(t)
        if c > 0:
            y0 = Y - X * s / c
            rho += np.where((y0 >= 0) & (y0 <= 1), (1 + 0.5 * np.sin(np.pi * y0)) * c, 0.0) * (2 * np.pi / len(theta))
    return rho


def test_free_streaming_converges_to_the_ray_solution():
    errors = []
    for G in (21, 41, 81):
        s = RTESolver(np.zeros((G, G)), 1.0, 12)
        errors.append(np.abs(s.density().reshape(G, G) - _free_streaming_density(G, s.theta)).mean())
    # first-order upwinding of data with jumps (rays leaving through y = 0, 1): slow but steady
    assert errors[0] > errors[1] > errors[2], errors


def _net_boundary_flux(s):
    """sum over the boundary of int (v . n) u: zero for pure scattering (no absorption)."""
    G, D = s.G, s.D
    U = s.u_[: D * G * G].reshape(D, G, G)
    w = 2 * np.pi / D
    h = 1.0 / (G - 1)
    quad = np.full(G, h)
    quad[[0, -1]] = h / 2  # trapezoid along each side
    flux = 0.0
    for m, t in enumerate(s.theta):
        c, sn = np.cos(t), np.sin(t)
        flux += w * (c * (U[m, -1, :] - U[m, 0, :]) @ quad + sn * (U[m, :, -1] - U[m, :, 0]) @ quad)
    inflow = w * sum(max(np.cos(t), 0) for t in s.theta) * (quad @ (1 + 0.5 * np.sin(np.pi * np.linspace(0, 1, G))))
    return flux, inflow


def test_scattering_conserves_particles_under_refinement():
    rel = []
    for G in (17, 33, 65):
        a = np.full((G, G), 2.0)
        flux, inflow = _net_boundary_flux(RTESolver(a, 0.5, 12))
        rel.append(abs(flux) / inflow)
    assert rel[-1] < rel[0] and rel[-1] < 0.1, rel


def test_oracle_interface():
    o = make_oracle({"name": "rte", "params": {"knudsen": 2.0, "grid": 11, "directions": 8}})
    a = np.exp(np.random.default_rng(1).standard_normal((2, 121)) * 0.2)
    rho = o.label(a)
    assert rho.shape == (2, 121) and np.all(rho >= 0)
    with pytest.raises(ValueError, match="non-negative"):
        o.label(-a)


def _laplace_dirichlet(G: int) -> np.ndarray:
    """5-point Laplace solution with u = 1 + 0.5 sin(pi y) on x = 0 and u = 0 on the other sides."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import spsolve

    h, n = 1.0 / (G - 1), G - 2
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n)) / h**2
    A = (sp.kron(T, sp.identity(n)) + sp.kron(sp.identity(n), T)).tocsc()
    g = 1 + 0.5 * np.sin(np.pi * np.linspace(0, 1, G))
    b = np.zeros((n, n))
    b[0, :] = g[1:-1] / h**2
    u = np.zeros((G, G))
    u[0, :] = g
    u[1:-1, 1:-1] = spsolve(A, b.ravel()).reshape(n, n)
    return u


def test_diffusion_limit_as_the_knudsen_number_vanishes():
    """eps -> 0 with a = 1: u -> <u> with div(grad rho) = 0 (the O(eps^2) solvability condition);
    the inflow enters through a boundary layer, so rho ~ C * (Laplace solution with the inflow
    profile on x = 0) in the interior, C the Milne extrapolation constant. The grid keeps h = eps/6
    (first-order upwind is not asymptotic preserving: its numerical diffusion is O(h/eps))."""
    errors, constants = [], []
    for eps in (1 / 2, 1 / 4, 1 / 8, 1 / 16):
        G = int(round(6 / eps)) + 1
        rho = RTESolver(np.ones((G, G)), eps, 12).density().reshape(G, G)
        ref = _laplace_dirichlet(G)
        x = np.linspace(0, 1, G)
        X, Y = np.meshgrid(x, x, indexing="ij")
        inner = (X > 0.25) & (X < 0.75) & (Y > 0.25) & (Y < 0.75)
        C = rho[inner] @ ref[inner] / (ref[inner] @ ref[inner])
        constants.append(C)
        errors.append(np.linalg.norm(rho[inner] - C * ref[inner]) / np.linalg.norm(C * ref[inner]))
    assert all(b < 0.8 * a for a, b in zip(errors, errors[1:])), errors  # first order in eps
    assert errors[-1] < 0.05
    assert max(constants) / min(constants) < 1.05  # one Milne constant, independent of eps
