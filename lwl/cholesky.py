"""Cholesky factorisation of the KRR matrix, A = L L^T, fast on one CPU core.

On this project's CPUs LAPACK's ``potrf`` (MKL in torch, OpenBLAS in scipy) runs at about a
quarter of the machine's matrix-product speed for N = 1,024 (18-20 ms against 32 ms for a whole
1,024^3 product). The factorisation here is the textbook blocked right-looking algorithm on
the upper factor U = L^T, so every block it touches is a contiguous row panel of the row-major
matrix: for each diagonal block k,

    U_kk = chol(A_kk)^T,   U_k,>k = U_kk^{-T} A_k,>k,   A_j,>=j -= U_k,j^T U_k,>=j  (j > k),

with LAPACK for the small diagonal blocks, one triangular solve per panel and one product per
trailing row block (1.5x faster than ``torch.linalg.cholesky`` at N = 1,024, 1.3x at 4,096;
bench/bilevel.py). The same arithmetic in another order: results agree to round-off (tests).
Small matrices and GPUs (cuSOLVER) use ``torch.linalg.cholesky_ex``.
"""

from __future__ import annotations

import torch

BLOCK = 192  # diagonal block size: fastest of 128-384 at N = 1,024-4,096 on one core
BLOCKED_MIN = 512  # below this LAPACK's own factorisation is as fast


def cholesky_inplace(A: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(L, ok): the lower Cholesky factor of the symmetric matrix ``A``, overwriting ``A``
    (L is a transposed view of it on a CPU); ``ok`` is False when A is not positive definite
    (L is then meaningless)."""
    n = A.shape[0]
    if A.device.type != "cpu" or n < BLOCKED_MIN:
        L, info = torch.linalg.cholesky_ex(A)
        return L, int(info) == 0
    U = A
    for k in range(0, n, BLOCK):
        e = min(k + BLOCK, n)
        Lkk, info = torch.linalg.cholesky_ex(U[k:e, k:e])
        if int(info) != 0:
            return U.mT, False
        U[k:e, k:e] = Lkk.mT
        if e == n:
            break
        panel = torch.linalg.solve_triangular(Lkk, U[k:e, e:], upper=False)  # U_kk^{-T} A_k,>k
        U[k:e, e:] = panel
        for j in range(e, n, BLOCK):  # the trailing matrix, upper part only, one row block at a time
            f = min(j + BLOCK, n)
            U[j:f, j:].addmm_(panel[:, j - e:f - e].mT, panel[:, j - e:], alpha=-1.0)
    return U.triu_().mT, True
