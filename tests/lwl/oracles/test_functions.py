import numpy as np
import pytest
import torch

from lwl.oracles import make_oracle, oracle_names
from tests.conftest import devices


def test_registry_names():
    assert {"sobol_g", "friedman1", "friedman2", "kernel_expansion"} <= set(oracle_names())


def test_known_values():
    # Sobol G with a_j = (j-2)/2: at x = 1/2 every factor is a_j / (1 + a_j)
    x = np.full((1, 3), 0.5)
    a = (np.arange(1, 4) - 2) / 2
    assert np.isclose(make_oracle({"name": "sobol_g"}).label(x)[0], np.prod(a / (1 + a)))
    x = np.array([[0.5, 1.0, 0.5, 1.0, 2.0, 9.0]])
    assert np.isclose(make_oracle({"name": "friedman1"}).label(x)[0], 10 * np.sin(np.pi / 2) + 10 + 10)
    x = np.array([[0.01, 0.0, 0.0, 0.0]])  # b = 40 pi, inner = -1/(40 pi)
    want = np.sqrt(1.0 + (1 / (40 * np.pi)) ** 2)
    assert np.isclose(make_oracle({"name": "friedman2"}).label(x)[0], want)


def test_kernel_expansion_is_fixed_by_its_seed():
    a = make_oracle({"name": "kernel_expansion", "params": {"dim": 3, "centres": 50, "seed": 7}})
    b = make_oracle({"name": "kernel_expansion", "params": {"dim": 3, "centres": 50, "seed": 7}})
    c = make_oracle({"name": "kernel_expansion", "params": {"dim": 3, "centres": 50, "seed": 8}})
    x = np.random.default_rng(0).standard_normal((10, 3))
    assert np.array_equal(a.label(x), b.label(x))
    assert not np.allclose(a.label(x), c.label(x))
    # g4 = sum_l c_l k(x, x_l), checked term by term
    direct = sum(cl * np.exp(-np.sum((x - xl) ** 2, 1) / 25.0) for cl, xl in zip(a.coefficients, a.centres))
    np.testing.assert_allclose(a.label(x), direct, rtol=1e-10)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name,params,d", [("sobol_g", {}, 2), ("friedman1", {}, 8), ("friedman2", {}, 5),
                                           ("kernel_expansion", {"dim": 4, "centres": 20}, 4)])
def test_torch_and_numpy_agree(name, params, d, device):
    o = make_oracle({"name": name, "params": params})
    x = np.random.default_rng(1).standard_normal((16, d))
    t = o.label(torch.tensor(x, device=device))
    assert isinstance(t, torch.Tensor) and t.device.type == device
    np.testing.assert_allclose(t.cpu().numpy(), o.label(x), rtol=1e-12)


def test_dimension_checks():
    with pytest.raises(ValueError, match="dimension"):
        make_oracle({"name": "friedman1"}).label(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="oracle.name"):
        make_oracle({"name": "nope"})
    with pytest.raises(ValueError, match="oracle.params"):
        make_oracle({"name": "sobol_g", "params": {"bogus": 1}})


@pytest.mark.parametrize("name,params,d", [("sobol_g", {}, 3), ("friedman1", {}, 5), ("friedman2", {}, 4),
                                          ("kernel_expansion", {"dim": 3, "centres": 20}, 3)])
def test_scale_multiplies_every_label(name, params, d):
    x = np.random.default_rng(0).standard_normal((6, d))
    base = make_oracle({"name": name, "params": params}).label(x)
    scaled = make_oracle({"name": name, "params": {**params, "scale": -1e4}}).label(x)
    np.testing.assert_allclose(scaled, -1e4 * base, rtol=1e-14)
    with pytest.raises(ValueError, match="oracle.params.scale"):
        make_oracle({"name": name, "params": {**params, "scale": 0.0}})
