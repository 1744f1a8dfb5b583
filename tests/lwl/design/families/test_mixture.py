import copy

import numpy as np
import pytest
import torch

from lwl import run_job
from lwl.design import BilevelDesign
from lwl.design.families.mixture import MixtureFamily
from lwl.measures import from_spec
from tests.lwl.design.families.conftest import labelled_design
from lwl.spec import SpecError, parse_job_spec


def _mixture_spec(small_spec, **family):
    s = copy.deepcopy(small_spec)
    s["family"] = {"name": "mixture", **family}
    return s


def _design(spec_doc):
    return labelled_design(spec_doc)


def _moved(design, state, seed=0):
    """A state whose mixture is away from the fitted start (unequal weights, shifted means)."""
    rng = np.random.default_rng(seed)
    phi = state.phi + 0.3 * rng.standard_normal(state.phi.shape)
    return state.replace(phi=phi, params=design.family.from_phi(phi))


def _torch_log_prob(logits, means, chols, x):
    comps = torch.stack([torch.distributions.MultivariateNormal(m, scale_tril=L).log_prob(x)
                         for m, L in zip(means, chols)], 1)
    return torch.logsumexp(torch.log_softmax(logits, 0) + comps, 1)


def test_score_and_phi_gradient_match_autograd(small_spec):
    design, _, state = _design(_mixture_spec(small_spec))
    state = _moved(design, state)
    fam: MixtureFamily = design.family
    params = dict(state.params)
    x = fam.measure(params).sample(50, 3)
    c = np.random.default_rng(1).standard_normal(50)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    obj = torch.as_tensor(c) @ _torch_log_prob(t["logits"], t["means"], t["chols"], torch.as_tensor(x))
    obj.backward()
    g_logits, g_means, g_chols = fam.score(params, x, c)
    np.testing.assert_allclose(g_logits, t["logits"].grad.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(g_means, t["means"].grad.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(g_chols, np.tril(t["chols"].grad.numpy()), rtol=1e-9, atol=1e-10)
    # in whitened coordinates: autograd through from_phi
    phi = torch.tensor(state.phi, requires_grad=True)
    C, P, d = fam.C, fam.P, fam.coords.d
    S, centre = torch.as_tensor(fam.coords.S), torch.as_tensor(fam.coords.centre)
    blocks = phi[C:].reshape(C, P)
    low = torch.tril_indices(d, d, -1)
    Lt = torch.zeros(C, d, d, dtype=phi.dtype)
    Lt[:, low[0], low[1]] = blocks[:, 2 * d:]
    Lt = Lt + torch.diag_embed(torch.exp(blocks[:, d:2 * d]))
    means = centre + blocks[:, :d] @ S.T
    obj = torch.as_tensor(c) @ _torch_log_prob(phi[:C], means, S @ Lt, torch.as_tensor(x))
    obj.backward()
    np.testing.assert_allclose(fam.phi_gradient(state.phi, (g_logits, g_means, g_chols)),
                               phi.grad.numpy(), rtol=1e-8, atol=1e-10)


def _reweighted_objective(design, state, U, y, sigma2, params):
    """1/2 E_Q|G_hat - G*|^2 for KRR on sum_i p_theta(u_i) / (N p_theta_k(u_i)) delta_{u_i}."""
    from lwl.models import KernelRidge

    fam = design.family
    n = len(U)
    w = np.exp(fam.responsibilities(params, U)[0] - fam.responsibilities(dict(state.params), U)[0]) / n
    k = design.spec.model
    km = KernelRidge(k.kernel, k.lengthscale).fit(U[:2], y[:2])
    K = km.kernel_matrix(U, U).numpy()
    V = np.concatenate(design.q.validation)
    beta = np.linalg.solve(K + sigma2 * np.diag(1.0 / w), y)
    a = design.q.point_weights(design.q.validation, design.q.weights)
    r = state.validation_labels - km.kernel_matrix(V, U).numpy() @ beta
    return 0.5 * a @ r**2


def test_bilevel_gradient_matches_central_differences_of_the_reweighted_objective(small_spec):
    design, oracle, state = _design(_mixture_spec(small_spec, components=2))
    state = _moved(design, state)
    U = design.queries(state)
    y = oracle.label(U)
    objective, _, g_logits, g_means, g_chols = design.gradient(state, U, y, 1e-3)
    params = dict(state.params)
    assert np.isclose(0.5 * objective, _reweighted_objective(design, state, U, y, 1e-3, params))
    a = design.q.point_weights(design.q.validation, design.q.weights)
    scale = a @ state.validation_labels ** 2  # the adaptive optimiser descends 1/2 Err^2
    h = 1e-6

    def fd(name, idx):
        plus, minus = ({k: v.copy() for k, v in params.items()} for _ in range(2))
        plus[name][idx] += h
        minus[name][idx] -= h
        return (_reweighted_objective(design, state, U, y, 1e-3, plus)
                - _reweighted_objective(design, state, U, y, 1e-3, minus)) / (2 * h * scale)

    grads = {"logits": g_logits, "means": g_means, "chols": g_chols}
    for name, idx in [("logits", (0,)), ("logits", (1,)), ("means", (0, 1)), ("means", (1, 4)),
                      ("chols", (0, 0, 0)), ("chols", (1, 3, 1))]:
        assert np.isclose(grads[name][idx], fd(name, idx), rtol=1e-5, atol=1e-9), (name, idx)


def test_initial_mixture_is_fitted_to_the_members_and_stated_in_the_spec(small_spec):
    res = run_job(_mixture_spec(small_spec))
    fam = res["spec"]["family"]
    assert {"family.weights", "family.means", "family.covs"} <= set(res["spec"]["derived"])
    design = BilevelDesign.from_spec(parse_job_spec(_mixture_spec(small_spec)))
    for k, x in enumerate(design.q.validation):  # the members' own means, from validation samples only
        np.testing.assert_allclose(fam["means"][k], x.mean(0), rtol=1e-12)
    assert fam["components"] == len(small_spec["test_distributions"]["members"])
    assert res["distribution"]["family"] == "mixture"
    assert "initial" in res["evaluation"]["err"] and "initial" not in res["verdict"]["baselines"]
    assert res["verdict"]["initial_err"] == res["evaluation"]["err"]["initial"]
    comps = res["family_diagnostics"]["components"]
    assert len(comps) == fam["components"] and np.isclose(sum(c["weight"] for c in comps), 1.0)


def test_kmeans_init_and_reproducible_samples(small_spec):
    spec = _mixture_spec(small_spec, components=3)
    a, b = run_job(spec), run_job(spec)
    assert a["distribution"] == b["distribution"] and len(a["spec"]["family"]["means"]) == 3
    m = from_spec(a["distribution"])
    np.testing.assert_array_equal(m.sample(20, 5), from_spec(b["distribution"]).sample(20, 5))


def test_vanished_components_are_reported(small_spec):
    design, _, state = _design(_mixture_spec(small_spec))
    params = dict(state.params)
    params["logits"] = np.array([0.0, -12.0])
    facts = design.family.diagnostics(params)
    assert facts["vanished"] == [1] and "weight below" in facts["warnings"][0]


@pytest.mark.parametrize("family, field", [
    ({"name": "mixture", "weights": [1.0], "means": [[0, 0, 0, 0, 0]]}, "family.covs"),
    ({"name": "mixture", "weights": [1.0, 1.0], "means": [[0] * 5], "covs": [np.eye(5).tolist()]}, "family.weights"),
    ({"name": "mixture", "weights": [1.0], "means": [[0] * 5], "covs": [(-np.eye(5)).tolist()]}, "family.covs.0"),
    ({"name": "mixture", "weights": [1.0], "means": [[0] * 3], "covs": [np.eye(3).tolist()]}, "family.means"),
    ({"name": "mixture", "components": 0}, "family.components"),
    ({"name": "mixture", "free": ["scale"]}, "family.free.0"),
])
def test_bad_mixture_specs_name_the_field(small_spec, family, field):
    with pytest.raises(SpecError) as exc:
        parse_job_spec(_mixture_spec(small_spec, **{k: v for k, v in family.items() if k != "name"}))
    assert field in [loc for loc, _ in exc.value.errors], exc.value.errors


def test_paper_optimizer_is_refused_for_a_mixture(small_spec):
    s = _mixture_spec(small_spec)
    s["algorithm"]["optimizer"] = "paper"
    with pytest.raises(SpecError) as exc:
        parse_job_spec(s)
    assert "algorithm.optimizer" in str(exc.value)


def test_fixed_weights_do_not_move(small_spec):
    s = _mixture_spec(small_spec, free=["means", "covs"])
    s["algorithm"].update(iterations=10, check_every=5, significance=0)
    res = run_job(s)
    w0 = np.asarray(res["spec"]["family"]["weights"])
    np.testing.assert_allclose(res["last_distribution"]["weights"], w0 / w0.sum(), rtol=1e-12)


def test_broadened_mixture_scales_every_component_covariance(small_spec):
    design, _, state = _design(_mixture_spec(small_spec))
    params = design.family.from_phi(state.phi)
    broad = design.family.measure(design.family.broadened(params, 3.0))
    base = design.family.measure(params)
    np.testing.assert_allclose(broad.weights, base.weights)
    for b, c in zip(broad.components, base.components):
        np.testing.assert_allclose(b.mean, c.mean)
        np.testing.assert_allclose(b.cov, 3.0 * c.cov, rtol=1e-12)
    fixed, _, _ = _design(_mixture_spec(small_spec, free=["weights", "means"]))
    assert fixed.family.broadened(params, 3.0) is None


@pytest.mark.parametrize("init", ["members", "kmeans"])
def test_the_fitted_components_follow_a_change_of_units(init):
    """Q's samples posed in a lab's units (x -> o + S x, spreads 1e-3 and 1e5, an offset of 1e6):
    every fitted component moves with them (m -> o + S m, C -> S C S). The floor that keeps a
    component positive definite was 1e-6 of the *average* variance, isotropic: the input spread
    1e-3 got a component sd of 76."""
    from lwl.design.families.mixture import initial_components
    from lwl.q_samples import MetaTestSamples

    rng = np.random.default_rng(0)
    members = [rng.standard_normal((300, 2)) @ np.array([[1.0, 0.3], [0.0, 0.5]]) + shift
               for shift in ([0.0, 0.0], [2.0, 1.0])]
    S, o = np.array([1e-3, 1e5]), np.array([1e6, 0.0])
    C = 2 if init == "kmeans" else None
    plain = initial_components(MetaTestSamples(members, np.array([0.5, 0.5]), 150), C, init, [0, 1])
    posed = initial_components(MetaTestSamples([o + S * m for m in members], np.array([0.5, 0.5]), 150),
                               C, init, [0, 1])
    for m0, m1 in zip(plain["means"], posed["means"]):
        np.testing.assert_allclose((np.asarray(m1) - o) / S, m0, rtol=1e-6, atol=1e-6)
    for c0, c1 in zip(plain["covs"], posed["covs"]):
        np.testing.assert_allclose(np.asarray(c1) / np.outer(S, S), c0, rtol=1e-6, atol=1e-9)
