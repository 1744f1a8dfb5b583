"""Neumann-to-Dirichlet map of a fixed conductivity on (0,1)^2 (paper SM NtD).

-div(a grad u) = 0 in the square, a du/dn = g on the boundary (g mean-free); the output is the
Dirichlet trace f = u on the boundary, normalised to mean zero. The map is linear, so it is
built once as a (4M-4) x (4M-4) matrix and applied to batches.

Discretisation: vertex-centred finite volumes on the M x M nodes (h = 1/(M-1)); the flux
through the dual face between neighbouring nodes is a_e (u_i - u_j) with the harmonic-mean
edge conductivity a_e (faces along the boundary are half as long). Eliminating the interior
nodes gives the Dirichlet-to-Neumann map Lambda = (K_BB - K_BI K_II^{-1} K_IB) / h: one sparse
LU of K_II, one solve with the 4M-4 boundary columns. Lambda is symmetric (reciprocity) with
the constants as its null space, and NtD = pinv(Lambda) on mean-free data.

Boundary nodes are ordered counter-clockwise from the corner (0, 0): bottom (y = 0), right
(x = 1), top (y = 1), left (x = 0), each corner once.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from lwl.grids import unit_nodes
from lwl.oracles.base import Oracle, as_numpy, register_oracle


def boundary_indices(M: int) -> np.ndarray:
    """Flat (i * M + j, i along x) indices of the boundary nodes, counter-clockwise."""
    i = np.concatenate([np.arange(M - 1), np.full(M - 1, M - 1), np.arange(M - 1, 0, -1), np.zeros(M - 1, int)])
    j = np.concatenate([np.zeros(M - 1, int), np.arange(M - 1), np.full(M - 1, M - 1), np.arange(M - 1, 0, -1)])
    return i * M + j


def boundary_points(M: int) -> np.ndarray:
    """(4M-4, 2) coordinates of the boundary nodes in :func:`boundary_indices` order."""
    idx = boundary_indices(M)
    return np.stack([idx // M, idx % M], 1) / (M - 1)


def fv_matrix(a: np.ndarray) -> sp.csr_matrix:
    """The M^2 x M^2 finite-volume stiffness matrix (singular: constants are its kernel)."""
    M = a.shape[0]
    idx = np.arange(M * M).reshape(M, M)
    ax = 2 * a[1:, :] * a[:-1, :] / (a[1:, :] + a[:-1, :])  # edges along x: (M-1, M)
    ay = 2 * a[:, 1:] * a[:, :-1] / (a[:, 1:] + a[:, :-1])  # edges along y: (M, M-1)
    ax[:, [0, -1]] *= 0.5  # x-edges on y = 0 and y = 1 have half-length dual faces
    ay[[0, -1], :] *= 0.5
    r = np.concatenate([idx[1:, :].ravel(), idx[:, 1:].ravel()])
    c = np.concatenate([idx[:-1, :].ravel(), idx[:, :-1].ravel()])
    w = np.concatenate([ax.ravel(), ay.ravel()])
    off = sp.coo_matrix((-w, (r, c)), shape=(M * M, M * M))
    off = off + off.T
    diag = -np.asarray(off.sum(axis=1)).ravel()
    return (off + sp.diags(diag)).tocsr()


def dtn_matrix(a: np.ndarray, symmetrize: bool = True) -> np.ndarray:
    """Lambda: boundary values -> normal flux densities a du/dn (symmetric, kernel = constants).

    The Schur complement is symmetric in exact arithmetic (reciprocity); ``symmetrize`` removes
    the round-off asymmetry of the elimination (tests check it is round-off)."""
    M = a.shape[0]
    K = fv_matrix(a)
    b = boundary_indices(M)
    interior = np.setdiff1d(np.arange(M * M), b)
    K_II = K[interior][:, interior].tocsc()
    K_IB = K[interior][:, b].toarray()
    S = K[b][:, b].toarray() - K_IB.T @ splu(K_II, permc_spec="MMD_AT_PLUS_A").solve(K_IB)
    if symmetrize:
        S = 0.5 * (S + S.T)
    return S * (M - 1)  # loads / h = flux densities


def ntd_from_dtn(dtn: np.ndarray) -> np.ndarray:
    """pinv(Lambda) on mean-free data: maps mean-free g to the mean-free trace f."""
    n = dtn.shape[0]
    P = np.eye(n) - 1.0 / n  # projector onto mean-free vectors
    # Lambda + (1/n) 1 1^T is invertible and agrees with Lambda on mean-free vectors
    return P @ np.linalg.solve(dtn + np.full((n, n), 1.0 / n), P)


@lru_cache(maxsize=8)
def _ntd_cached(M: int, key: bytes) -> np.ndarray:
    log_a = np.frombuffer(key, dtype=np.float64).reshape(M, M)
    return ntd_from_dtn(dtn_matrix(np.exp(log_a)))


def paper_log_conductivity(M: int, alpha: float = 2.0, tau: float = 3.0, sigma: float = 3.0,
                           seed: int = 0, terms: int = 32) -> np.ndarray:
    """A fixed log-conductivity: a Matern-like KLE on the sine basis of (0,1)^2,
    sigma * sum_{j,k} (pi^2 (j^2 + k^2) + tau^2)^(-alpha/2) xi_jk 2 sin(j pi x) sin(k pi y)."""
    rng = np.random.default_rng(seed)
    j = np.arange(1, terms + 1)
    lam = (np.pi**2 * (j[:, None] ** 2 + j[None, :] ** 2) + tau**2) ** (-alpha / 2)
    xi = rng.standard_normal((terms, terms))
    x = unit_nodes(M)
    s = np.sqrt(2) * np.sin(np.pi * np.outer(j, x))  # (terms, M)
    return sigma * s.T @ (lam * xi) @ s


@register_oracle("ntd")
class NtD(Oracle):
    """Mean-free Neumann data g on the 4M-4 boundary nodes -> mean-free Dirichlet data.

    params: ``grid`` M (128); ``conductivity``: a positive number (constant a), or "paper"
    (the log-normal field of :func:`paper_log_conductivity` with ``alpha``, ``tau``, ``sigma``,
    ``seed``)."""

    min_dim = 4

    def __init__(self, grid: int = 128, conductivity: float | str = "paper", alpha: float = 2.0,
                 tau: float = 3.0, sigma: float = 3.0, seed: int = 0):
        super().__init__(4 * grid - 4)
        if grid < 3:
            raise ValueError("oracle.params.grid: must be >= 3")
        if conductivity == "paper":
            log_a = paper_log_conductivity(grid, alpha, tau, sigma, seed)
        elif isinstance(conductivity, (int, float)) and conductivity > 0:
            log_a = np.full((grid, grid), math.log(conductivity))
        else:
            raise ValueError("oracle.params.conductivity: a positive number or 'paper'")
        self.grid = grid
        self.log_conductivity = log_a
        self.matrix = _ntd_cached(grid, np.ascontiguousarray(log_a).tobytes())

    def output_grid(self, input_dim: int):
        return boundary_points(self.grid), np.full(4 * self.grid - 4, 1.0 / (self.grid - 1))

    def _label(self, inputs):
        g = as_numpy(inputs)
        g = g - g.mean(1, keepdims=True)  # the NtD map is defined on mean-free data
        return g @ self.matrix.T
