"""Failed measurements as outcomes (issue #31): a NaN label from an oracle that reports failures
is counted as a label spent and used nowhere; from any other oracle it is refused."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lwl import run_job
from lwl.oracles import Oracle, make_oracle
from lwl.outcomes import check_labels, failed_rows, usable


def fails(x: np.ndarray) -> np.ndarray:
    """A deterministic ~10% of inputs: the lab's measurement of these points fails."""
    return np.floor(np.abs(x[:, 0]) * 1e4) % 10 == 0


class FlakyLab(Oracle):
    """Friedman-1 with failed points as NaN rows; remembers every input it failed."""

    name = "flaky"
    reports_failures = True

    def __init__(self, fail=fails):
        super().__init__(None)
        self.inner, self.fail = make_oracle({"name": "friedman1"}), fail
        self.failed: list[np.ndarray] = []
        self.asked = 0

    def _label(self, inputs):
        y = self.inner.label(inputs)
        bad = self.fail(inputs)
        self.failed.append(inputs[bad])
        self.asked += len(inputs)
        y[bad] = np.nan
        return y


def test_failed_rows_and_usable():
    y = np.array([1.0, np.nan, 2.0, np.inf])
    assert failed_rows(y).tolist() == [False, True, False, True]
    assert failed_rows(np.array([[1.0, 2.0], [np.nan, 0.0]])).tolist() == [False, True]
    x, yy = usable(np.arange(8.0).reshape(4, 2), y)
    assert x.tolist() == [[0, 1], [4, 5]] and yy.tolist() == [1.0, 2.0]


def test_a_builtin_oracle_returning_nan_is_refused():
    friedman = make_oracle({"name": "friedman1"})
    with pytest.raises(ValueError, match="labels: oracle 'friedman1' returned non-finite"):
        check_labels(np.array([1.0, np.nan]), friedman)
    check_labels(np.array([1.0, np.nan]), FlakyLab())  # an oracle that reports failures may


def test_a_broken_builtin_oracle_fails_the_run(small_spec):
    class Broken(FlakyLab):
        reports_failures = False

    with pytest.raises(ValueError, match="non-finite"):
        run_job(small_spec, oracle=Broken(), evaluate=False)


def test_bilevel_with_failed_points_finishes_on_the_points_that_came_back(small_spec):
    lab = FlakyLab()
    clean = run_job(small_spec, evaluate=False)
    res = run_job(small_spec, oracle=lab, evaluate=False)
    failed = sum(len(f) for f in lab.failed)
    assert 0.05 * lab.asked < failed < 0.15 * lab.asked
    # a failed point is a label spent: the count of labels is the clean run's
    assert res["labels_used"] == clean["labels_used"] == lab.asked and res["labels_failed"] == failed
    # NaN used anywhere (the adjoint, a gradient, a check) would make these NaN
    assert all(np.isfinite(h["objective"]) and np.isfinite(h["validation_err"]) for h in res["history"])
    assert all(np.isfinite(c["err"]) for c in res["checks"])
    assert sum(h.get("failed", 0) for h in res["history"]) + sum(c.get("failed", 0) for c in res["checks"]) > 0
    assert res["distribution"]["family"] == "gaussian"


def test_a_whole_failed_round_is_skipped_and_the_design_goes_on(small_spec):
    calls = {"n": 0}

    def first_iteration_fails(x):  # the first batch of samples_per_iteration (60) points
        calls["n"] += len(x) == 60
        return np.full(len(x), len(x) == 60 and calls["n"] == 1)

    lab = FlakyLab(first_iteration_fails)
    res = run_job(small_spec, oracle=lab, evaluate=False)
    assert res["history"][0]["event"] == "failed_round" and res["history"][0]["failed"] == 60
    assert res["events"]["failed_round"] == 1 and len(res["history"]) == small_spec["algorithm"]["iterations"]


def test_a_member_without_any_validation_label_is_named(small_spec):
    first_member = None

    def member0(x):
        nonlocal first_member
        if first_member is None:  # the validation round: Q's members in order, 100 points each
            first_member = True
            return np.arange(len(x)) < 100
        return np.zeros(len(x), dtype=bool)

    with pytest.raises(ValueError, match=r"test_distributions\.members\.0"):
        run_job(small_spec, oracle=FlakyLab(member0), evaluate=False)


