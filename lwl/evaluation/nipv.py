"""Active learning by integrated posterior variance (IMSE / NIPV): the anchor a budgeted design
is judged against (docs/method/budgets.md "Designs for a label budget").

With the kernel k of the KRR model read as a Gaussian-process prior and the ridge as noise
variance s^2 (KRR's system K + N sigma^2 I = K + s^2 I), the posterior variance after labelling
the set S is k_S(x, x) = k(x, x) - k(x, S)(K_SS + s^2 I)^{-1} k(S, x). Greedy NIPV (BoTorch's
``qNegIntegratedPosteriorVariance``, here one point at a time) adds, from a pool of candidates,
the point that lowers the integrated variance sum_j a_j k_S(z_j, z_j) over Q's points z_j
(weights a_j) most; adding x lowers it by

    sum_j a_j k_S(x, z_j)^2 / (k_S(x, x) + s^2).

The posterior covariance is kept as k_S(u, v) = k(u, v) - sum_t phi_t(u) phi_t(v) with
phi_t(u) = k_{t-1}(u, x_t) / sqrt(k_{t-1}(x_t, x_t) + s^2) (a pivoted Cholesky factor), so each
pick costs O(P (M + t)) for P pool and M integration points. The variance does not depend on
the labels, so with the kernel fixed a selection in rounds of b points is the same as one point
at a time: the rounds only matter to a lab, not to the choice.
"""

from __future__ import annotations

import numpy as np
import torch

from lwl.kernels import get_kernel


def _k(kernel, x: torch.Tensor, y: torch.Tensor, lengthscale: float) -> torch.Tensor:
    """k(x, y): a registered kernel by name at ``lengthscale``, or a callable (x, y) -> matrix
    with unit diagonal (a fitted GP's correlation, :func:`gp_kernel`)."""
    if callable(kernel):
        return kernel(x, y)
    return get_kernel(kernel)(x, y, lengthscale)


def gp_kernel(gp) -> tuple:
    """(kernel, noise) of NIPV for a fitted :class:`lwl.models.GaussianProcess` (its first
    output): the correlation k_ell (unit diagonal) and the noise relative to the output scale,
    sigma_n^2 / s^2. The posterior variance of s^2 k_ell with noise sigma_n^2 is s^2 times that
    of k_ell with noise sigma_n^2 / s^2, so the greedy choice is the same."""
    from lwl.models.gp import ard_kernel

    ell = torch.as_tensor(np.asarray(gp.lengthscale_[0], dtype=np.float64))
    # centred at the GP's inputs' mean, as the GP forms it: r^2 = |x|^2 + |y|^2 - 2 x.y cancels far from the origin
    loc = torch.as_tensor(np.asarray(gp.standardisation_.x_loc, dtype=np.float64))
    return ((lambda x, y: ard_kernel(gp.kernel_, x - loc.to(x), y - loc.to(y), ell)),
            float(gp.noise_[0] / gp.output_scale_[0]))


def nipv_select(pool: np.ndarray, points: np.ndarray, weights: np.ndarray, n: int, *, kernel,
                lengthscale: float, noise: float, chosen: np.ndarray | None = None) -> tuple[np.ndarray, list[float]]:
    """Greedy NIPV: ``n`` indices into ``pool`` in the order picked, and the integrated posterior
    variance sum_j a_j k_S(z_j, z_j) after each pick. ``points``/``weights``: the integration
    points z_j and weights a_j (Q's samples, w_k / M_k); ``noise``: s^2; ``chosen``: indices
    already labelled (conditioned on first, not returned)."""
    x = torch.as_tensor(np.asarray(pool, dtype=np.float64))
    z = torch.as_tensor(np.asarray(points, dtype=np.float64))
    a = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    P = x.shape[0]
    n = min(n, P - (0 if chosen is None else len(chosen)))
    cross = _k(kernel, x, z, lengthscale)  # k_S(pool, z), updated in place
    diag = torch.ones(P, dtype=torch.float64)  # k_S(u, u); k(u, u) = 1 for both kernels
    zdiag = torch.ones(z.shape[0], dtype=torch.float64)
    num = (cross * cross) @ a  # sum_j a_j k_S(u, z_j)^2, updated with each pick
    total = n + (0 if chosen is None else len(chosen))
    factors = torch.zeros((total, P), dtype=torch.float64)  # phi_t over the pool, row t
    count = 0
    taken = torch.zeros(P, dtype=torch.bool)
    order: list[int] = []
    integrated: list[float] = []

    def add(i: int) -> None:
        nonlocal count, diag, zdiag, num
        f = factors[:count]
        col = _k(kernel, x, x[i:i + 1], lengthscale)[:, 0] - f.T @ f[:, i]  # k_S(pool, x_i)
        scale = torch.sqrt(diag[i] + noise)
        phi = col / scale
        phi_z = cross[i] / scale
        # num after the rank-one update C <- C - phi phi_z^T, then the update itself in place
        num = num - 2.0 * phi * (cross @ (a * phi_z)) + phi * phi * float(a @ (phi_z * phi_z))
        cross.addr_(phi, phi_z, alpha=-1.0)
        diag = diag - phi * phi
        zdiag = zdiag - phi_z * phi_z
        factors[count] = phi
        count += 1
        taken[i] = True

    for i in (chosen if chosen is not None else []):
        add(int(i))
    for _ in range(n):
        gain = num / (diag + noise)
        gain[taken] = -torch.inf
        i = int(torch.argmax(gain))
        add(i)
        order.append(i)
        integrated.append(float(a @ zdiag))
    return np.asarray(order, dtype=np.int64), integrated


def integrated_variance(train: np.ndarray, points: np.ndarray, weights: np.ndarray, *, kernel: str,
                        lengthscale: float, noise: float) -> float:
    """sum_j a_j k_S(z_j, z_j) computed directly, k_S the posterior covariance given ``train``
    (the check of :func:`nipv_select`)."""
    x = torch.as_tensor(np.asarray(train, dtype=np.float64))
    z = torch.as_tensor(np.asarray(points, dtype=np.float64))
    K = _k(kernel, x, x, lengthscale) + noise * torch.eye(x.shape[0], dtype=torch.float64)
    kz = _k(kernel, x, z, lengthscale)
    post = 1.0 - (kz * torch.linalg.solve(K, kz)).sum(0)
    return float(torch.as_tensor(np.asarray(weights, dtype=np.float64)) @ post)
