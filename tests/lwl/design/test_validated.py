"""Validated AMA: Q's validation samples accept distribution steps and select the returned pair."""

import numpy as np
import pytest

from lwl.design import pack, unpack
from lwl.design.ama import AMAState
from lwl.design.validated import judge
from tests.lwl.design.test_ama import _darcy, _run
from tests.lwl.design.test_particles import _design as _particles
from tests.lwl.design.test_particles import _run as _run_particles

pytestmark = pytest.mark.slow  # whole studies and AMA designs: left out of ./scripts/test.sh --fast


class _Model:
    def __init__(self, w):
        self.w = w

    def get_weights(self):
        return {"w": np.array([self.w])}


def _judge(state, model, err):
    return judge(state, state.candidate(model, err), max_backtracks=2)


def test_judge_keeps_improvements_backtracks_then_stops():
    state = AMAState(theta=np.array([0.0]))
    state, action = _judge(state, _Model(1.0), 0.5)
    assert action == "kept" and state.best.err == 0.5 and state.best.model["w"][0] == 1.0
    state = state.replace(iteration=1, theta=np.array([4.0]))  # a step, then a worse model
    state, action = _judge(state, _Model(2.0), 0.7)
    assert action == "backtracked" and state.theta[0] == 2.0 and state.best.model["w"][0] == 1.0
    state, action = _judge(state.replace(iteration=2), _Model(3.0), 0.6)
    assert action == "backtracked" and state.theta[0] == 1.0
    state, action = _judge(state.replace(iteration=3), _Model(4.0), 0.55)
    assert action == "stop" and state.best.iteration == 0
    state, action = _judge(state.replace(iteration=4), _Model(5.0), 0.4)
    assert action == "kept" and state.backtracks == 0 and state.best.iteration == 4
    flat = state.to_flat()  # the kept pair under the checkpoints' legacy keys
    assert (flat["best_validation"], flat["best_iteration"], flat["backtracks"]) == (0.4, 4, 0)
    assert flat["best.theta"][0] == 1.0 and flat["best.model.w"][0] == 5.0


def test_validated_ama_returns_the_best_validated_iterate_and_resumes_bit_for_bit():
    design, oracle = _darcy(iterations=3, select="validation", validation_size=20)
    state = _run(design, oracle)
    hist = state.history
    errs = [r["validation_error"] for r in hist]
    kept = [r["iteration"] for r in hist if r["validation_action"] == "kept"]
    best = min(range(len(errs)), key=errs.__getitem__)
    assert kept and best in kept and state.best.iteration == best == design.result(state)["selected"]["iteration"]
    np.testing.assert_array_equal(state.best.params["theta"], hist[best]["theta"])
    out = design.result(state)
    assert out["distribution"] == design.family.measure(state.best.params["theta"]).to_spec()
    assert "last_distribution" in out
    # the selected model is the one that scored errs[best] on the validation samples
    assert design.validation_error(state, design.selected_model(state))[0] == pytest.approx(errs[best])
    design2, _ = _darcy(iterations=3, select="validation", validation_size=20)
    half = unpack(pack(_run(design2, oracle, stop_after=2)))
    design3, _ = _darcy(iterations=3, select="validation", validation_size=20)
    resumed = _run(design3, oracle, design3.restore(half))
    assert [r["validation_error"] for r in resumed.history] == errs


def test_validated_ama_backtracks_a_step_that_validates_worse_then_stops(monkeypatch):
    design, oracle = _darcy(iterations=4, select="validation", validation_size=20, backtracks=1)
    far = np.array([1.9, 5.9])
    monkeypatch.setattr(design, "_optimise", lambda theta, state, model: far)  # the bound's proposal
    monkeypatch.setattr(design, "objective", lambda theta, state, model=None, grad=False: 0.0
                        if np.allclose(theta, far) else 1.0)  # ... which the bound accepts
    scripted = iter([0.5, 0.9, 0.8])  # the step validates worse, and so does the point half-way back

    def validation_error(state, model):
        return next(scripted), state

    monkeypatch.setattr(design, "validation_error", validation_error)
    state = _run(design, oracle)
    hist = state.history
    assert [r["validation_action"] for r in hist] == ["kept", "backtracked", "stop"]
    theta0 = np.asarray(hist[0]["theta"])
    np.testing.assert_allclose(hist[1]["theta"], far)
    np.testing.assert_allclose(hist[2]["theta"], 0.5 * (far + theta0))  # half-way back to the kept one
    assert design.done(state) and len(hist) == 3  # stopped before the iteration budget (4 + 1)
    out = design.result(state)
    assert out["selected"]["iteration"] == 0 and out["distribution"] == design.family.measure(theta0).to_spec()
    for name, w in design.selected_model(state).get_weights().items():  # the kept model is restored
        np.testing.assert_array_equal(w, state.best.model[name])


def test_validated_particle_ama_selects_the_best_validated_particles():
    design, oracle = _particles(select="validation")
    state = _run_particles(design, oracle)
    hist = state.history
    errs = [r["validation_error"] for r in hist]
    assert state.best.err == min(errs)
    out = design.result(state)
    assert out["selected"]["iteration"] == int(np.argmin(errs))
    assert design.validation_error(state, design.selected_model(state))[0] == pytest.approx(min(errs))
