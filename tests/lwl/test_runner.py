import copy

import numpy as np
import pytest

from lwl import run_job
from lwl.measures import from_spec
from lwl.runner import Interrupted


def test_same_spec_and_seed_give_the_same_result(small_spec):
    a, b = run_job(small_spec), run_job(small_spec)
    assert a["distribution"] == b["distribution"] and a["last_distribution"] == b["last_distribution"]
    assert a["evaluation"] == b["evaluation"]
    small_spec["seed"] = 1
    c = run_job(small_spec)
    assert c["last_distribution"]["mean"] != a["last_distribution"]["mean"]


def test_result_document(small_spec):
    res = run_job(small_spec)
    assert set(res) >= {"distribution", "history", "evaluation", "spec", "timings"}
    assert len(res["history"]) == 5
    assert set(res["history"][0]) >= {"objective", "validation_err", "step_size", "seconds"}
    assert set(res["evaluation"]["err"]) == {"optimized", "normal", "mixture"}
    assert res["evaluation"]["held_out"] == 2 * 200
    assert from_spec(res["distribution"]).sample(3, 0).shape == (3, 5)


def test_progress_checkpoint_and_cancel(small_spec):
    seen, blobs = [], []
    run_job(small_spec, progress=seen.append, checkpoint=blobs.append, evaluate=False)
    # validation labels, checks of Q's moment-matched Gaussian, of theta^0 and of the four
    # broadened starts, 5 iterations, the check of the last iterate
    assert [p["iteration"] for p in seen] == [0] * 7 + [1, 2, 3, 4, 5, 5]
    assert seen[-1]["total"] == 5
    # resuming from the checkpoint after iteration 2 finishes with the uninterrupted distribution
    full = run_job(small_spec, evaluate=False)
    resumed = run_job(small_spec, state=blobs[8], evaluate=False)
    assert resumed["distribution"] == full["distribution"]
    assert resumed["last_distribution"] == full["last_distribution"]
    assert resumed["selected"] == full["selected"]
    calls = iter([False] * 8 + [True])  # stop after the starts and the first iteration
    with pytest.raises(Interrupted) as exc:
        run_job(small_spec, should_stop=lambda: next(calls))
    assert exc.value.state.iteration == 1


def test_samples_members_and_weights(small_spec):
    rng = np.random.default_rng(0)
    small_spec["test_distributions"]["members"][0] = {"samples": (rng.standard_normal((250, 5)) + 1).tolist()}
    small_spec["test_distributions"]["weights"] = [3, 1]
    res = run_job(small_spec)
    assert res["evaluation"]["held_out"] == 150 + 200


@pytest.mark.slow
def test_ama_job_runs_resumes_and_reproduces(ama_spec):
    ama_spec["algorithm"]["select"] = "bound"  # the paper's AMA: a monotone bound, the last iterate
    seen, blobs = [], []
    result = run_job(ama_spec, progress=seen.append, checkpoint=blobs.append)
    objectives = [r["objective"] for r in result["history"]]
    assert len(objectives) == 3 and all(b <= a for a, b in zip(objectives, objectives[1:]))
    assert seen[-1]["iteration"] == seen[-1]["total"] == 3
    assert result["distribution"]["family"] == "kle" and result["distribution"]["endpoints"] is True
    assert result["distribution"]["shift"] != 0.0  # the mean shift moved towards Q
    assert 0 < result["evaluation"]["relative_ood_error"] < 10
    assert result["lipschitz"]["oracle"] > 0 and result["labels_used"] > 0
    np.testing.assert_array_equal(from_spec(result["distribution"]).sample(3, 1).shape, (3, 256))
    again = run_job(ama_spec, evaluate=False)
    assert again["distribution"] == result["distribution"]
    resumed = run_job(ama_spec, state=blobs[1], evaluate=False)  # after the Lipschitz phase and iteration 0
    assert resumed["distribution"] == result["distribution"]
    assert [r["objective"] for r in resumed["history"]] == objectives


