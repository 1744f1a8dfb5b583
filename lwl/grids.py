"""The grids that fields live on, and their quadrature: one place for the nodes of [0, 1] and
[0, 1]^2 and the trapezoid weights of L^2 norms (SM eqn app_ntd_rel_ood_error's norms).

Used by the PDE oracles' solvers and output grids (Darcy, NtD, EIT, RTE), the particle family
and the KLE measures. A closed grid of M nodes is x_i = i / (M - 1), i = 0..M-1, computed as
``np.linspace`` (the KLE measures' sine bases keep their own ``arange`` form, which differs in
the last bit on most M: stored results and checkpoints reproduce bit for bit).
"""

from __future__ import annotations

import numpy as np


def unit_nodes(M: int) -> np.ndarray:
    """(M,): the closed grid 0, 1/(M-1), ..., 1 of [0, 1] (boundary included)."""
    return np.linspace(0.0, 1.0, M)


def square_nodes(M: int) -> np.ndarray:
    """(M^2, 2): the M x M closed grid of [0, 1]^2, row i = x index (``indexing="ij"``), flattened
    as the fields are (node (i, j) at row i M + j)."""
    x = unit_nodes(M)
    return np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)


def trapezoid_weights_1d(M: int) -> np.ndarray:
    """(M,): the trapezoid rule on the closed grid: h inside, h / 2 at the ends (h = 1/(M-1)),
    so that a constant c has squared L^2 norm c^2 exactly."""
    w = np.full(M, 1.0 / (M - 1))
    w[[0, -1]] *= 0.5
    return w


def trapezoid_weights(M: int) -> np.ndarray:
    """(M^2,): the 2-D trapezoid rule on the M x M closed grid, flattened as the fields are."""
    w = trapezoid_weights_1d(M)
    return np.outer(w, w).ravel()
