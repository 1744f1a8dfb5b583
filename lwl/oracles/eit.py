"""Electrical impedance tomography on (0,1)^2 (paper SM "AMINO for learning EIT", Table 2).

Forward problem: div(a grad u) = 0 in the square, u = f on the boundary; the measurement is the
Neumann data g = a du/dn (outward normal). Conductivities (paper eqn app_conductivity):

    a(x) = exp( sum_{k<=m} c_k sin(k pi x_1) sin(k pi x_2) ),  m = floor(mbar), mbar ~ U[1, 5],
    c ~ U[-1, 1]^m,

so m takes the values 1..4 and a = 1 on the boundary. Dirichlet data (eqn app_dirichlet_cosine):
f_l(x) = cos(omega (x_1 cos theta_l + x_2 sin theta_l)), theta_l = 2 pi l / L.

Discretisation: the vertex-centred finite volumes of :mod:`lwl.oracles.ntd` on the M x M nodes
(harmonic-mean edge conductivities, half cells on the boundary): one sparse LU of the interior
block per conductivity, reused for every boundary datum. The Neumann datum at a boundary node is
the net flux through its dual boundary faces divided by their length h (at a corner, the mean
of its two sides' normal derivatives); second order for smooth a (tests/lwl/oracles/test_eit.py:
constant conductivity with harmonic data, a manufactured solution with variable a, symmetry of
the DtN matrix).

The oracle ``eit`` labels one Dirichlet-Neumann pair per row: input ``[omega, theta, c_1..c_4]``
(a row's conductivity is given by its coefficients, so the map is a deterministic function),
output the Neumann data on the 4M - 4 boundary nodes (counter-clockwise from (0, 0), as NtD).
Rows that share a conductivity share its factorisation.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse.linalg import splu

from lwl.grids import unit_nodes
from lwl.oracles.base import Oracle, as_numpy, register_oracle
from lwl.oracles.ntd import boundary_indices, boundary_points, fv_matrix

MAX_TERMS = 4  # m = floor(U[1, 5]) is at most 4 (5 has probability zero)


def nodes(M: int) -> np.ndarray:
    """The M equispaced nodes x_i = i / (M - 1) of [0, 1] (boundary included)."""
    return unit_nodes(M)


def conductivity(coefficients: np.ndarray, M: int) -> np.ndarray:
    """a on the M x M nodes (index [i, j] = (x_i, y_j)) for coefficients c (..., MAX_TERMS);
    zero coefficients beyond m."""
    c = np.asarray(coefficients, dtype=np.float64)
    k = np.arange(1, c.shape[-1] + 1)
    s = np.sin(np.pi * np.outer(k, nodes(M)))  # (K, M)
    log_a = np.einsum("...k,ki,kj->...ij", c, s, s)
    return np.exp(log_a)


def draw_coefficients(n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of (c_1..c_4) from the paper's prior (zeros beyond m = floor(U[1, 5]))."""
    m = np.floor(rng.uniform(1.0, 5.0, n)).astype(int)
    c = rng.uniform(-1.0, 1.0, (n, MAX_TERMS))
    c[np.arange(MAX_TERMS)[None, :] >= m[:, None]] = 0.0
    return c


def angles(L: int) -> np.ndarray:
    """theta_l = 2 pi l / L, l = 1..L."""
    return 2 * np.pi * np.arange(1, L + 1) / L


def dirichlet_data(omega: np.ndarray, theta: np.ndarray, M: int) -> np.ndarray:
    """f = cos(omega (x cos theta + y sin theta)) on the boundary nodes; omega and theta broadcast
    against each other, the nodes are the last axis."""
    P = boundary_points(M)
    om, th = np.broadcast_arrays(np.asarray(omega, dtype=np.float64), np.asarray(theta, dtype=np.float64))
    proj = np.cos(th)[..., None] * P[:, 0] + np.sin(th)[..., None] * P[:, 1]
    return np.cos(om[..., None] * proj)


