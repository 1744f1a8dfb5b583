import os
import subprocess
import sys

import numpy as np
import torch

from lwl.measures import Gaussian
from lwl.transport import empirical_w2_squared, gaussian_barycenter, gaussian_w2_squared


def test_gaussian_w2_closed_form_commuting_case():
    # diagonal covariances commute: B^2 = sum (sqrt a - sqrt b)^2
    m1, m2 = np.array([0.0, 1.0]), np.array([2.0, -1.0])
    a, b = np.array([1.0, 4.0]), np.array([9.0, 1.0])
    w2 = gaussian_w2_squared(m1, np.diag(a), m2, np.diag(b))
    assert np.isclose(w2, 8.0 + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))


def test_gaussian_w2_torch_backend_and_gradient():
    m1 = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
    C = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=torch.float64)
    w2 = gaussian_w2_squared(m1, C, torch.zeros(2, dtype=torch.float64), C)
    w2.backward()
    assert torch.allclose(m1.grad, 2 * m1.detach())


def test_barycenter_of_commuting_gaussians():
    means = np.array([[0.0, 0.0], [2.0, 4.0]])
    covs = np.array([np.diag([1.0, 4.0]), np.diag([9.0, 16.0])])
    bary = gaussian_barycenter(means, covs, [0.5, 0.5])
    assert isinstance(bary, Gaussian)
    np.testing.assert_allclose(bary.mean, [1.0, 2.0])
    # commuting case: sqrt of the barycenter covariance is the mean of the square roots
    np.testing.assert_allclose(bary.cov, np.diag([4.0, 9.0]), rtol=1e-6)


def test_empirical_w2_of_shifted_cloud():
    x = np.random.default_rng(0).standard_normal((50, 3))
    assert np.isclose(empirical_w2_squared(x, x + np.array([1.0, 0.0, 2.0])), 5.0)
    assert np.isclose(empirical_w2_squared(x, x[::-1]), 0.0)


def test_pot_loads_only_the_numpy_and_torch_backends():
    """Importing lwl keeps POT from initialising JAX (which would take 75% of a GPU's memory in each
    process) and other array libraries lwl does not use; meaningful where JAX is installed."""
    code = ("import os, lwl.transport, ot; "
            "print(sorted(type(b).__name__ for b in ot.backend.get_backend_list()), "
            "os.environ['POT_BACKEND_DISABLE_JAX'])")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POT_BACKEND_DISABLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['NumpyBackend',", "'TorchBackend']", "1"]
