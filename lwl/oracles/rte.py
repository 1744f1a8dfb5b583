"""Steady radiative transport with isotropic scattering (paper SM RTE).

    eps v . grad u(z, v) = a(z) (<u>(z) - u(z, v)),   z in (0,1)^2,  v = (cos t, sin t),
    <u> = (1 / 2 pi) int u dt,   u = phi on the inflow boundary,

phi = (1 + 0.5 sin(pi y)) max(v . n_in, 0) on x = 0 (n_in = (1, 0), the inward normal: the
paper's formula with its outward normal would inject nothing), 0 elsewhere. The oracle maps the
scattering coefficient a on the grid x grid nodes (rows, flattened) to the density
rho = int u dt = 2 pi <u>.

Discrete ordinates t_m = -pi + 2 pi (m + 1/2) / D with equal weights, first-order upwind
differences on the nodes, inflow values imposed on the boundary nodes a direction enters
through; the D directions are coupled at each node by the mean <u>.

Solvers (same discrete solution, tested equal to 1e-9):

- :class:`SchurRTESolver` (default): each direction's upwind operator T_m (transport plus the
  diagonal a) is lower triangular in its sweep order and factorised there once, without fill;
  eliminating the directions leaves (I - K) <u> = f on the grid^2 mean values,
  K = (1/D) sum_m T_m^{-1} a, solved by GMRES (6-30 iterations for eps = 8 ... 1/8). The adjoint
  is (I - K^T) mu = g with the transposed solves of the same factors. About 0.03-0.06 s per
  forward solve at 51^2 x 12 (bench/rte.py).
- :class:`DirectRTESolver`: the full system by one SuperLU factorisation (reference).

Both give ``density()`` and ``gradient(d_rho)`` (the gradient of a loss with respect to a).
"""

from __future__ import annotations


import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from lwl.grids import square_nodes, trapezoid_weights, unit_nodes
from lwl.oracles.base import Oracle, as_numpy, register_oracle


class DirectRTESolver:
    """The whole RTE system for a scattering coefficient ``a`` (grid x grid nodes), one
    SuperLU factorisation (1-2 s at 51^2 x 12: the fill of a 2-D problem with 13 unknowns per
    node). Kept as the reference that :class:`SchurRTESolver` is tested against."""

    def __init__(self, a: np.ndarray, knudsen: float, directions: int = 12):
        a = np.asarray(a, dtype=np.float64)
        G = a.shape[0]
        self.G, self.D, self.eps = G, directions, knudsen
        h = 1.0 / (G - 1)
        t = -np.pi + 2 * np.pi * (np.arange(directions) + 0.5) / directions
        self.theta = t
        c, s = np.cos(t), np.sin(t)
        x = unit_nodes(G)
        I, J = np.meshgrid(np.arange(G), np.arange(G), indexing="ij")  # i along x, j along y
        node = (I * G + J).ravel()
        n_nodes = G * G
        rows, cols, vals = [], [], []
        rhs = np.zeros(directions * n_nodes)
        self.fixed = np.zeros(directions * n_nodes, dtype=bool)  # inflow-boundary unknowns
        for m in range(directions):
            off = m * n_nodes
            inflow = ((I == 0) & (c[m] > 0)) | ((I == G - 1) & (c[m] < 0)) \
                | ((J == 0) & (s[m] > 0)) | ((J == G - 1) & (s[m] < 0))
            inflow = inflow.ravel()
            interior = ~inflow
            # boundary rows: u = phi
            b = node[inflow]
            rows.append(off + b)
            cols.append(off + b)
            vals.append(np.ones(b.size))
            phi = np.where(I.ravel()[inflow] == 0, (1 + 0.5 * np.sin(np.pi * x[J.ravel()[inflow]])) * max(c[m], 0.0), 0.0)
            rhs[off + b] = phi
            self.fixed[off + b] = True
            # interior rows: eps (|c| (u - u_up_x) + |s| (u - u_up_y)) / h + a u - a <u> = 0
            k = node[interior]
            ii, jj = I.ravel()[interior], J.ravel()[interior]
            ak = a.ravel()[k]
            diag = self.eps * (abs(c[m]) + abs(s[m])) / h + ak
            rows.append(off + k)
            cols.append(off + k)
            vals.append(diag)
            up_i = ii - 1 if c[m] > 0 else ii + 1
            up_j = jj - 1 if s[m] > 0 else jj + 1
            rows += [off + k, off + k]
            cols += [off + up_i * G + jj, off + ii * G + up_j]
            vals += [np.full(k.size, -self.eps * abs(c[m]) / h), np.full(k.size, -self.eps * abs(s[m]) / h)]
            # -a <u>: one entry on the auxiliary mean unknown of the node, not D - 1 entries
            rows.append(off + k)
            cols.append(directions * n_nodes + k)
            vals.append(-ak)
        # auxiliary rows: <u>_k - (1/D) sum_m u_m(k) = 0. Coupling the D directions through one
        # extra unknown per node keeps the matrix sparse: the factorisation is ~5x faster than
        # with the dense D x D coupling block at every node.
        mean_rows = directions * n_nodes + np.arange(n_nodes)
        rows.append(mean_rows)
        cols.append(mean_rows)
        vals.append(np.ones(n_nodes))
        for m in range(directions):
            rows.append(mean_rows)
            cols.append(m * n_nodes + np.arange(n_nodes))
            vals.append(np.full(n_nodes, -1.0 / directions))
        size = (directions + 1) * n_nodes
        rhs = np.concatenate([rhs, np.zeros(n_nodes)])
        self.fixed = np.concatenate([self.fixed, np.zeros(n_nodes, dtype=bool)])
        A = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size))
        self.A = A
        self.lu = splu(A, permc_spec="COLAMD")
        self.rhs = rhs
        self.u_ = self.lu.solve(rhs)

    def density(self) -> np.ndarray:
        """rho = int u dt = 2 pi <u> on the nodes (grid * grid,)."""
        return 2 * np.pi * self.u_[self.D * self.G * self.G:]

    def gradient(self, d_rho: np.ndarray) -> np.ndarray:
        """d(loss)/d a for a loss with gradient ``d_rho`` w.r.t. the density, by one adjoint
        solve with the same factors: A(a) w = b, rho = 2 pi <u>, so
        dl/da = -lambda^T (dA/da) w with A^T lambda = d rho/d w^T d_rho."""
        n_nodes = self.G * self.G
        g = np.zeros(self.A.shape[0])
        g[self.D * n_nodes:] = 2 * np.pi * np.asarray(d_rho, dtype=np.float64)
        lam = self.lu.solve(g, trans="T")
        # dA/da_k touches the interior transport rows (m, k): + u_m(k) - <u>(k)
        U = self.u_[: self.D * n_nodes].reshape(self.D, n_nodes)
        mean_u = self.u_[self.D * n_nodes:]
        L = lam[: self.D * n_nodes].reshape(self.D, n_nodes).copy()
        L[self.fixed[: self.D * n_nodes].reshape(self.D, n_nodes)] = 0.0
        return -(L * (U - mean_u[None, :])).sum(0)


