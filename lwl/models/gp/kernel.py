"""The ARD kernels of lwl's Gaussian process: the kernel algebra apart from the model, as
scikit-learn keeps ``kernels.py`` apart from ``_gpr.py``.

Prior f ~ GP(c, s^2 k_ell), observations y = f(x) + eps, eps ~ N(0, sigma_n^2), with an ARD
kernel (one lengthscale per input), Rasmussen & Williams (2006) conventions, as scikit-learn's
``RBF`` and ``Matern(nu=2.5)``:

- ``squared_exponential``: k(x, x') = exp(-r^2 / 2),
- ``matern52``: k(x, x') = (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r),

with r^2 = sum_d (x_d - x'_d)^2 / ell_d^2. (lwl's KRR kernel of the paper, exp(-||x-x'||^2 / l^2),
has no 1/2: an isotropic GP lengthscale ell is the KRR l / sqrt(2).)

Hyperparameters are carried as theta = (log ell_1..ell_d, log s^2, log sigma_n^2) (ARD lengthscales,
output scale, noise variance): :func:`split_theta` and :func:`theta_scales` read that layout, the
one place that knows it.
"""

from __future__ import annotations

import numpy as np
import torch

GP_KERNELS = ("squared_exponential", "matern52")
KERNEL_BLOCK_ELEMENTS = 1 << 24  # elements of one block of rows of the Matern kernel's in-place evaluation (128 MB)


def split_theta(theta):
    """(log ell, log s^2, log sigma_n^2) of theta = (log ell_1..ell_d, log s^2, log sigma_n^2): views
    of an array or a tensor."""
    d = len(theta) - 2
    return theta[:d], theta[d], theta[d + 1]


def theta_scales(theta: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(ell, s^2, sigma_n^2) of log theta (numpy): the lengthscales an array, the others floats."""
    log_ell, log_s2, log_noise = split_theta(theta)
    return np.exp(log_ell), float(np.exp(log_s2)), float(np.exp(log_noise))


def unknown_kernel(kind, known=GP_KERNELS) -> ValueError:
    """The error that names an unknown kernel and the known ones."""
    return ValueError(f"kernel: unknown GP kernel {kind!r}; known: {list(known)}")


def ard_kernel(kind: str, x: torch.Tensor, y: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
    """k_ell(x_i, y_j) (unit output scale) as an (n, m) matrix; differentiable in ``lengthscale``."""
    if not (torch.is_grad_enabled() and lengthscale.requires_grad):
        return _ard_kernel_in_place(kind, x, y, lengthscale)
    xs, ys = x / lengthscale, y / lengthscale
    # |x|^2 + |y|^2 - 2 x.y: one product instead of an (n, m, d) difference (memory); clamped at 0
    # against round-off (the clamp also passes no gradient at r = 0, where sqrt's would be infinite)
    r2 = ((xs * xs).sum(1)[:, None] + (ys * ys).sum(1)[None, :] - 2.0 * xs @ ys.T).clamp_min(0.0)
    if kind == "squared_exponential":
        return torch.exp(-0.5 * r2)
    if kind == "matern52":
        r5 = torch.sqrt(5.0 * r2.clamp_min(1e-300))
        return (1.0 + r5 + r5 * r5 / 3.0) * torch.exp(-r5)
    raise unknown_kernel(kind)


def _ard_kernel_in_place(kind: str, x: torch.Tensor, y: torch.Tensor, lengthscale: torch.Tensor) -> torch.Tensor:
    """:func:`ard_kernel` without autograd, every elementwise step in place on the one (n, m)
    matrix: at n = m = 8,000 each temporary is 512 MB, and the out-of-place version spent more
    time allocating them than the Cholesky factorisation took (a budgeted job at 8,000 labels)."""
    xs, ys = x / lengthscale, y / lengthscale
    # r^2 = (|x|^2 + |y|^2) - 2 x.y in ard_kernel's order of operations (the same round-off)
    k = (xs * xs).sum(1)[:, None] + (ys * ys).sum(1)[None, :]
    k.addmm_(xs, ys.T, alpha=-2.0).clamp_min_(0.0)
    if kind == "squared_exponential":
        return k.mul_(-0.5).exp_()
    if kind == "matern52":
        r5 = k.mul_(5.0).sqrt_()
        # (1 + r5 + r5^2 / 3) exp(-r5) by blocks of rows: its two temporaries are a block each, not two more
        # n x n matrices (at 20,000 points 3.2 GB apiece); elementwise, so the numbers are those of one pass
        rows = max(1, KERNEL_BLOCK_ELEMENTS // max(r5.shape[1], 1))
        for i in range(0, r5.shape[0], rows):
            b = r5[i:i + rows]
            e = torch.exp(-b)
            b.mul_(b / 3.0 + 1.0).add_(1.0).mul_(e)
        return r5
    raise unknown_kernel(kind)

