"""The Darcy solver: manufactured solution (second order) and an independent FEM solve."""

import numpy as np
import pytest

from lwl.oracles import make_oracle
from lwl.oracles.darcy import darcy_matrix, solve_darcy


def _grid(M):
    x = np.linspace(0.0, 1.0, M)
    return np.meshgrid(x, x, indexing="ij")


def test_manufactured_solution_converges_at_second_order():
    sym = pytest.importorskip("sympy")
    xs, ys = sym.symbols("x y")
    log_a = 0.5 * sym.sin(2 * sym.pi * xs) * sym.cos(sym.pi * ys) + xs * ys
    u_exact = sym.sin(sym.pi * xs) * sym.sin(sym.pi * ys) * (1 + xs * ys)
    a = sym.exp(log_a)
    f = -(sym.diff(a * sym.diff(u_exact, xs), xs) + sym.diff(a * sym.diff(u_exact, ys), ys))
    errors = []
    for M in (17, 33, 65):
        X, Y = _grid(M)
        la = sym.lambdify((xs, ys), log_a, "numpy")(X, Y)
        uh = solve_darcy(la, sym.lambdify((xs, ys), f, "numpy")(X, Y))
        errors.append(np.abs(uh - sym.lambdify((xs, ys), u_exact, "numpy")(X, Y)).max())
    rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(rates > 1.9), (errors, rates)


def _fem_p1(M, a_fn):
    """P1 finite elements (scikit-fem) on the same nodes, -div(a grad u) = 1, u = 0."""
    skfem = pytest.importorskip("skfem")
    from skfem.helpers import dot, grad

    x = np.linspace(0.0, 1.0, M)
    mesh = skfem.MeshTri.init_tensor(x, x)
    basis = skfem.Basis(mesh, skfem.ElementTriP1())

    @skfem.BilinearForm
    def stiffness(u, v, w):
        return w["a"] * dot(grad(u), grad(v))

    @skfem.LinearForm
    def load(v, w):
        return 1.0 * v

    A = skfem.asm(stiffness, basis, a=basis.interpolate(a_fn(*mesh.p)))
    u = skfem.solve(*skfem.condense(A, skfem.asm(load, basis), D=mesh.boundary_nodes()))
    grid = np.zeros((M, M))
    grid[np.rint(mesh.p[0] * (M - 1)).astype(int), np.rint(mesh.p[1] * (M - 1)).astype(int)] = u
    return grid


def test_agrees_with_scikit_fem_on_a_variable_coefficient():
    a_fn = lambda x, y: np.exp(np.sin(2 * np.pi * x) * np.cos(3 * np.pi * y))  # noqa: E731
    diffs = []
    for M in (33, 65):
        X, Y = _grid(M)
        fd = solve_darcy(np.log(a_fn(X, Y)))
        fem = _fem_p1(M, a_fn)
        diffs.append(np.abs(fd - fem).max() / np.abs(fem).max())
    assert diffs[1] < 1e-2 and diffs[0] / diffs[1] > 3.0, diffs  # both converge to the same u


def test_operator_and_oracle():
    rng = np.random.default_rng(0)
    la = rng.standard_normal((16, 16))
    A = darcy_matrix(np.exp(la))
    assert abs(A - A.T).max() < 1e-9 * abs(A).max()  # symmetric ...
    assert np.all(np.linalg.eigvalsh(A.toarray()) > 0)  # ... positive definite
    o = make_oracle({"name": "darcy"})
    u = o.label(rng.standard_normal((3, 16 * 16)))
    assert u.shape == (3, 256)
    fields = u.reshape(3, 16, 16)
    assert np.all(fields[:, 0, :] == 0) and np.all(fields[:, :, -1] == 0)
    assert np.all(fields[:, 1:-1, 1:-1] > 0)  # maximum principle for f = 1
    # a constant coefficient scales the solution: a = c gives u / c
    np.testing.assert_allclose(solve_darcy(np.full((16, 16), np.log(4.0))) * 4, solve_darcy(np.zeros((16, 16))),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="square"):
        o.label(np.zeros((1, 15)))
