import json

import numpy as np
import pytest
import torch

from lwl.measures import Empirical, Gaussian, LogSineParticles, Mixture, UniformBox, from_spec, gaussian_log_prob


def _gauss(d=3, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, d))
    return Gaussian(rng.standard_normal(d), cov=A @ A.T + 0.5 * np.eye(d))


def test_score_matches_autograd_of_log_density():
    g = _gauss(4)
    x = g.sample(7, 1)
    m = torch.tensor(g.mean, requires_grad=True)
    L = torch.tensor(g.chol, requires_grad=True)
    w = np.linspace(-1, 2, 7)
    (gaussian_log_prob(torch.tensor(x), m, L) * torch.tensor(w)).sum().backward()
    g_mean, g_chol = g.score(x, weights=w)
    np.testing.assert_allclose(g_mean, m.grad.numpy(), rtol=1e-10, atol=1e-12)
    # the parameter is lower triangular: only that part of the autograd gradient is a score
    np.testing.assert_allclose(g_chol, np.tril(L.grad.numpy()), rtol=1e-10, atol=1e-12)
    # per-sample scores sum to the weighted one
    per_m, per_L = g.score(x)
    np.testing.assert_allclose(np.tensordot(w, per_m, 1), g_mean, rtol=1e-10)
    np.testing.assert_allclose(np.tensordot(w, per_L, 1), g_chol, rtol=1e-10, atol=1e-12)


def test_log_prob_matches_scipy():
    from scipy.stats import multivariate_normal

    g = _gauss(3)
    x = g.sample(5, 2)
    np.testing.assert_allclose(g.log_prob(x), multivariate_normal(g.mean, g.cov).logpdf(x), rtol=1e-10)


def test_cholesky_diagonal_kept_positive():
    g = Gaussian([0.0, 0.0], np.array([[-1.0, 0.0], [0.3, 0.0]]))
    assert np.all(np.diag(g.chol) >= 1e-7)
    assert g.chol[0, 1] == 0.0


@pytest.mark.parametrize("measure", [
    _gauss(3),
    UniformBox([0, -1, 2], [1, 1, 3]),
    Empirical(np.arange(12.0).reshape(4, 3)),
    Mixture([_gauss(3, 1), UniformBox.unit(3)], [0.3, 0.7]),
])
def test_spec_round_trip_reproduces_samples_bit_for_bit(measure):
    doc = json.loads(json.dumps(measure.to_spec()))  # through JSON text, as a client sees it
    assert doc["kind"] == "lwl.distribution" and doc["version"] == 1
    again = from_spec(doc)
    a, b = measure.sample(500, 42), again.sample(500, 42)
    assert a.dtype == np.float64 and a.shape == (500, 3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, measure.sample(500, 43))


def test_gaussian_spec_carries_mean_and_cov_lists():
    doc = _gauss(2).to_spec()
    assert isinstance(doc["mean"], list) and isinstance(doc["cov"][0], list)
    np.testing.assert_allclose(np.array(doc["cov"]), _gauss(2).cov)


def test_sampling_moments():
    g = _gauss(3)
    x = g.sample(200_000, 0)
    np.testing.assert_allclose(x.mean(0), g.mean, atol=0.03)
    np.testing.assert_allclose(np.cov(x, rowvar=False), g.cov, atol=0.08)
    mix = Mixture([Gaussian([0.0], cov=[[1.0]]), Gaussian([4.0], cov=[[0.25]])], [0.25, 0.75])
    y = mix.sample(200_000, 1)
    m, c = mix.mean_and_cov()
    assert abs(y.mean() - m[0]) < 0.02 and abs(y.var() - c[0, 0]) < 0.05


