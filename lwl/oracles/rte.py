"""Steady radiative transport with isotropic scattering (paper SM RTE).

    eps v . grad u(z, v) = a(z) (<u>(z) - u(z, v)),   z in (0,1)^2,  v = (cos t, sin t),
    <u> = (1 / 2 pi) int u dt,   u = phi on the inflow boundary,

phi = (1 + 0.5 sin(pi y)) max(v . n_in, 0) on x = 0 (n_in = (1, 0), the inward normal: the
paper's formula with its outward normal would inject nothing), 0 elsewhere. The oracle maps the
scattering coefficient a on the grid x grid nodes (rows, flattened) to the density
rho = int u dt = 2 pi <u>.

Discrete ordinates t_m = -pi + 2 pi (m + 1/2) / D with equal weights, first-order upwind
differences on the nodes, inflow values imposed on the boundary nodes a direction enters
through. The whole system (D grid^2 unknowns, the D directions coupled at each node by <u>) is
assembled once per coefficient and factorised by SuperLU; the same factors solve the adjoint
system for gradients of a loss with respect to a (:meth:`RTESolver.gradient`).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from lwl.oracles.base import Oracle, as_numpy, register_oracle


class RTESolver:
    """One factorised RTE system for a scattering coefficient ``a`` (grid x grid nodes)."""

    def __init__(self, a: np.ndarray, knudsen: float, directions: int = 12):
        a = np.asarray(a, dtype=np.float64)
        G = a.shape[0]
        self.G, self.D, self.eps = G, directions, knudsen
        h = 1.0 / (G - 1)
        t = -np.pi + 2 * np.pi * (np.arange(directions) + 0.5) / directions
        self.theta = t
        c, s = np.cos(t), np.sin(t)
        x = np.linspace(0.0, 1.0, G)
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


@register_oracle("rte")
class RTE(Oracle):
    """Scattering coefficient a (grid x grid, flattened) -> density int u dv (flattened).
    params: knudsen (eps, 1.0), grid (51), directions (12)."""

    min_dim = 9

    def __init__(self, knudsen: float = 1.0, grid: int = 51, directions: int = 12):
        super().__init__(grid * grid)
        if not knudsen > 0 or grid < 3 or directions < 2:
            raise ValueError("oracle.params: knudsen > 0, grid >= 3, directions >= 2")
        self.knudsen, self.grid, self.directions = knudsen, grid, directions

    def solver(self, a: np.ndarray) -> RTESolver:
        return RTESolver(np.asarray(a).reshape(self.grid, self.grid), self.knudsen, self.directions)

    def _label(self, inputs):
        a = as_numpy(inputs)
        if np.any(a < 0):
            raise ValueError("inputs: scattering coefficients must be non-negative")
        return np.stack([self.solver(row).density() for row in a])
