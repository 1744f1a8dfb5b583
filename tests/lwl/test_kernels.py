import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from lwl.kernels import laplace, squared_exponential


def test_squared_exponential_matches_direct_formula():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((7, 3)) * 3, rng.standard_normal((5, 3))
    k = squared_exponential(torch.tensor(x), torch.tensor(y), 1.7).numpy()
    np.testing.assert_allclose(k, np.exp(-cdist(x, y, "sqeuclidean") / 1.7**2), rtol=1e-12, atol=1e-300)


def test_far_points_underflow_to_exact_zero():
    x = torch.zeros(1, 2, dtype=torch.float64)
    y = torch.tensor([[100.0, 0.0]], dtype=torch.float64)
    assert squared_exponential(x, y, 1.0).item() == 0.0
    assert laplace(x, y * 10, 1.0).item() == 0.0


def test_laplace_matches_direct_formula():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4, 2)), rng.standard_normal((6, 2))
    k = laplace(torch.tensor(x), torch.tensor(y), 0.5).numpy()
    np.testing.assert_allclose(k, np.exp(-cdist(x, y, "cityblock") / 0.5), rtol=1e-12)


@pytest.mark.parametrize("name", ["squared_exponential", "laplace"])
def test_kernel_rows_equal_the_kernel_bit_for_bit(name):
    """The prepared-rows form (work on x done once, lwl.models.KernelRidge's blocks) gives the
    kernel function's matrix exactly, far points' underflow to 0 included."""
    from lwl.kernels import get_kernel, kernel_rows

    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 3, dtype=torch.float64, generator=g)
    y = torch.cat([torch.randn(20, 3, dtype=torch.float64, generator=g), torch.full((2, 3), 400.0, dtype=torch.float64)])
    rows = kernel_rows(name, x, 0.7)
    assert torch.equal(rows(y), get_kernel(name)(x, y, 0.7))
    assert torch.equal(rows(y[:5]), get_kernel(name)(x, y[:5], 0.7))
    assert rows(y)[:, -1].max() == 0.0