@pytest.mark.parametrize("doc,field", [
    ({"family": "nope"}, "family"),
    ({"family": "gaussian", "mean": [0, 0], "cov": [[1, 2], [2, 1]]}, "cov"),
    ({"family": "gaussian", "mean": [0, float("nan")], "cov": [[1, 0], [0, 1]]}, "mean"),
    ({"family": "uniform", "low": [0], "high": [0]}, "high"),
    ({"kind": "lwl.distribution", "version": 99, "family": "uniform"}, "version"),
])
def test_bad_specs_name_the_field(doc, field):
    with pytest.raises(ValueError, match=field):
        from_spec(doc)


def test_sampling_requires_a_seed():
    with pytest.raises(ValueError, match="seed"):
        UniformBox.unit(2).sample(3, None)


def test_log_sine_particles_spec_round_trip_and_fields():
    c = np.zeros((3, 2, 2))
    c[1, 0, 0] = 1.0
    m = LogSineParticles(c, 5)
    x = np.linspace(0, 1, 5)
    a = m.fields()
    np.testing.assert_allclose(a[0], 1.0)
    np.testing.assert_allclose(a[1], np.exp(2 * np.outer(np.sin(np.pi * x), np.sin(np.pi * x))).ravel(), atol=1e-12)
    doc = json.loads(json.dumps(m.to_spec()))
    assert doc["family"] == "particles" and doc["modes"] == 2 and doc["grid"] == 5
    np.testing.assert_array_equal(from_spec(doc).sample(7, 3), m.sample(7, 3))  # with replacement, seeded
    for bad, field in (({**doc, "coefficients": [[1.0, 2.0]]}, "coefficients"), ({**doc, "grid": 2}, "grid"),
                       ({k: v for k, v in doc.items() if k != "grid"}, "grid"),
                       ({**doc, "coefficients": [[[float("nan")]]]}, "coefficients")):
        with pytest.raises(ValueError, match=field):
            from_spec(bad)


def test_moment_matched_and_regularised_cholesky():
    from lwl.measures.gaussian import moment_matched, regularised_cholesky

    rng = np.random.default_rng(2)
    x = rng.standard_normal((400, 2)) * [1.0, 3.0] + [5.0, -1.0]
    w = np.full(400, 1 / 400)
    mean, cov = moment_matched(x, w)
    np.testing.assert_allclose(mean, x.mean(0))
    np.testing.assert_allclose(cov, np.cov(x, rowvar=False, bias=True))
    same = np.tile(x[:1], (10, 1))  # rank-deficient samples still give a factor
    L = regularised_cholesky(moment_matched(same, np.full(10, 0.1))[1] + np.outer([1, 0], [1, 0]))
    assert np.all(np.isfinite(L)) and np.all(np.diag(L) > 0)


def test_the_regularised_factor_follows_a_change_of_units():
    """Issue #83: a lab's inputs with spreads 1e-3 and 1e5 (eigenvalues 1e-6 and 1e10) need the
    floor, which on cov itself raised the small input's variance to 100 (1e4 of its own sd's);
    floored on the correlation matrix the factor is the standard one scaled: chol(S C S) = S chol(C).
    A covariance that needs no floor keeps its factor to the last bit."""
    from lwl.measures.gaussian import regularised_cholesky

    C = np.array([[1.0, 0.3], [0.3, 2.0]])
    S = np.diag([1e-3, 1e5])
    L = regularised_cholesky(C)
    w, v = np.linalg.eigh(C)
    assert np.array_equal(L, np.linalg.cholesky((v * w) @ v.T))
    Lp = regularised_cholesky(S @ C @ S)
    np.testing.assert_allclose(Lp, S @ L, rtol=1e-10)
    assert (Lp @ Lp.T)[0, 0] == pytest.approx(1e-6, rel=1e-9)  # the small input keeps its own variance
    # a rank-deficient covariance in those units is floored relative to each input's spread
    D = S @ np.array([[1.0, 1.0], [1.0, 1.0]]) @ S
    Ld = regularised_cholesky(D)
    assert np.all(np.isfinite(Ld)) and np.all(np.diag(Ld) > 0)
    np.testing.assert_allclose(np.diag(Ld @ Ld.T), np.diag(D), rtol=1e-6)
