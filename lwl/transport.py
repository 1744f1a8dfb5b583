"""Wasserstein-2 tools, all through POT.

- :func:`gaussian_w2_squared`: W2^2(N(m1,C1), N(m2,C2)) = ||m1-m2||^2 + B(C1,C2)^2, the
  Gelbrich/Bures closed form (paper SM "Additional mathematical background").
- :func:`gaussian_barycenter`: the W2 barycenter of Gaussians, N(sum w_k m_k, C) with
  C = sum_k w_k (C^{1/2} C_k C^{1/2})^{1/2} (paper Ex. "Gaussian barycenter"), by POT's
  fixed-point iteration.
- :func:`empirical_w2_squared`: exact OT between two point clouds (``ot.emd2``).

Squared distances are returned throughout: the paper's bound uses W2^2, and the gradient of
W2 itself blows up where the distance vanishes.
"""

from __future__ import annotations

import numpy as np
import ot

from lwl.measures import Gaussian


def gaussian_w2_squared(m1, C1, m2, C2):
    """W2^2 between N(m1, C1) and N(m2, C2); array-library agnostic (numpy or torch)."""
    nx = ot.backend.get_backend(m1, C1, m2, C2)
    diff = m1 - m2
    return nx.sum(diff * diff) + ot.gaussian.bures_distance(C1, C2, nx=nx) ** 2


def gaussian_barycenter(means, covs, weights=None, *, num_iter: int = 1000, eps: float = 1e-10) -> Gaussian:
    """W2 barycenter of the Gaussians N(means[k], covs[k]) with the given weights."""
    means = np.asarray(means, dtype=np.float64)
    covs = np.asarray(covs, dtype=np.float64)
    k = means.shape[0]
    w = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, dtype=np.float64) / np.sum(weights)
    mean, cov = ot.gaussian.bures_wasserstein_barycenter(means, covs, weights=w, num_iter=num_iter, eps=eps)
    cov = 0.5 * (cov + cov.T)  # symmetrise the fixed point's round-off before factorising
    return Gaussian(mean, cov=cov)


def empirical_w2_squared(x, y, a=None, b=None) -> float:
    """Exact W2^2 between the empirical measures of point clouds x (n, d) and y (m, d)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    a = np.full(x.shape[0], 1.0 / x.shape[0]) if a is None else np.asarray(a, dtype=np.float64)
    b = np.full(y.shape[0], 1.0 / y.shape[0]) if b is None else np.asarray(b, dtype=np.float64)
    cost = ot.dist(x, y, metric="sqeuclidean")
    return float(ot.emd2(a, b, cost, numItermax=10_000_000))
