"""The verdict at equal labels with the job's model (lwl.evaluation.equal_labels, issue #46): every
comparator trained with the gp and its own hyperparameter fit, the NIPV anchor with the fitted
GP's kernel, and lwl's KRR pipeline stated beside."""

import copy

import numpy as np
import pytest

from lwl import run_job
from lwl.evaluation.equal_labels import equal_labels
from lwl.evaluation.metrics import krr_error, relative_ood_error
from lwl.evaluation.nipv import gp_kernel, integrated_variance, nipv_select
from lwl.models import GaussianProcess
from lwl.q_samples import MetaTestSamples
from lwl.spec import parse_job_spec
from lwl.streams import STREAM_AUDIT

GP = {"name": "gp", "restarts": 0, "max_fit_points": 100}


@pytest.fixture
def gp_job(small_spec) -> dict:
    s = copy.deepcopy(small_spec)
    s["budget"] = 200
    s["algorithm"] = {"name": "bilevel"}
    s["model"] = dict(GP)
    return s


def _q(spec):
    return MetaTestSamples.from_spec(spec.test_distributions, spec.seed)


def test_every_comparator_is_the_gp_refitted_to_its_own_labels(gp_job):
    from lwl.evaluation.baselines import mixture

    spec = parse_job_spec(gp_job)
    oracle, q = spec.oracle.build(), _q(spec)
    rng = np.random.default_rng(0)
    X = np.concatenate(q.validation)[rng.choice(200, 150, replace=False)]
    y = np.asarray(oracle.label(X))
    ev = equal_labels(spec, q, X, y, oracle, draws=1, baselines=["mixture"], anchor=False)
    test_x = np.concatenate(q.heldout)
    test_y = np.asarray(oracle.label(test_x))
    a = q.point_weights(q.heldout, q.weights)

    def err(train_x, train_y):
        gp = GaussianProcess("auto", restarts=0, max_fit_points=100, random_state=spec.seed).fit(train_x, train_y)
        return relative_ood_error(gp.predict(test_x), test_y, a)

    assert ev["model"] == "gp"
    np.testing.assert_allclose(ev["err"]["optimized"], err(X, y), rtol=1e-10)
    xm = mixture(q).sample(150, [spec.seed, STREAM_AUDIT, 0])
    np.testing.assert_allclose(ev["err"]["mixture"], err(xm, np.asarray(oracle.label(xm))), rtol=1e-10)


def test_the_anchor_with_a_fitted_gp_selects_by_its_posterior_variance(gp_job):
    spec = parse_job_spec(gp_job)
    oracle, q = spec.oracle.build(), _q(spec)
    X = np.concatenate(q.validation)[:120]
    gp = GaussianProcess("matern52", restarts=0).fit(X, np.asarray(oracle.label(X)))
    kernel, noise = gp_kernel(gp)
    pool, z = np.concatenate(q.validation), np.concatenate(q.heldout)[:200]
    w = np.full(len(z), 1 / len(z))
    order, integrated = nipv_select(pool, z, w, 15, kernel=kernel, lengthscale=0.0, noise=noise)
    for t in (0, 7, 14):
        direct = integrated_variance(pool[order[:t + 1]], z, w, kernel=kernel, lengthscale=0.0, noise=noise)
        np.testing.assert_allclose(integrated[t], direct, rtol=1e-8)
    # the GP's own posterior variance s^2 k - ..., with noise sigma_n^2, is s^2 times the one NIPV reads
    post = gp.output_scale_[0] * integrated_variance(pool[order], z, w, kernel=kernel, lengthscale=0.0, noise=noise)
    fitted = GaussianProcess("matern52", lengthscale=gp.lengthscale_[0], output_scale=gp.output_scale_[0],
                             noise=gp.noise_[0], optimize=False).fit(pool[order], np.zeros(len(order)))
    np.testing.assert_allclose(post, w @ fitted.predict(z, return_std=True, std="latent")[1] ** 2, rtol=1e-6)


@pytest.mark.slow
def test_a_gp_job_states_the_krr_pipeline_beside_its_verdict(gp_job):
    gp_job["evaluation"] = {"baselines": ["mixture"], "draws": 1}
    res = run_job(copy.deepcopy(gp_job))
    pipe = res["verdict"]["krr_pipeline"]
    assert res["verdict"]["model"] == "gp" and set(res["verdict"]["outcomes"]) == {"mixture", "nipv"}
    np.testing.assert_allclose(pipe["model_gain"], pipe["err_krr"] / pipe["err_gp"])
    np.testing.assert_allclose(pipe["data_gain"], pipe["err_gp"] / res["verdict"]["err"])
    # the pipeline is the same job with model krr (lengthscale chosen by lwl), its KRR's Err recomputed
    krr_job = copy.deepcopy(gp_job)
    krr_job["model"] = {"name": "krr"}
    krr_job["evaluation"] = {"enabled": False}
    krr = run_job(krr_job)
    spec = parse_job_spec(krr["spec"])
    q, oracle = _q(spec), spec.oracle.build()
    test_x = np.concatenate(q.heldout)
    err = krr_error(np.asarray(krr["training_set"]["inputs"]), np.asarray(krr["training_set"]["labels"]), test_x,
                    np.asarray(oracle.label(test_x)), q.point_weights(q.heldout, q.weights), kernel="squared_exponential",
                    lengthscale=spec.model.lengthscale, ridge=spec.evaluation.ridge)
    np.testing.assert_allclose(pipe["err_krr"], err, rtol=1e-10)
    assert pipe["labels_used"] == krr["labels_used"] <= gp_job["budget"]
