"""The numbers behind a result's pictures (lwl.views), checked against direct computations."""

from __future__ import annotations

import numpy as np
import pytest

from lwl.measures import Gaussian, KLEGaussian, Mixture
from lwl.q_samples import MetaTestSamples
from lwl.views import design_views, fields_view, projection_view


def q_samples(dim=3, seed=0):
    rng = np.random.default_rng(seed)
    shift = np.zeros(dim)
    shift[0] = 4.0
    members = [rng.standard_normal((400, dim)) * np.linspace(3.0, 1.0, dim),
               rng.standard_normal((400, dim)) * 0.5 + shift]
    return MetaTestSamples(members, np.array([0.5, 0.5]), 200)


def test_projection_is_q_principal_plane_and_moments_project():
    q = q_samples()
    design = Gaussian([1.0, 2.0, 3.0], cov=np.diag([1.0, 2.0, 0.5]))
    v = projection_view(design, q)
    pts = np.concatenate(q.validation)
    a = q.point_weights(q.validation, q.weights)
    centre = a @ pts
    cq = ((pts - centre) * a[:, None]).T @ (pts - centre)
    vals, vecs = np.linalg.eigh(cq)
    basis = vecs[:, ::-1][:, :2]
    # the design's projected covariance is B^T C B (up to the sign of each principal direction)
    want = basis.T @ design.cov @ basis
    got = np.array(v["design"]["cov"])
    assert np.allclose(np.abs(got), np.abs(want), rtol=1e-3)
    assert np.allclose(np.abs(v["design"]["mean"]), np.abs((design.mean - centre) @ basis), rtol=1e-3, atol=1e-4)
    assert np.allclose(v["explained"], vals[::-1][:2] / vals.sum(), rtol=1e-3)
    assert np.allclose(v["heatmaps"]["q"], cq, rtol=1e-3, atol=1e-6)
    assert len(v["members"]) == 2 and len(v["members"][0]["points"]) == 150
    m0 = np.array(v["members"][0]["mean"])
    assert np.allclose(np.abs(m0), np.abs((q.validation[0].mean(0) - centre) @ basis), rtol=1e-3, atol=1e-4)


def test_projection_of_a_mixture_and_of_one_dimension():
    q = q_samples(dim=1)
    mix = Mixture([Gaussian([0.0], cov=[[1.0]]), Gaussian([4.0], cov=[[0.25]])], [0.3, 0.7])
    v = projection_view(mix, q)
    mean, cov = mix.mean_and_cov()
    assert np.allclose(np.abs(v["design"]["mean"][0]), abs(mean[0] - np.concatenate(q.validation).mean()), rtol=1e-2)
    assert v["design"]["cov"][1] == [0.0, 0.0]  # the plane of a line: the second axis is empty
    assert np.isclose(v["design"]["cov"][0][0], cov[0, 0], rtol=1e-3)


def test_fields_of_a_kle_design():
    kle = KLEGaussian(basis="sine1d", grid=32, alpha=2.0, tau=3.0, sigma=1.0, shift=0.5)
    v = fields_view(kle)
    assert v["shape"] == [32] and len(v["examples"]) == 4
    assert np.allclose(v["spectrum"], kle.eigenvalues()[:200], rtol=1e-3)
    x = kle.sample(200, [20_260_611, 2])
    assert np.allclose(v["mean"], x.mean(0), rtol=1e-3, atol=1e-6)
    assert np.allclose(v["variance"], x.var(0), rtol=1e-3, atol=1e-9)


def test_design_views_dispatch_and_rounding():
    kle2 = KLEGaussian(basis="sine2d", grid=8)
    assert design_views(kle2.to_spec())["shape"] == [8, 8]
    g = Gaussian([0.0, 0.0], cov=np.eye(2))
    assert design_views(g.to_spec())["kind"] == "none"  # no Q: nothing to project on
    v = design_views(g.to_spec(), q_samples(dim=2))
    flat = np.ravel(v["design"]["points"])
    assert all(float(f"{x:.4g}") == x for x in flat)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_numbers_never_reach_json(bad):
    from lwl.views import _round

    assert _round([1.0, bad, 2.0]) == [1.0, 0.0, 2.0]
