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


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kernel", ["squared_exponential", "laplace"])
def test_blocked_passes_match_one_dense_matrix(kernel, device, monkeypatch):
    """Predictions and the adjoint's right-hand side, formed over many kernel blocks, equal the
    same products with the whole (N, m) matrix (blocks of 64 columns: 5 blocks, the last partial)."""
    import lwl.models.krr as krr

    monkeypatch.setitem(krr.BLOCK_ELEMENTS, "cpu", 1)
    monkeypatch.setitem(krr.BLOCK_ELEMENTS, "cuda", 1)
    rng = np.random.default_rng(1)
    X, V = rng.standard_normal((50, 2)), 1.5 * rng.standard_normal((300, 2))
    model = KernelRidge(kernel, 0.8, sigma2=1e-3, device=device).fit(X, np.cos(X).prod(1))
    assert krr.block_columns(model.device_, 50) == 64
    K = model.kernel_matrix(X, V).cpu().numpy()
    beta = model.coef_.cpu().numpy()
    yv, a = np.cos(V).prod(1), rng.uniform(size=300)
    np.testing.assert_allclose(model.predict(V), K.T @ beta, rtol=1e-12, atol=1e-14)
    t = lambda z: torch.tensor(z, dtype=torch.float64, device=model.device_)  # noqa: E731
    residual, rhs = model.adjoint_pass(t(V), t(yv), t(a))
    np.testing.assert_allclose(residual.cpu().numpy(), yv - K.T @ beta, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(rhs.cpu().numpy(), K @ (a * (yv - K.T @ beta)), rtol=1e-10, atol=1e-13)
