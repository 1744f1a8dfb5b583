import numpy as np
import pytest
import torch

from lwl.models.deeponet import PRESETS, DeepONet, DeepONetRegressor
from tests.conftest import devices


def _averaging_operator(n_samples, J=16, seed=0):
    """u -> (x -> integral_0^x u): a linear operator on functions sampled at J sensors."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, J)
    coef = rng.standard_normal((n_samples, 4))
    U = sum(coef[:, k:k + 1] * np.cos(k * np.pi * x)[None] for k in range(4))
    Y = np.cumsum(U, 1) / J
    return U, Y, x


@pytest.mark.slow
@pytest.mark.parametrize("device", devices())
def test_learns_a_linear_operator_and_is_reproducible(device):
    U, Y, x = _averaging_operator(300)
    kw = dict(branch=[16, 64, 64, 32], trunk=[1, 64, 64, 32], lr=3e-3, max_iters=1500, patience=300, seed=1,
              device=device)
    model = DeepONetRegressor(**kw).fit(U, Y, x)
    Ut, Yt, _ = _averaging_operator(100, seed=5)
    err = np.linalg.norm(model.predict(Ut) - Yt) / np.linalg.norm(Yt)
    assert err < 0.05, err
    assert model.history_[-1][0] < model.history_[0][0] / 100
    again = DeepONetRegressor(**kw).fit(U, Y, x)
    if device == "cpu":
        np.testing.assert_array_equal(again.predict(Ut), model.predict(Ut))


@pytest.mark.slow
def test_early_stopping_keeps_the_best_weights():
    U, Y, x = _averaging_operator(100)
    model = DeepONetRegressor([16, 8, 8], [1, 8, 8], lr=1e-1, max_iters=5000, patience=20, min_delta=1e-3).fit(U, Y, x)
    assert model.n_iter_ < 5000
    best = min(e for _, e in model.history_)
    assert model.best_validation_error_ == pytest.approx(best, abs=1e-3 + 1e-12)


def test_architecture_presets_and_init():
    for name, p in PRESETS.items():
        net = DeepONet(p["branch"], p["trunk"])
        out = net(torch.zeros(2, p["branch"][0]), torch.zeros(3, p["trunk"][0]))
        assert out.shape == (2, 3), name
    w = DeepONet([500, 400, 10], [2, 10])
    std = w.branch[0].weight.std().item()
    assert std == pytest.approx(np.sqrt(2 / (500 + 400)), rel=0.05)  # Glorot normal
    with pytest.raises(ValueError, match="same width"):
        DeepONet([4, 8], [1, 9])


def test_query_batches_normalisation_and_weights_round_trip():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((8, 12)) / 4
    U = rng.standard_normal((200, 8))
    z = np.linspace(0, 1, 12)[:, None]
    m = DeepONetRegressor([8, 32, 16], [1, 32, 16], max_iters=300, query_batch=4, validation_fraction=0.0,
                          seed=1, device="cpu").fit(U, U @ A, z)
    assert m.history_[-1][0] < 0.85 * m.history_[0][0]  # training on output-point subsets descends
    n = DeepONetRegressor([8, 32, 16], [1, 32, 16], max_iters=20, normalize=True, validation_fraction=0.2,
                          validation_every=5, seed=1, device="cpu").fit(U, U @ A, z)
    assert n.net_.y_scale.item() != 1.0 and n.net_.u_scale.item() != 1.0  # set at the first fit...
    again = DeepONetRegressor([8, 32, 16], [1, 32, 16], device="cpu").set_weights(n.get_weights(), z)
    np.testing.assert_array_equal(again.predict(U[:3]), n.predict(U[:3]))  # ...and saved with the weights


def test_the_model_document_round_trips_through_json_and_refuses_bad_weights():
    """The served DeepONet (GET /v1/jobs/{id}/model): widths, query points and float32 weights
    as base64 in a JSON document; lwl.models.from_spec rebuilds the same predictions."""
    import json

    from lwl.models import from_spec

    rng = np.random.default_rng(0)
    U = rng.standard_normal((50, 8))
    z = np.linspace(0, 1, 12)[:, None]
    m = DeepONetRegressor([8, 16, 8], [1, 16, 8], max_iters=30, normalize=True, validation_fraction=0.0,
                          seed=2, device="cpu").fit(U, U @ (rng.standard_normal((8, 12)) / 4), z)
    doc = json.loads(json.dumps(m.to_spec()))
    assert doc["model"] == "deeponet" and doc["kernel"] is None and doc["branch"] == [8, 16, 8]
    loaded = from_spec(doc)
    mean, std = loaded.predict(U[:4], return_std=True)
    assert std is None and mean.shape == (4, 12)
    np.testing.assert_array_equal(mean, m.predict(U[:4]))  # float32 weights, written exactly
    bad = json.loads(json.dumps(doc))
    bad["weights"]["bias"]["shape"] = [2]
    with pytest.raises(ValueError, match="weights.bias.shape"):
        from_spec(bad)
    bad = json.loads(json.dumps(doc))
    bad["weights"]["bias"]["data"] = "!!" + bad["weights"]["bias"]["data"]
    with pytest.raises(ValueError, match="weights.bias.data"):
        from_spec(bad)
    bad = json.loads(json.dumps(doc))
    bad["query_points"] = [[0.0, 1.0]]
    with pytest.raises(ValueError, match="query_points"):
        from_spec(bad)
    with pytest.raises(ValueError, match="training_set"):
        m.to_spec(training_set=True)