@pytest.mark.slow
def test_particle_ama_job_runs_resumes_and_reproduces(particle_spec):
    particle_spec["algorithm"]["select"] = "bound"  # the paper's: a monotone bound, the last iterate
    seen, blobs = [], []
    result = run_job(particle_spec, progress=seen.append, checkpoint=blobs.append)
    objectives = [r["objective"] for r in result["history"]]
    assert len(objectives) == 3 and all(b <= a for a, b in zip(objectives, objectives[1:]))
    assert seen[-1]["iteration"] == seen[-1]["total"] == 3
    dist = result["distribution"]
    assert dist["family"] == "particles" and dist["grid"] == 9 and np.shape(dist["coefficients"]) == (8, 4, 4)
    assert np.abs(dist["coefficients"]).max() > 0.01  # moved from c ~ N(0, 1e-6)
    # the sampler draws the optimised particles: exp(L c) on the oracle's 9 x 9 nodes
    fields = from_spec(dist).sample(5, 1)
    assert fields.shape == (5, 81) and np.all(fields > 0)
    assert all(np.isclose(((fields[i] - from_spec(dist).fields()) ** 2).sum(1), 0).any() for i in range(5))
    assert result["evaluation"]["samples_per_member"] == [8, 8, 8]
    assert 0 < result["evaluation"]["relative_ood_error"] < 1
    again = run_job(particle_spec, evaluate=False)
    assert again["distribution"] == dist
    resumed = run_job(particle_spec, state=blobs[0], evaluate=False)  # after iteration 0
    assert resumed["distribution"] == dist
    assert [r["objective"] for r in resumed["history"]] == objectives


@pytest.mark.slow
@pytest.mark.parametrize("which", ["ama", "particle_ama"])
def test_operator_jobs_default_to_validated_selection(which, ama_spec, particle_spec):
    spec = ama_spec if which == "ama" else particle_spec
    assert "select" not in spec["algorithm"]
    result = run_job(spec)
    assert result["spec"]["algorithm"]["select"] == "validation"
    kept = result["selected"]
    errs = [r["validation_error"] for r in result["history"]]
    assert kept["validation_error"] == min(errs) and errs[kept["iteration"]] == min(errs)
    resumed_from_scratch = run_job(spec, evaluate=False)
    assert resumed_from_scratch["distribution"] == result["distribution"]


def test_design_time_adds_up_over_resumed_slices(small_spec):
    from lwl.design.state import unpack

    blobs = []
    run_job(small_spec, checkpoint=blobs.append, evaluate=False)
    before = unpack(blobs[4])["elapsed_seconds"]
    resumed = run_job(small_spec, state=blobs[4], evaluate=False)
    t = resumed["timings"]
    assert 0 < before < t["design_seconds"] <= before + t["last_slice_seconds"]


def test_checkpoints_without_history_cost_o_state_and_resume_with_the_records(small_spec):
    from lwl.design.state import unpack

    small_spec["algorithm"]["iterations"] = 40
    blobs, seen = [], []
    full = run_job(small_spec, checkpoint=blobs.append, progress=seen.append, evaluate=False,
                   checkpoint_history=False)
    assert all("history" not in unpack(b) for b in blobs)
    sizes = [len(b) for b, p in zip(blobs, seen) if p["iteration"] >= 1]
    assert max(sizes) < 1.05 * min(sizes)  # iterations 1..40: the checkpoint does not grow with them
    # the records the caller kept (one per iteration, as the service's history table does)
    records = {p["record"]["iteration"]: p["record"] for p, b in zip(seen, blobs) if p["record"]}
    k = 20
    cut = next(i for i, p in enumerate(seen) if p["iteration"] == k)
    state = unpack(blobs[cut])
    kept = [records[i] for i in sorted(records) if i < state["iteration"]]
    resumed = run_job(small_spec, state=blobs[cut], history=kept, evaluate=False, checkpoint_history=False)
    assert resumed["distribution"] == full["distribution"]
    drop = lambda hist: [{k: v for k, v in r.items() if k != "seconds"} for r in hist]  # noqa: E731  (timings differ)
    assert drop(resumed["history"]) == drop(full["history"]) and len(full["history"]) == 40
    with pytest.raises(ValueError, match="history: the checkpoint was written without"):
        run_job(small_spec, state=blobs[cut], evaluate=False)
    # a self-contained checkpoint (the default) still resumes alone
    blobs2 = []
    run_job(small_spec, checkpoint=blobs2.append, evaluate=False)
    assert len(blobs2[-1]) > len(blobs2[5]) and "history" in unpack(blobs2[-1])


