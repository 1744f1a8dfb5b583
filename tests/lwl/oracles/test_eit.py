"""The EIT forward solver against independent references: harmonic data on a constant
conductivity (exact normal derivatives), a manufactured solution with a variable conductivity
(second order under refinement), and the symmetry of the DtN map."""

import numpy as np
import pytest
import torch

from lwl.oracles import make_oracle
from lwl.oracles.eit import (
    MAX_TERMS, DirichletSolver, angles, conductivity, dirichlet_data, draw_coefficients, neumann_data, nodes,
)
from lwl.oracles.ntd import boundary_points


def _normal_derivative(P, grad):
    """du/dn at boundary points; at a corner the mean over its two sides."""
    g = np.zeros(len(P))
    for k, (x, y) in enumerate(P):
        normals = [n for n, on in (((-1, 0), x == 0), ((1, 0), x == 1), ((0, -1), y == 0), ((0, 1), y == 1)) if on]
        gx, gy = grad(x, y)
        g[k] = np.mean([nx * gx + ny * gy for nx, ny in normals])
    return g


def _harmonic_error(M, u, grad):
    P = boundary_points(M)
    _, g = DirichletSolver(np.ones((M, M))).solve(u(P[:, 0], P[:, 1]))
    exact = _normal_derivative(P, grad)
    return np.abs(g - exact).max() / np.abs(exact).max()


def test_quadratic_harmonic_data_give_exact_neumann_data():
    for u, grad in ((lambda x, y: x**2 - y**2, lambda x, y: (2 * x, -2 * y)),
                    (lambda x, y: x * y + 3 * x - y, lambda x, y: (y + 3, x - 1))):
        assert _harmonic_error(17, u, grad) < 1e-11


def test_smooth_harmonic_data_converge_at_second_order():
    u = lambda x, y: np.exp(2 * x) * np.cos(2 * y)  # noqa: E731
    grad = lambda x, y: (2 * u(x, y), -2 * np.exp(2 * x) * np.sin(2 * y))  # noqa: E731
    errs = [_harmonic_error(M, u, grad) for M in (17, 33, 65)]
    rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(rates > 1.8) and errs[-1] < 2e-3, (errs, rates)


def _manufactured(M):
    """u = sin(2x) e^y + x y^2 with a = exp(0.5 sin(pi x) cos(2 y) + 0.3 x): s = div(a grad u) by autograd."""
    x = torch.tensor(nodes(M), dtype=torch.float64)
    X, Y = torch.meshgrid(x, x, indexing="ij")
    X, Y = X.clone().requires_grad_(True), Y.clone().requires_grad_(True)
    u = torch.sin(2 * X) * torch.exp(Y) + X * Y**2
    a = torch.exp(0.5 * torch.sin(torch.pi * X) * torch.cos(2 * Y) + 0.3 * X)
    ux, uy = torch.autograd.grad(u.sum(), (X, Y), create_graph=True)
    fx = torch.autograd.grad((a * ux).sum(), X, retain_graph=True)[0]
    fy = torch.autograd.grad((a * uy).sum(), Y, retain_graph=True)[0]
    s = (fx + fy).detach().numpy()
    P = boundary_points(M)
    idx = np.rint(P * (M - 1)).astype(int)
    flux = []
    for (i, j), (px, py) in zip(idx, P):
        normals = [n for n, on in (((-1, 0), px == 0), ((1, 0), px == 1), ((0, -1), py == 0), ((0, 1), py == 1)) if on]
        flux.append(np.mean([nx * (a * ux)[i, j].item() + ny * (a * uy)[i, j].item() for nx, ny in normals]))
    return a.detach().numpy(), u.detach().numpy(), s, np.array(flux), idx


def test_manufactured_solution_with_variable_conductivity_converges_at_second_order():
    u_err, g_err = [], []
    for M in (17, 33, 65):
        a, u, s, flux, idx = _manufactured(M)
        uh, gh = DirichletSolver(a).solve(u[idx[:, 0], idx[:, 1]], source=s)
        u_err.append(np.abs(uh - u).max() / np.abs(u).max())
        g_err.append(np.abs(gh - flux).max() / np.abs(flux).max())
    for errs in (u_err, g_err):
        rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
        assert np.all(rates > 1.8), (u_err, g_err)
    assert u_err[-1] < 1e-4 and g_err[-1] < 5e-3, (u_err, g_err)


def test_dtn_map_is_symmetric_with_constants_in_its_kernel():
    M = 25
    c = draw_coefficients(1, np.random.default_rng(3))[0]
    D = DirichletSolver(conductivity(c, M)).dtn()
    assert np.abs(D - D.T).max() < 1e-9 * np.abs(D).max()  # reciprocity
    assert np.abs(D.sum(1)).max() < 1e-9 * np.abs(D).max()  # constants carry no current
    eig = np.linalg.eigvalsh(0.5 * (D + D.T))
    assert eig[0] > -1e-9 * eig[-1] and eig[1] > 0  # positive semi-definite, one-dimensional kernel


def test_prior_matches_the_paper():
    c = draw_coefficients(20_000, np.random.default_rng(0))
    m = (c != 0).sum(1)
    assert set(np.unique(m)) == {1, 2, 3, 4}
    np.testing.assert_allclose(np.bincount(m)[1:] / len(m), 0.25, atol=0.015)  # floor(U[1,5]): 1..4 equally
    assert np.abs(c).max() <= 1.0
    a = conductivity(c[:3], 9)
    np.testing.assert_allclose(a[:, 0, :], 1.0)  # a = 1 on the boundary
    np.testing.assert_allclose(a[:, :, -1], 1.0, atol=1e-12)


def test_oracle_rows_match_the_solver_and_refuse_bad_input():
    M, L = 13, 6
    rng = np.random.default_rng(1)
    c = draw_coefficients(2, rng)
    omega = rng.uniform(np.pi / 2, 7 * np.pi, (2, L))
    theta = np.broadcast_to(angles(L), (2, L))
    rows = np.concatenate([omega.reshape(-1, 1), theta.reshape(-1, 1), np.repeat(c, L, axis=0)], 1)
    oracle = make_oracle({"name": "eit", "params": {"grid": M}})
    got = oracle.label(rows[::-1])[::-1]  # order of rows does not matter
    np.testing.assert_allclose(got.reshape(2, L, -1), neumann_data(c, omega, theta, M), rtol=1e-12, atol=1e-12)
    f = dirichlet_data(omega[0, 0], theta[0, 0], M)
    assert f.shape == (4 * M - 4,) and np.abs(f).max() <= 1
    with pytest.raises(ValueError, match="dimension"):
        oracle.label(np.zeros((1, 2 + MAX_TERMS + 1)))
    with pytest.raises(ValueError, match="oracle.params.grid"):
        make_oracle({"name": "eit", "params": {"grid": 2}})