def test_budgeted_failed_points_count_against_the_budget_and_are_not_training_data(small_spec):
    spec = copy.deepcopy(small_spec)
    spec["budget"] = 300
    spec["algorithm"] = {"name": "bilevel"}
    lab = FlakyLab()
    res = run_job(spec, oracle=lab, evaluate=False)
    failed = np.concatenate(lab.failed)
    X = np.asarray(res["training_set"]["inputs"])
    y = np.asarray(res["training_set"]["labels"])
    assert len(failed) > 10 and res["labels_failed"] == len(failed)
    assert lab.asked == res["labels_used"] == len(y) + len(failed) == 300  # the budget, to the last label
    assert np.all(np.isfinite(y)) and np.array_equal(y, make_oracle({"name": "friedman1"}).label(X))
    rows = {r.tobytes() for r in X}
    assert not any(r.tobytes() in rows for r in failed)  # no failed point in the training set
    assert np.array_equal(np.asarray(res["failed_inputs"]), failed)
    assert res["history"][-1]["labels_used"] == 300
    assert any("failed" in w for w in res["warnings"])


def test_a_budgeted_round_that_failed_whole_is_paid_and_the_design_goes_on(small_spec):
    spec = copy.deepcopy(small_spec)
    spec["budget"] = 300
    spec["algorithm"] = {"name": "bilevel"}
    calls = {"n": 0}

    def second_round_fails(x):  # the validation round, then the first design round, all failed
        calls["n"] += 1
        return np.full(len(x), calls["n"] == 2)

    lab = FlakyLab(second_round_fails)
    res = run_job(spec, oracle=lab, evaluate=False)
    lost = res["history"][1]
    assert lost["failed"] == lost["labels"] and res["labels_failed"] == lost["labels"]
    assert res["labels_used"] == 300 == len(res["training_set"]["labels"]) + lost["labels"]
    assert res["rounds"] == res["plan"]["total_rounds"]  # every planned round ran


def test_a_budgeted_gp_job_estimates_its_err_on_the_validation_labels_that_came_back(small_spec):
    """loo_err (lwl.models.gp_diagnosis) with failed validation labels: the served GP's leave-one-out
    residuals at the validation points that came back (the training set's first rows), each member
    weighted w_k / M'_k by the labels of it that came back, as the held-out Err weighs Q."""
    from lwl.models import from_spec
    from lwl.q_samples import MetaTestSamples
    from lwl.spec import parse_job_spec

    spec = copy.deepcopy(small_spec)
    spec.update(budget=300, algorithm={"name": "bilevel"}, model={"name": "gp", "restarts": 0, "max_fit_points": 100})
    q = MetaTestSamples.from_spec(parse_job_spec(spec).test_distributions, spec["seed"])
    bad = {r.tobytes() for r in q.validation[0][:5]}  # five of member 0's validation points fail

    lab = FlakyLab(lambda x: np.array([r.tobytes() in bad for r in x], dtype=bool))
    res = run_job(spec, oracle=lab, evaluate=False)
    per = res["plan"]["per_member"]
    back = [x[5:per] if k == 0 else x[:per] for k, x in enumerate(q.validation)]
    counts = np.array([len(b) for b in back])
    assert len(lab.failed[0]) == 5 and res["labels_failed"] == 5 and len(set(counts)) > 1  # unequal counts
    X = np.asarray(res["training_set"]["inputs"])
    y = np.asarray(res["training_set"]["labels"])
    n = counts.sum()
    np.testing.assert_array_equal(X[:n], np.concatenate(back))  # the head of the training set
    a = np.concatenate([np.full(c, w / c) for c, w in zip(counts, q.weights)])
    r = from_spec({**res["model"], "training_set": res["training_set"]}).loo_residuals(np.arange(n))
    (out,) = res["model_diagnosis"]["outputs"]
    assert out["loo_err"] == pytest.approx(np.sqrt((a * r ** 2).sum() / (a * y[:n] ** 2).sum()), rel=1e-9)
    assert np.isfinite(out["loo_err"]) and out["loo_err"] > 0