def test_progress_counts_the_labels_asked_for_so_far(small_spec, ama_spec):
    """Every step's progress says how many oracle labels the job has used: rising, and at the end
    what the result says (a bilevel design and AMA count them differently)."""
    for spec in (small_spec, ama_spec):
        seen = []
        res = run_job(spec, progress=seen.append, evaluate=False)
        used = [p["labels_used"] for p in seen]
        assert all(isinstance(u, int) for u in used) and used == sorted(used) and used[0] > 0
        assert used[-1] == res["labels_used"]


def test_a_budgeted_job_whose_served_model_cannot_be_fitted_succeeds_with_its_labels(small_spec, monkeypatch):
    """Issue #83: a budgeted gp job whose served fit raises (torch's LinAlgError, after the whole
    budget is paid) returns its result: no model, model_fallback naming the error, every paid label
    in the training set; the audit, which would fit the same model to the same set, does not run
    (nor pay its held-out labels) and the verdict is the validation one."""
    import torch

    from lwl.design.budgeted_bilevel import BudgetedBilevel
    from lwl.oracles import make_oracle

    spec = copy.deepcopy(small_spec)
    spec.update(budget=300, algorithm={"name": "bilevel"}, model={"name": "gp", "restarts": 0, "max_fit_points": 100})
    fits = []

    def unfittable(self, state):  # the served model's fit only: the scores and the left-out check fit as ever
        fits.append(len(state.points.y))
        raise torch.linalg.LinAlgError("linalg.cholesky: The factorization could not be completed")

    monkeypatch.setattr(BudgetedBilevel, "final_model", unfittable)
    friedman, asked = make_oracle({"name": "friedman1"}), []

    class Lab(type(friedman)):
        def _label(self, x):
            asked.append(len(x))
            return super()._label(x)

    res = run_job(spec, oracle=Lab())  # the evaluation on, as the spec says
    assert fits == [300] and sum(asked) == res["labels_used"] == 300  # no audit label was paid for
    assert res["model"] is None and res["model_diagnosis"] is None
    fallback = res["model_fallback"]
    assert fallback["reason"] == "fit_failed" and fallback["error"].startswith("LinAlgError: linalg.cholesky")
    assert any("could not be fitted" in w and "LinAlgError" in w for w in res["warnings"])
    assert any(w.startswith("no verdict on held-out data") for w in res["warnings"])
    assert "evaluation" not in res and res["verdict"]["kind"] == "validation"
    X = np.asarray(res["training_set"]["inputs"])
    y = np.asarray(res["training_set"]["labels"])
    assert len(y) + len(res["left_out"]["labels"]) == 300 and np.array_equal(y, friedman.label(X))


def test_a_gp_job_whose_every_fit_to_all_labels_runs_out_of_memory_succeeds_with_its_labels(small_spec, monkeypatch):
    """The served GP's fit to every point is first made by the left-out check (its arm of every
    point), then by the served model: a MemoryError there (not a LinAlgError) leaves the check
    undecided and the job succeeded without a model, every paid label in its training set."""
    from lwl.models import GaussianProcess

    spec = copy.deepcopy(small_spec)
    spec.update(budget=300, algorithm={"name": "bilevel"}, model={"name": "gp", "restarts": 0, "max_fit_points": 100})
    real, sizes = GaussianProcess.fit, []

    def fit(self, X, y):
        sizes.append(len(X))
        if len(X) == 300:
            raise MemoryError("out of memory factoring 300 x 300")  # (a stand-in: 20,000 points on a small box)
        return real(self, X, y)

    monkeypatch.setattr(GaussianProcess, "fit", fit)
    res = run_job(spec, evaluate=False)
    assert 300 in sizes and res["model"] is None
    assert res["model_fallback"]["reason"] == "fit_failed" and res["model_fallback"]["error"].startswith("MemoryError")
    check = res["left_out"]["check"]  # (the spec's design drops candidates, so the check ran and raised)
    assert check is not None and check["error"].startswith("not checked: out of memory") and not check["left_out"]
    assert len(res["training_set"]["labels"]) == res["labels_used"] == 300
