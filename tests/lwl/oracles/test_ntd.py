"""The NtD map against harmonic functions (constant conductivity) and reciprocity."""

import numpy as np
import pytest

from lwl.oracles import make_oracle
from lwl.oracles.ntd import boundary_points, dtn_matrix, ntd_from_dtn, paper_log_conductivity


def _neumann(M, grad):
    """Normal derivative of a function with gradient ``grad`` at the boundary nodes; at a
    corner the average over its two sides (the node's dual boundary segments)."""
    P = boundary_points(M)
    g = np.zeros(len(P))
    for k, (x, y) in enumerate(P):
        normals = [n for n, on in (((-1, 0), x == 0), ((1, 0), x == 1), ((0, -1), y == 0), ((0, 1), y == 1)) if on]
        gx, gy = grad(x, y)
        g[k] = np.mean([nx * gx + ny * gy for nx, ny in normals])
    return P, g


HARMONIC = [
    (lambda x, y: x**2 - y**2, lambda x, y: (2 * x, -2 * y)),
    (lambda x, y: x * y, lambda x, y: (y, x)),
]


def _trace_error(M, u, grad):
    P, g = _neumann(M, grad)
    f = make_oracle({"name": "ntd", "params": {"grid": M, "conductivity": 1.0}}).label(g[None])[0]
    exact = u(P[:, 0], P[:, 1])
    exact = exact - exact.mean()
    return np.abs(f - exact).max() / np.abs(exact).max()


@pytest.mark.parametrize("u,grad", HARMONIC)
def test_quadratic_harmonic_functions_are_reproduced_exactly(u, grad):
    assert _trace_error(33, u, grad) < 1e-12


def test_smooth_harmonic_function_converges_at_second_order():
    u = lambda x, y: np.exp(np.pi * x) * np.sin(np.pi * y)  # noqa: E731
    grad = lambda x, y: (np.pi * u(x, y), np.pi * np.exp(np.pi * x) * np.cos(np.pi * y))  # noqa: E731
    errs = [_trace_error(M, u, grad) for M in (17, 33, 65)]
    rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(rates > 1.8) and errs[-1] < 1e-3, (errs, rates)


def test_reciprocity_and_null_space_for_the_paper_conductivity():
    M = 33
    D = dtn_matrix(np.exp(paper_log_conductivity(M)), symmetrize=False)
    assert np.abs(D - D.T).max() < 1e-10 * np.abs(D).max()  # symmetric DtN (reciprocity)
    assert np.abs(D.sum(1)).max() < 1e-9 * np.abs(D).max()  # constants give no flux
    eig = np.linalg.eigvalsh(0.5 * (D + D.T))
    assert eig[0] > -1e-9 * eig[-1] and eig[1] > 1e-6 * eig[-1]  # PSD with a one-dimensional kernel
    N = ntd_from_dtn(0.5 * (D + D.T))
    g = np.random.default_rng(0).standard_normal(len(D))
    g -= g.mean()
    np.testing.assert_allclose(D @ (N @ g), g, atol=1e-9 * np.abs(g).max())  # NtD inverts DtN


def test_oracle_is_linear_and_ignores_the_mean():
    o = make_oracle({"name": "ntd", "params": {"grid": 17}})
    rng = np.random.default_rng(1)
    g = rng.standard_normal((4, 64))
    np.testing.assert_allclose(o.label(g + 3.0), o.label(g), atol=1e-12)
    np.testing.assert_allclose(o.label(2 * g[:1] - g[1:2]), 2 * o.label(g[:1]) - o.label(g[1:2]), atol=1e-10)
    assert np.abs(o.label(g).mean(1)).max() < 1e-12
    with pytest.raises(ValueError, match="dimension"):
        o.label(np.zeros((1, 10)))
