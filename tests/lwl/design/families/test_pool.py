import copy

import numpy as np
import pytest
import torch

from lwl import run_job
from tests.lwl.design.families.conftest import labelled_design
from lwl.measures import from_spec
from lwl.spec import SpecError, parse_job_spec


def _pool_spec(small_spec, **family):
    s = copy.deepcopy(small_spec)
    s["family"] = {"name": "pool", "pool_size": 120, **family}
    return s


def _design(doc):  # away from the start: unequal weights, another bandwidth
    return labelled_design(doc, move=0.5, seed=4)


def _torch_log_prob(fam, logits, log_h, x):
    S = torch.as_tensor(fam.coords.S)
    L = torch.exp(log_h[0]) * S
    comps = torch.stack([torch.distributions.MultivariateNormal(torch.as_tensor(p), scale_tril=L).log_prob(x)
                         for p in fam.points], 1)
    return torch.logsumexp(torch.log_softmax(logits, 0) + comps, 1)


def test_score_matches_autograd_and_log_prob_the_measure(small_spec):
    design, _, state = _design(_pool_spec(small_spec))
    fam = design.family
    params = dict(state.params)
    x = fam.measure(params).sample(40, 2)
    c = np.random.default_rng(1).standard_normal(40)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    lp = _torch_log_prob(fam, t["logits"], t["log_h"], torch.as_tensor(x))
    np.testing.assert_allclose(fam.log_prob(params, x), lp.detach().numpy(), rtol=1e-10)
    (torch.as_tensor(c) @ lp).backward()
    g_logits, g_log_h = fam.score(params, x, c)
    np.testing.assert_allclose(g_logits, t["logits"].grad.numpy(), rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(g_log_h, t["log_h"].grad.numpy(), rtol=1e-8, atol=1e-11)


def test_bilevel_gradient_matches_central_differences_of_the_reweighted_objective(small_spec):
    from lwl.models import KernelRidge

    design, oracle, state = _design(_pool_spec(small_spec, pool_size=60))
    fam = design.family
    U = design.queries(state)
    y = oracle.label(U)
    objective, _, g_logits, g_log_h = design.gradient(state, U, y, 1e-3)
    base = dict(state.params)
    a = design.q.point_weights(design.q.validation, design.q.weights)
    scale = a @ state.validation_labels ** 2  # the adaptive optimiser descends 1/2 Err^2
    k = design.spec.model
    km = KernelRidge(k.kernel, k.lengthscale).fit(U[:2], y[:2])
    K, Kvu = km.kernel_matrix(U, U).numpy(), km.kernel_matrix(np.concatenate(design.q.validation), U).numpy()

    def objective_at(params):
        w = np.exp(fam.log_prob(params, U) - fam.log_prob(base, U)) / len(U)
        r = state.validation_labels - Kvu @ np.linalg.solve(K + 1e-3 * np.diag(1.0 / w), y)
        return 0.5 * a @ r**2

    assert np.isclose(0.5 * objective, objective_at(base))
    h = 1e-6
    for name, idx, grad in [("logits", 3, g_logits[3]), ("logits", 17, g_logits[17]), ("log_h", 0, g_log_h[0])]:
        plus, minus = ({n: v.copy() for n, v in base.items()} for _ in range(2))
        plus[name][idx] += h
        minus[name][idx] -= h
        fd = (objective_at(plus) - objective_at(minus)) / (2 * h * scale)
        assert np.isclose(grad, fd, rtol=1e-5, atol=1e-9), (name, idx, grad, fd)


def test_pool_job_runs_reproducibly_and_states_its_pool(small_spec):
    s = _pool_spec(small_spec)
    s["algorithm"].update(iterations=10, check_every=5)
    a, b = run_job(s), run_job(s)
    assert a["distribution"] == b["distribution"] and a["distribution"]["family"] == "weighted_pool"
    fam = a["spec"]["family"]
    assert {"family.pool_seed", "family.bandwidth"} <= set(a["spec"]["derived"])
    assert fam["pool_seed"] == s["seed"] and np.isclose(fam["bandwidth"], 120 ** (-1 / 9))
    assert len(a["distribution"]["points"]) == 120
    assert a["family_diagnostics"]["pool_size"] == 120
    m = from_spec(a["distribution"])
    np.testing.assert_array_equal(m.sample(7, 1), from_spec(b["distribution"]).sample(7, 1))


def test_bad_pool_specs_name_the_field(small_spec):
    for family, field in [({"pool_size": 1}, "family.pool_size"), ({"bandwidth": 0}, "family.bandwidth"),
                          ({"free": []}, "family.free")]:
        with pytest.raises(SpecError) as exc:
            parse_job_spec(_pool_spec(small_spec, **family))
        assert field in [loc for loc, _ in exc.value.errors], exc.value.errors


def test_broadened_pool_scales_its_covariance_through_the_bandwidth(small_spec):
    design, _, state = labelled_design(_pool_spec(small_spec))
    fam = design.family
    params = fam.from_phi(state.phi)
    h2 = np.exp(2 * params["log_h"][0])
    h2_new = np.exp(2 * fam.broadened(params, 2.0)["log_h"][0])
    # points of covariance ~Sigma_hat with kernels h^2 Sigma_hat: (1 + h'^2) = 2 (1 + h^2)
    assert np.isclose(1 + h2_new, 2.0 * (1 + h2))
    np.testing.assert_array_equal(fam.broadened(params, 2.0)["logits"], params["logits"])
    fixed, _, _ = labelled_design(_pool_spec(small_spec, free=["weights"]))
    assert fixed.family.broadened(params, 2.0) is None
