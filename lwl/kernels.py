"""Positive-definite kernels on R^d (torch, any device).

- ``squared_exponential``: k(x, x') = exp(-||x - x'||^2 / l^2), the paper's convention
  (SM "Model architecture"); the authors' code uses exp(-||x-x'||^2 / (2 s^2)), i.e.
  l = sqrt(2) s. lwl follows the paper.
- ``laplace``: k(x, x') = exp(-||x - x'||_1 / l).
- ``matern52``: k(x, x') = (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r), r = ||x - x'|| / l (R&W eq.
  4.17): the gp model's Matern kernel, isotropic; a gp's posterior mean at its fitted ARD
  lengthscales is KRR with this kernel at l = 1 on inputs divided by them
  (:func:`lwl.models.gp.as_kernel_ridge`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from lwl.registry import KERNELS



def squared_exponential_rows(x: torch.Tensor, lengthscale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """y -> exp(-||x_i - y_j||^2 / l^2) as an (n, m) matrix, with the work on x done once (for
    kernel matrices formed block by block against many y: :class:`lwl.models.KernelRidge`).

    The exponent is one matrix product of augmented vectors,
    [2x, -|x|^2, -1] . [y, 1, |y|^2] / l^2 = -||x - y||^2 / l^2, so the (n, m) block is written
    once and exponentiated in place (about 2x faster than cdist at d = 2; faster than a product
    followed by two broadcast subtractions, which pass over the block twice more).
    """
    s = 1.0 / lengthscale
    xs = x * s
    xn = (xs * xs).sum(1, keepdim=True)
    xa = torch.cat([2.0 * xs, -xn, -torch.ones_like(xn)], 1)
    x_max = float(xn.max().sqrt()) if x.shape[0] else 0.0

    def against(y: torch.Tensor) -> torch.Tensor:
        ys = y * s
        yn = (ys * ys).sum(1, keepdim=True)
        exponent = torch.mm(xa, torch.cat([ys, torch.ones_like(yn), yn], 1).T)
        # Exponents below -700 become -inf so their kernel values are exactly 0: exp of them
        # would be subnormal, and subnormals slow the exp and every later product by 10x or more
        # on x86 (seen as 50 ms iterations once the distribution spreads out). The pass is
        # skipped when ||x - y||^2 <= (max|x| + max|y|)^2 rules such exponents out.
        if x.shape[0] and y.shape[0] and (x_max + float(yn.max().sqrt())) ** 2 > _UNDERFLOW:
            torch.nn.functional.threshold_(exponent, -_UNDERFLOW, -math.inf)
        return exponent.exp_()

    return against


def squared_exponential(x: torch.Tensor, y: torch.Tensor, lengthscale: float) -> torch.Tensor:
    """exp(-||x_i - y_j||^2 / l^2) as an (n, m) matrix (:func:`squared_exponential_rows`)."""
    return squared_exponential_rows(x, lengthscale)(y)


_UNDERFLOW = 700.0  # exp(-708) is the smallest normal double


def laplace(x: torch.Tensor, y: torch.Tensor, lengthscale: float) -> torch.Tensor:
    """exp(-||x_i - y_j||_1 / l) as an (n, m) matrix."""
    return torch.nn.functional.threshold_(torch.cdist(x, y, p=1.0).div_(-lengthscale), -700.0, -math.inf).exp_()


def matern52(x: torch.Tensor, y: torch.Tensor, lengthscale: float) -> torch.Tensor:
    """(1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r), r = ||x_i - y_j|| / l, as an (n, m) matrix."""
    r5 = torch.cdist(x, y).mul_(math.sqrt(5.0) / lengthscale)
    return (1.0 + r5 + r5 * r5 / 3.0).mul_(torch.exp(-r5))


KERNELS.register("squared_exponential", None, squared_exponential, rows=squared_exponential_rows)
KERNELS.register("laplace", None, laplace)
KERNELS.register("matern52", None, matern52)


def get_kernel(name: str) -> Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]:
    """The kernel function registered as ``name`` in :data:`lwl.registry.KERNELS`."""
    if name not in KERNELS:
        raise ValueError(f"kernel: unknown kernel {name!r}; known: {KERNELS.names()}")
    return KERNELS.get(name).build


def kernel_rows(name: str, x: torch.Tensor, lengthscale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """y -> k(x, y) for the kernel ``name``, with x fixed: the kernel's own ``rows`` hook when it
    registered one (work on x done once), else the plain kernel function."""
    rows = KERNELS.get(name).extra.get("rows") if name in KERNELS else None
    if rows is not None:
        return rows(x, lengthscale)
    fn = get_kernel(name)  # raises naming the kernel when it is unknown
    return lambda y: fn(x, y, lengthscale)
