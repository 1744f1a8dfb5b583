import numpy as np
import pytest
import torch

from lwl.models import KernelRidge
from tests.conftest import devices


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kernel", ["squared_exponential", "laplace"])
def test_krr_matches_dense_solve(kernel, device):
    rng = np.random.default_rng(0)
    X, Xt = rng.standard_normal((40, 3)), rng.standard_normal((25, 3))
    y = np.sin(X).sum(1)
    model = KernelRidge(kernel, 1.3, sigma2=1e-4, device=device).fit(X, y)
    Kxx = model.kernel_matrix(X, X).cpu().numpy()
    beta = np.linalg.solve(Kxx + 40 * 1e-4 * np.eye(40), y)
    np.testing.assert_allclose(model.coef_.cpu().numpy(), beta, rtol=1e-8)
    np.testing.assert_allclose(model.predict(Xt), model.kernel_matrix(Xt, X).cpu().numpy() @ beta, rtol=1e-8)
    # the stored factor solves the adjoint system of the same matrix
    rhs = rng.standard_normal(40)
    np.testing.assert_allclose(model.solve(torch.tensor(rhs)).cpu().numpy(),
                               np.linalg.solve(Kxx + 0.004 * np.eye(40), rhs), rtol=1e-8)


def test_krr_interpolates_with_tiny_ridge():
    X = np.linspace(-1, 1, 15)[:, None]
    model = KernelRidge("squared_exponential", 0.5, sigma2=1e-12).fit(X, X[:, 0] ** 2)
    np.testing.assert_allclose(model.predict(X), X[:, 0] ** 2, atol=1e-5)
