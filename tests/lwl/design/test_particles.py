import numpy as np
import pytest
import torch

from lwl.design.particles import ParticleAMADesign
from lwl.experiments.rte import TestMeasure
from lwl.models import DeepONetRegressor
from lwl.oracles import make_oracle

G, N = 9, 6


def _design(**kw):
    oracle = make_oracle({"name": "rte", "params": {"knudsen": 2.0, "grid": G, "directions": 8}})
    tq = TestMeasure(G)
    q = [tq.sample(k, N, [0, k]) for k in range(3)]
    x = np.linspace(0, 1, G)
    z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)

    def factory(seed):
        return DeepONetRegressor([G * G, 32, 16], [2, 32, 16], max_iters=50, seed=seed, validation_fraction=0.0,
                                 device="cpu")

    opts = dict(particles=N, modes=4, iterations=3, step_size=0.05, seed=1)
    opts.update(kw)
    return ParticleAMADesign(oracle, q, factory, z, **opts), oracle


def _run(design, oracle):
    state = design.init()
    while not design.done(state):
        labels = design.cached_labels(state)
        state = design.step(state, labels if labels is not None else oracle.label(design.queries(state)))
    return state


def test_wasserstein_gradient_matches_finite_differences():
    """dF/dc from autograd (model, exp(Lc)), POT's emd2 (barycentric maps) and the RTE adjoint
    equals central differences of the discrete bound."""
    design, oracle = _design()
    state = design.init()
    state = design.step(state, oracle.label(design.queries(state)))
    model = design.model(state)
    model.net_.double()
    model.z_ = model.z_.double()
    c = state.c + np.random.default_rng(0).standard_normal(state.c.shape) * 0.3
    _, grad, _ = design.objective(c, state, model, grad=True)
    rng = np.random.default_rng(1)
    for _ in range(4):
        idx = tuple(rng.integers(0, s) for s in c.shape)
        e = np.zeros_like(c)
        e[idx] = 1e-6
        fd = (design.objective(c + e, state, model) - design.objective(c - e, state, model)) / 2e-6
        assert grad[idx] == pytest.approx(fd, rel=1e-4, abs=1e-8)


@pytest.mark.slow
def test_objective_never_rises_and_particles_approach_q():
    design, oracle = _design()
    state = _run(design, oracle)
    hist = state.history
    objectives = [r["objective"] for r in hist]
    assert all(b <= a for a, b in zip(objectives, objectives[1:]))
    assert hist[-1]["w2"] < hist[0]["w2"]  # the particles moved towards the test samples
    assert all(r["proposal_objective"] <= r["objective_after_model"] or not r["accepted"] for r in hist[:-1])


def test_a_failing_step_halves_the_step_size_and_it_stays_reduced():
    design, oracle = _design(step_size=50.0, iterations=2)
    state = _run(design, oracle)
    first, second = state.history[0], state.history[1]
    assert first["halvings"] > 0 and first["step_size"] == 50.0 / 2 ** first["halvings"]
    assert second["step_size"] <= first["step_size"]  # carried over, never increased


def test_particles_are_exponentials_of_sine_series():
    design, _ = _design()
    c = np.zeros((2, 4, 4))
    c[0, 0, 0] = 1.0
    a = design.fields(torch.as_tensor(c)).numpy().reshape(2, G, G)
    x = np.linspace(0, 1, G)
    np.testing.assert_allclose(a[0], np.exp(2 * np.outer(np.sin(np.pi * x), np.sin(np.pi * x))), atol=1e-12)
    np.testing.assert_allclose(a[1], 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["particle_ama-bound", "particle_ama-validation"])
def test_checkpoints_keep_the_layout_of_the_dict_state(case):
    from tests.lwl.design.test_ama import assert_checkpoints_as_before_typed_states

    # particle AMA's labels_used counts the adjoint's re-solves since the files were written (every
    # solve counted, tests/lwl/oracles/test_counting.py): the one value that changed on purpose
    assert_checkpoints_as_before_typed_states(case, recounted=("labels_used",))


def test_the_initial_state_has_the_dict_states_keys():
    design, _ = _design()
    assert set(design.init().to_flat()) == {"phase", "iteration", "c", "eta", "history", "objective",
                                            "lipschitz_oracle", "lipschitz_model", "zero_sq", "output_weights",
                                            "labels_used", "elapsed_seconds"}