class _SweepFactor:
    """The LU factors of an upwind operator stored in its sweep order, where it is lower
    triangular: SuperLU with the natural ordering and no pivoting does no fill and no ordering
    work (3.5x faster than COLAMD, which was half of every forward solve). ``solve`` takes and
    returns vectors in node order."""

    def __init__(self, T_sweep: sp.csc_matrix, order: np.ndarray):
        self.lu = splu(T_sweep, permc_spec="NATURAL", diag_pivot_thresh=0.0)
        self.order = order  # order[p] = node at sweep position p

    def solve(self, r: np.ndarray, trans: str = "N") -> np.ndarray:
        out = np.empty_like(r)
        out[self.order] = self.lu.solve(r[self.order], trans=trans)
        return out


def _direction_operators(a: np.ndarray, eps: float, directions: int):
    """Per direction m: the upwind operator T_m (with +a on interior rows, identity on inflow
    rows) factorised in sweep order, its inflow right-hand side b_m and the interior mask."""
    G = a.shape[0]
    h = 1.0 / (G - 1)
    n = G * G
    t = -np.pi + 2 * np.pi * (np.arange(directions) + 0.5) / directions
    c, s = np.cos(t), np.sin(t)
    x = unit_nodes(G)
    I, J = np.meshgrid(np.arange(G), np.arange(G), indexing="ij")
    Iv, Jv = I.ravel(), J.ravel()
    av = a.ravel()
    ops = []
    for m in range(directions):
        inflow = (((Iv == 0) & (c[m] > 0)) | ((Iv == G - 1) & (c[m] < 0))
                  | ((Jv == 0) & (s[m] > 0)) | ((Jv == G - 1) & (s[m] < 0)))
        k = np.flatnonzero(~inflow)
        ii, jj = Iv[k], Jv[k]
        up_i = ii - 1 if c[m] > 0 else ii + 1
        up_j = jj - 1 if s[m] > 0 else jj + 1
        b_nodes = np.flatnonzero(inflow)
        rows = np.concatenate([b_nodes, k, k, k])
        cols = np.concatenate([b_nodes, k, up_i * G + jj, ii * G + up_j])
        vals = np.concatenate([np.ones(b_nodes.size), eps * (abs(c[m]) + abs(s[m])) / h + av[k],
                               np.full(k.size, -eps * abs(c[m]) / h), np.full(k.size, -eps * abs(s[m]) / h)])
        # sweep position of each node: upwind neighbours come first, so T is lower triangular there
        pos = ((Iv if c[m] > 0 else G - 1 - Iv) * G + (Jv if s[m] > 0 else G - 1 - Jv))
        T = sp.csc_matrix((vals, (pos[rows], pos[cols])), shape=(n, n))
        b = np.zeros(n)
        b[b_nodes] = np.where(Iv[b_nodes] == 0, (1 + 0.5 * np.sin(np.pi * x[Jv[b_nodes]])) * max(c[m], 0.0), 0.0)
        ops.append((_SweepFactor(T, np.argsort(pos)), b, (~inflow).astype(np.float64)))
    return t, ops


