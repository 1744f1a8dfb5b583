"""Gaussian measure N(m, LL^T) on R^d parametrised by its mean and Cholesky factor.

This is the parametric family of the paper's bilevel experiments (SM "Bilevel minimization
for function approximation"): theta = (m, L) with L lower triangular and its diagonal kept at
or above :data:`MIN_DIAG` (the paper replaces non-positive diagonal entries by 1e-7).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from lwl.measures.base import Measure, SeedLike, as_generator, as_matrix, register_family

MIN_DIAG = 1e-7


def project_cholesky(chol: np.ndarray, min_diag: float = MIN_DIAG) -> np.ndarray:
    """Lower-triangular part of ``chol`` with its diagonal clamped to ``>= min_diag``."""
    out = np.tril(np.asarray(chol, dtype=np.float64))
    idx = np.arange(out.shape[0])
    out[idx, idx] = np.maximum(out[idx, idx], min_diag)
    return out


def moment_matched(points: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the weighted point cloud (sum_i a_i = 1), the moment-matched
    Gaussian of Q: its mean is E_Q E_nu' u and its covariance that of the mixture."""
    a = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    mean = a @ points
    centred = points - mean
    cov = (centred * a[:, None]).T @ centred
    return mean, 0.5 * (cov + cov.T)


def regularised_cholesky(cov: np.ndarray, rel: float = 1e-8) -> np.ndarray:
    """Cholesky factor of ``cov`` with its eigenvalues floored at ``rel`` times the largest
    (rank-deficient Q samples still give a usable coordinate system).

    Where ``cov`` needs the floor, it is applied to the correlation matrix R = D^-1 cov D^-1 (D the
    inputs' standard deviations) and the factor returned is D chol(R_floored): a floor relative to
    the largest eigenvalue of ``cov`` itself depends on the inputs' units. Inputs in a lab's units
    with spreads from 1e-3 to 1e5 give eigenvalues 1e-6 and 1e10; floored at 1e-8 of the largest,
    the 1e-3 input's variance became 100, and every candidate of a budgeted design spread 1e4 of its
    own standard deviations along it (issue #83). With the floor on R the factor is equivariant
    under a change of units: chol(S cov S) = S chol(cov). Without a floor the factor is the one it
    always was, to the last bit."""
    c = 0.5 * (cov + cov.T)
    w, v = np.linalg.eigh(c)
    top = max(float(w.max()), 1e-300)
    if w.min() >= rel * top:
        return np.linalg.cholesky((v * w) @ v.T)
    sd = np.sqrt(np.clip(np.diag(c), 0.0, None))
    constant = ~(sd > 0)
    sd = np.where(constant, np.sqrt(rel) * max(float(sd.max()), 1e-300), sd)  # a constant input: the old floor's spread
    r = c / np.outer(sd, sd)
    r[constant, constant] = 1.0
    w, v = np.linalg.eigh(0.5 * (r + r.T))
    w = np.maximum(w, rel * max(float(w.max()), 1e-300))
    return sd[:, None] * np.linalg.cholesky((v * w) @ v.T)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, chol: torch.Tensor) -> torch.Tensor:
    """log N(x; m, LL^T) = -1/2 ||L^{-1}(x-m)||^2 - sum log L_ii - d/2 log 2 pi (paper Ex. 3.x).

    Written in torch so that autograd gives the score with respect to (m, L).
    """
    d = mean.shape[-1]
    z = torch.linalg.solve_triangular(chol, (x - mean).T, upper=False).T
    return (
        -0.5 * (z * z).sum(-1)
        - torch.log(torch.diagonal(chol)).sum()
        - 0.5 * d * math.log(2.0 * math.pi)
    )


@register_family("gaussian")
class Gaussian(Measure):
    """N(mean, chol chol^T). ``cov`` is accepted instead of ``chol`` and factorised."""

    def __init__(self, mean, chol=None, *, cov=None):
        self.mean = as_matrix(mean, "mean")
        if self.mean.ndim != 1:
            raise ValueError(f"mean: expected a vector, got shape {self.mean.shape}")
        d = self.mean.shape[0]
        if chol is None:
            if cov is None:
                raise ValueError("cov: a Gaussian needs cov or chol")
            cov = as_matrix(cov, "cov", (d, d))
            if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12):
                raise ValueError("cov: covariance must be symmetric")
            try:
                chol = np.linalg.cholesky(cov)
            except np.linalg.LinAlgError:
                raise ValueError("cov: covariance must be positive definite") from None
        self.chol = project_cholesky(as_matrix(chol, "chol", (d, d)))

    @classmethod
    def from_parameters(cls, mean: np.ndarray, chol: np.ndarray) -> "Gaussian":
        """Wrap parameters that are already a float64 vector and a projected Cholesky factor
        (an algorithm's own state) without re-validating them on every iteration."""
        g = cls.__new__(cls)
        g.mean, g.chol = mean, chol
        return g

    @property
    def dim(self) -> int:
        return self.mean.shape[0]

    @property
    def cov(self) -> np.ndarray:
        return self.chol @ self.chol.T

    def mean_and_cov(self) -> tuple[np.ndarray, np.ndarray]:
        return self.mean.copy(), self.cov

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        x = as_generator(seed).standard_normal((n, self.dim)) @ self.chol.T
        x += self.mean  # in place: same bits as mean + z L^T, one (n, d) temporary fewer
        return x

    def log_prob(self, x: np.ndarray) -> np.ndarray:
        t = torch.as_tensor
        return gaussian_log_prob(t(x), t(self.mean), t(self.chol)).numpy()

    def score(self, x: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Weighted sum over rows of the score (grad_m log p, grad_L log p), in closed form.

        With z = L^{-1}(x-m): grad_m = L^{-T} z and grad_L = tril(L^{-T} z z^T) - diag(1/L_ii).
        Summing with ``weights`` first keeps the cost at O(n d^2); with ``weights=None`` the
        per-sample scores are returned as arrays of shape (n, d) and (n, d, d). Tests check
        this against torch autograd of :func:`gaussian_log_prob`.
        """
        from scipy.linalg import solve_triangular

        L = self.chol
        z = solve_triangular(L, (x - self.mean).T, lower=True, check_finite=False)  # (d, n)
        inv_diag = 1.0 / np.diag(L)
        if weights is None:
            g_mean = solve_triangular(L, z, lower=True, trans="T", check_finite=False).T
            g_chol = np.tril(g_mean[:, :, None] * z.T[:, None, :])
            g_chol -= np.diag(inv_diag)[None]
            return g_mean, g_chol
        wz = z * weights[None, :]
        g_mean = solve_triangular(L, wz.sum(1), lower=True, trans="T", check_finite=False)
        g_chol = (np.tril(solve_triangular(L, wz @ z.T, lower=True, trans="T", check_finite=False))
                  - weights.sum() * np.diag(inv_diag))
        return g_mean, g_chol

    def _spec_fields(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "cov": self.cov.tolist(), "chol": self.chol.tolist()}

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "Gaussian":
        # the stored factor, when present, is what sampling uses: refactorising cov would
        # change the last bits and break bit-for-bit reproducibility of samples
        return cls(doc.get("mean"), doc.get("chol"), cov=doc.get("cov"))
