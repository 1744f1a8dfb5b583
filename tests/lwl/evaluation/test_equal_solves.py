"""The verdict of a budgeted operator job at equal solves (lwl.evaluation.equal_solves)."""

import copy

import numpy as np
import pytest

from lwl.oracles.counting import CountingOracle
from lwl.runner import run_job
from lwl.spec import parse_job_spec


@pytest.fixture
def budgeted_ama(ama_spec) -> dict:
    s = copy.deepcopy(ama_spec)
    s["model"].update(iterations=40, branch=[32], trunk=[32], latent=16)
    s["budget"] = 100
    s["algorithm"]["explore_min"] = 1  # candidates explored at this budget, so that some solves can be left out
    for m in s["test_distributions"]["members"]:
        m["size"] = 20 + 40  # 40 held out per member
    return s


@pytest.mark.slow
def test_the_training_set_is_judged_against_q_law_and_the_initial_distribution_at_equal_solves(budgeted_ama,
                                                                                               monkeypatch):
    from lwl.design.budgeted_operator import BudgetedOperatorDesign

    fits = {"served": 0, "draws": 0}  # the served DeepONet is fitted once: its document and the audit's draw 0
    final_model, train_draw = BudgetedOperatorDesign.final_model, BudgetedOperatorDesign.train_draw

    def counted_final(self, state):
        fits["served"] += 1
        return final_model(self, state)

    def counted_draw(self, X, y, r):
        fits["draws"] += 1
        return train_draw(self, X, y, r)

    monkeypatch.setattr(BudgetedOperatorDesign, "final_model", counted_final)
    monkeypatch.setattr(BudgetedOperatorDesign, "train_draw", counted_draw)
    oracle = CountingOracle(parse_job_spec(budgeted_ama).oracle.build())
    res = run_job(budgeted_ama, oracle=oracle, evaluate=True)
    # draws 1, 2 of the training set and 3 of each of Q's law and the initial law: draw 0 is the served model
    assert fits == {"served": 1, "draws": 2 + 3 + 3}
    monkeypatch.undo()
    ev, v = res["evaluation"], res["verdict"]
    assert res["labels_used"] == 100  # the audit's solves are not the job's
    # the comparators get every solve the job paid for, those left out of its DeepONet too
    assert ev["labels"] == 100 and ev["train_size"] == len(res["training_set"]["labels"])
    assert ev["train_size"] + len(res["left_out"]["labels"]) == 100
    assert ev["audit_labels"] == 3 * 40 + 2 * 3 * 100 and oracle.solves == 100 + ev["audit_labels"]
    assert set(ev["comparisons"]) == {"mixture", "initial"} and ev["draws"] == {"optimized": 3, "mixture": 3, "initial": 3}
    assert v["kind"] == "equal_labels" and set(v["outcomes"]) == {"mixture", "initial"}
    for c in ev["comparisons"].values():
        assert c["outcome"] in ("better", "tie", "worse") and c["err"] == pytest.approx(ev["err"]["optimized"])
        lo, hi = c["diff_sq_interval"]
        assert lo <= c["diff_sq"] <= hi
        # the outcome is the interval's sign
        assert c["outcome"] == ("better" if hi < 0 else "worse" if lo > 0 else "tie")
    # the training set is judged over three network starts; served_err is the served DeepONet's own
    from lwl.runner import build_stepper

    stepper = build_stepper(parse_job_spec(budgeted_ama), oracle=oracle)
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    served = stepper.factory(stepper.spec.seed).fit(X, Y, stepper.z)
    q, w = stepper.q, stepper.output_weights
    test_x = np.concatenate(q.heldout)
    test_y = np.asarray(oracle.label(test_x)).reshape(len(test_x), -1)
    a = q.point_weights(q.heldout, q.weights)
    sq = ((np.asarray(served.predict(test_x)).reshape(test_y.shape) - test_y) ** 2) @ w
    assert ev["served_err"] == pytest.approx(np.sqrt(a @ sq / (a @ ((test_y**2) @ w))), rel=1e-9)
    assert ev["served_err"] != ev["err"]["optimized"]
    lo, hi = ev["err_interval"]["optimized"]
    assert 0 < lo <= ev["err"]["optimized"] <= hi
    # the initial distribution (shift 0) is far from Q's members (shifts 0.3-0.8, other spectra): a
    # DeepONet trained on it generalises worse to Q than one trained on the job's training set
    assert ev["err"]["initial"] > ev["err"]["optimized"]
    assert np.isfinite(list(ev["err"].values())).all()