class SchurRTESolver:
    """RTE by direction-wise factorisations and GMRES on the mean values (module docstring)."""

    def __init__(self, a: np.ndarray, knudsen: float, directions: int = 12, tol: float = 1e-11):
        from scipy.sparse.linalg import LinearOperator, gmres

        a = np.asarray(a, dtype=np.float64)
        self.G, self.D, self.eps, self.tol = a.shape[0], directions, knudsen, tol
        self.a = a.ravel()
        self.theta, self.ops = _direction_operators(a, knudsen, directions)
        self._gmres, self._op = gmres, LinearOperator
        f = sum(lu.solve(b) for lu, b, _ in self.ops) / directions
        self.mean_ = self._solve(lambda r: r - self._K(r), f)
        self.u_ = np.stack([lu.solve(mask * self.a * self.mean_ + b) for lu, b, mask in self.ops])

    def _K(self, r: np.ndarray, trans: bool = False) -> np.ndarray:
        out = np.zeros(r.shape, dtype=np.float64)
        for lu, _, mask in self.ops:
            out += mask * self.a * lu.solve(r, trans="T") if trans else lu.solve(mask * self.a * r)
        return out / self.D

    def _solve(self, matvec, rhs):
        n = rhs.size
        iters = [0]
        x, info = self._gmres(self._op((n, n), matvec=matvec, dtype=np.float64), rhs, rtol=self.tol, atol=0.0, restart=200,
                              maxiter=5000, callback=lambda _: iters.__setitem__(0, iters[0] + 1),
                              callback_type="pr_norm")
        if info != 0:
            raise RuntimeError(f"rte: GMRES did not converge (info={info})")
        self.iterations_ = iters[0]
        return x

    def density(self) -> np.ndarray:
        return 2 * np.pi * self.mean_

    def gradient(self, d_rho: np.ndarray) -> np.ndarray:
        """d(loss)/d a: (I - K^T) mu = 2 pi d_rho, lambda_m = T_m^{-T} mu / D, and
        dl/da_k = -sum_m lambda_m(k) (u_m(k) - <u>(k)) over interior rows."""
        g = 2 * np.pi * np.asarray(d_rho, dtype=np.float64)
        mu = self._solve(lambda r: r - self._K(r, trans=True), g)
        grad = np.zeros(self.G * self.G)
        for (lu, _, mask), u in zip(self.ops, self.u_):
            grad -= mask * lu.solve(mu, trans="T") / self.D * (u - self.mean_)
        return grad


def RTESolver(a: np.ndarray, knudsen: float, directions: int = 12, method: str = "schur"):
    """A solved RTE system (``method``: "schur" or "direct")."""
    if method == "schur":
        return SchurRTESolver(a, knudsen, directions)
    if method == "direct":
        return DirectRTESolver(a, knudsen, directions)
    raise ValueError(f"oracle.params.method: 'schur' or 'direct', got {method!r}")


@register_oracle("rte")
class RTE(Oracle):
    """Scattering coefficient a (grid x grid, flattened) -> density int u dv (flattened).
    params: knudsen (eps, 1.0), grid (51), directions (12), method ("schur" | "direct")."""

    min_dim = 9

    def __init__(self, knudsen: float = 1.0, grid: int = 51, directions: int = 12, method: str = "schur"):
        super().__init__(grid * grid)
        if not knudsen > 0 or grid < 3 or directions < 2:
            raise ValueError("oracle.params: knudsen > 0, grid >= 3, directions >= 2")
        if method not in ("schur", "direct"):
            raise ValueError(f"oracle.params.method: 'schur' or 'direct', got {method!r}")
        self.knudsen, self.grid, self.directions, self.method = knudsen, grid, directions, method

    def output_grid(self, input_dim: int):
        """The grid's nodes (the densities live where the coefficients do) and trapezoid weights."""
        if input_dim != self.grid**2:
            raise ValueError(f"oracle.params.grid: rte on a {self.grid} x {self.grid} grid takes inputs of "
                             f"dimension {self.grid**2}, got {input_dim}")
        return square_nodes(self.grid), trapezoid_weights(self.grid)

    def solver(self, a: np.ndarray):
        return RTESolver(np.asarray(a).reshape(self.grid, self.grid), self.knudsen, self.directions, self.method)

    def _label(self, inputs):
        a = as_numpy(inputs)
        if np.any(a < 0):
            raise ValueError("inputs: scattering coefficients must be non-negative")
        return np.stack([self.solver(row).density() for row in a])
