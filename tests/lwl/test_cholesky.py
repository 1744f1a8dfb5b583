import numpy as np
import pytest
import torch

from lwl.cholesky import BLOCK, BLOCKED_MIN, cholesky_inplace


@pytest.mark.parametrize("n", [BLOCKED_MIN - 1, BLOCKED_MIN, 3 * BLOCK + 17])
def test_blocked_factor_equals_lapack_to_round_off(n):
    """The blocked factorisation (n >= BLOCKED_MIN, a last block of 17 rows) and LAPACK's give
    the same lower factor of a kernel-like matrix, and L L^T reproduces it."""
    g = torch.Generator().manual_seed(n)
    X = torch.randn(n, 3, dtype=torch.float64, generator=g)
    A = torch.exp(-torch.cdist(X, X) ** 2) + 1e-3 * n * torch.eye(n, dtype=torch.float64)
    L, ok = cholesky_inplace(A.clone())
    assert ok
    ref = torch.linalg.cholesky(A)
    assert torch.allclose(L, ref, rtol=0, atol=1e-12)
    assert torch.equal(L, torch.tril(L))
    assert float((L @ L.mT - A).abs().max()) < 1e-12 * float(A.abs().max())


def test_not_positive_definite_is_reported():
    """A matrix with a negative eigenvalue in its last block is refused, as LAPACK refuses it."""
    n = 2 * BLOCK + 200
    A = torch.eye(n, dtype=torch.float64)
    A[-1, -1] = -1.0
    _, ok = cholesky_inplace(A.clone())
    assert not ok
    assert int(torch.linalg.cholesky_ex(A)[1]) != 0


def test_krr_fit_refuses_an_indefinite_matrix():
    from lwl.models import KernelRidge

    X = np.zeros((600, 2))  # 600 equal points and a negative ridge: K - 0.6 I is indefinite
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        KernelRidge("squared_exponential", 1.0, sigma2=-1e-3).fit(X, np.ones(600))