class DirichletSolver:
    """One conductivity's factorised finite-volume system: Dirichlet data -> (u, Neumann data).

    ``K`` is the stiffness of -div(a grad .) (row i: sum_j a_ij (u_i - u_j), the net outflow of
    node i's dual cell); for div(a grad u) = s the cell balance is (K u)_i = -s_i |cell_i| +
    |face_i| g_i, with |face_i| = h on the boundary (two half faces) and |cell_i| = h^2 inside,
    h^2 / 2 on a side, h^2 / 4 at a corner."""

    def __init__(self, a: np.ndarray):
        M = a.shape[0]
        self.M, self.h = M, 1.0 / (M - 1)
        K = fv_matrix(a).tocsr()
        self.b = boundary_indices(M)
        self.i = np.setdiff1d(np.arange(M * M), self.b)
        self.K_IB = K[self.i][:, self.b].tocsc()
        self.K_BI = K[self.b][:, self.i].tocsr()
        self.K_BB = K[self.b][:, self.b].tocsr()
        self.lu = splu(K[self.i][:, self.i].tocsc(), permc_spec="MMD_AT_PLUS_A")
        area = np.full((M, M), self.h**2)
        area[[0, -1], :] *= 0.5
        area[:, [0, -1]] *= 0.5
        self.area = area.ravel()

    def solve(self, f: np.ndarray, source: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """u on the M x M nodes and g = a du/dn on the boundary nodes for boundary values f
        ((4M-4,) or (4M-4, n)) and an optional source s of div(a grad u) = s (M x M)."""
        f = np.asarray(f, dtype=np.float64)
        F = f.reshape(len(self.b), -1)
        rhs = -(self.K_IB @ F)
        if source is not None:
            s = np.asarray(source, dtype=np.float64).ravel()
            rhs = rhs - (s * self.area)[self.i, None]
        u_i = self.lu.solve(rhs)
        g = self.K_BB @ F + self.K_BI @ u_i
        if source is not None:
            g = g + (s * self.area)[self.b, None]
        g = g / self.h
        u = np.empty((self.M * self.M, F.shape[1]))
        u[self.b], u[self.i] = F, u_i
        shape = f.shape[1:]
        return u.reshape(self.M, self.M, *shape), g.reshape(len(self.b), *shape)

    def dtn(self) -> np.ndarray:
        """The Dirichlet-to-Neumann matrix Lambda (4M-4 x 4M-4): g = Lambda f."""
        return self.solve(np.eye(len(self.b)))[1]


def neumann_data(coefficients: np.ndarray, omega: np.ndarray, theta: np.ndarray, M: int) -> np.ndarray:
    """Neumann data (n, L, 4M-4) of n conductivities, each with its L pairs (omega, theta)."""
    c = np.atleast_2d(coefficients)
    om, th = np.broadcast_arrays(np.atleast_2d(omega), np.atleast_2d(theta))
    out = np.empty((len(c), om.shape[1], 4 * M - 4))
    for r in range(len(c)):
        f = dirichlet_data(om[r], th[r], M)  # (L, B)
        out[r] = DirichletSolver(conductivity(c[r], M)).solve(f.T)[1].T
    return out


@register_oracle("eit")
class EIT(Oracle):
    """One Dirichlet-Neumann pair per row: ``[omega, theta, c_1..c_4]`` -> a du/dn on the 4M-4
    boundary nodes. params: ``grid`` M (70, the paper's)."""

    min_dim = 2 + MAX_TERMS
    design_dim = 1  # a design chooses the law of omega; angles and conductivities complete the rows

    def __init__(self, grid: int = 70):
        if not 4 <= grid <= 512:
            raise ValueError("oracle.params.grid: must lie in 4..512")
        super().__init__(2 + MAX_TERMS)
        self.grid = grid
        self.output_shape = (4 * grid - 4,)

    def output_grid(self, input_dim: int):
        return boundary_points(self.grid), np.full(4 * self.grid - 4, 1.0 / (self.grid - 1))

    def _label(self, inputs):
        x = as_numpy(inputs).astype(np.float64, copy=False)
        out = np.empty((len(x), 4 * self.grid - 4))
        # rows of one conductivity share its factorisation: group them by their coefficients
        _, group = np.unique(x[:, 2:], axis=0, return_inverse=True)
        for g in np.unique(group):
            rows = np.flatnonzero(group == g)
            f = dirichlet_data(x[rows, 0], x[rows, 1], self.grid)  # (r, B)
            out[rows] = DirichletSolver(conductivity(x[rows[0], 2:], self.grid)).solve(f.T)[1].T
        return out

    def describe(self):
        return {**super().describe(), "grid": self.grid}
