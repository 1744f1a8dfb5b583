"""The AMA studies at their ``tiny`` presets: the whole pipeline (oracle, Q, AMA, evaluation,
baselines, outputs) in seconds. The CI-sized ``quick`` results are committed under docs/results/."""

import json

import numpy as np
import pytest

from lwl.design.active import k_center_greedy, qbc_scores
from lwl.experiments import operators, rte

pytestmark = pytest.mark.slow  # whole studies and AMA designs: left out of ./scripts/test.sh --fast


@pytest.mark.parametrize("name", ["ntd", "darcy", "burgers"])
def test_tiny_study_runs_and_the_ood_error_falls(tmp_path, name):
    doc = operators.run(name, "tiny")
    paths = operators.write_outputs(doc, tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)
    errs = [e["mean"] for e in doc["relative_ood_error"]]
    assert len(errs) == doc["config"]["iterations"] + 1
    assert errs[-1] < errs[0], errs  # seeded: the same numbers on every run
    for run in doc["per_run"]:  # the bound never rises within a run
        assert all(b <= a for a, b in zip(run["objectives"], run["objectives"][1:]))
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["relative_ood_error"] == doc["relative_ood_error"]
    if name == "burgers":
        assert set(saved["err_vs_n"]) == {"ama", "initial", "qbc", "coreset"}
        assert (tmp_path / "err_vs_n.png").exists()
    if name == "darcy":
        assert (tmp_path / "error_fields.png").exists()


def test_tiny_operator_study_checkpoints_and_grows_by_runs(tmp_path, monkeypatch):
    written = []
    operators.write_outputs(operators.run("ntd", "tiny", runs=1), tmp_path)
    previous = json.loads((tmp_path / "results.json").read_text())
    calls = []
    real = operators.run_ama
    monkeypatch.setattr(operators, "run_ama", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    doc = operators.run("ntd", "tiny", runs=3, previous=previous,
                        checkpoint=lambda d: written.append(operators.write_outputs(d, tmp_path)))
    assert calls == [1, 2] and len(written) == 1  # run 0 reused; a checkpoint after run 1, not after the last
    assert doc["runs"] == 3 and doc["per_run"][0]["errors"] == previous["per_run"][0]["errors"]
    assert json.loads((tmp_path / "results.json").read_text())["runs"] == 2  # the checkpoint had two runs
    assert operators.reusable_runs(previous, "ntd", dict(operators.PRESETS["ntd"]["tiny"], runs=5), "bound")
    # other settings, another study or another selection rule: nothing is reused
    assert operators.reusable_runs(previous, "ntd", dict(operators.PRESETS["ntd"]["tiny"], grid=11), "bound") == {}
    assert operators.reusable_runs(previous, "darcy", operators.PRESETS["ntd"]["tiny"], "bound") == {}
    assert operators.reusable_runs(previous, "ntd", operators.PRESETS["ntd"]["tiny"], "validation") == {}
    # results made before the paper's law of the test parameters (no q_law) are the "unit" law's
    old = {**previous, "config": {k: v for k, v in previous["config"].items() if k != "q_law"}}
    assert operators.reusable_runs(old, "ntd", operators.PRESETS["ntd"]["tiny"], "bound") == {}
    assert operators.reusable_runs(old, "ntd", dict(operators.PRESETS["ntd"]["tiny"], q_law="unit"), "bound")


def test_tiny_rte_table_checkpoints_and_grows_by_trials(tmp_path, monkeypatch):
    written = []
    first = rte.run("tiny", runs=1, checkpoint=lambda d: written.append(rte.write_outputs(d, tmp_path)))
    assert len(written) == 1 and (tmp_path / "results.json").exists()  # one checkpoint per trial
    previous = json.loads((tmp_path / "results.json").read_text())
    assert previous["results"]["2"]["10"]["optimized"]["ci95"] is None  # no interval from one trial
    calls = []
    real = rte.run_one
    monkeypatch.setattr(rte, "run_one", lambda *a, **k: calls.append(a[5]) or real(*a, **k))
    doc = rte.run("tiny", runs=2, previous=previous)
    assert calls == [1] and doc["reused_trials"] == 1  # trial 0 reused, only trial 1 computed
    trials = doc["results"]["2"]["10"]["trials"]
    assert trials[0]["errors"] == first["results"]["2"]["10"]["trials"][0]["errors"]
    rte.write_outputs(doc, tmp_path)
    row = doc["results"]["2"]["10"]
    assert row["optimized"]["mean"] < row["initial"]["mean"]
    assert row["optimized"]["ci95"] > 0
    md = (tmp_path / "results.md").read_text()
    assert "| 2 |" in md
    # E_Q(0) beside the bound: the mean squared L^2 norm of the held-out outputs, members weighted equally
    oracle = rte.make_oracle({"name": "rte", "params": {"knudsen": 2.0, "grid": 11, "directions": 12}})
    w = oracle.output_grid(11 * 11)[1]
    tests = rte.test_set(oracle, rte.TestMeasure(11), rte.PRESETS["tiny"]["n_test"])
    assert doc["zero_error"]["2"] == pytest.approx(np.mean([np.mean((Y**2 * w).sum(1)) for _, Y in tests]))
    assert "## The bound against the error it bounds: eps = 2, N = 10 (mean over 2 trials)" in md
    first_row = operators.bound_rows(trials, doc["zero_error"]["2"])[0]
    assert first_row["measured"] == pytest.approx(np.mean([t["errors"][0] ** 2 for t in trials]) * doc["zero_error"]["2"])
    assert (tmp_path / "runtime.png").stat().st_size > 0
    # results written before the select setting existed were made with the paper's (bound) rule
    legacy = json.loads(json.dumps(previous))
    legacy["config"].pop("select")
    assert len(rte.reusable_trials(legacy, {**rte.PRESETS["tiny"], "select": "bound"})) == 1
    assert rte.reusable_trials(legacy, {**rte.PRESETS["tiny"], "select": "validation"}) == {}
    # trials made with other settings are never reused
    previous["config"]["epochs"] += 1
    assert rte.reusable_trials(previous, rte.PRESETS["tiny"]) == {}


def test_k_center_greedy_picks_the_farthest_points():
    f = np.array([[0.0, 0], [0.1, 0], [5, 0], [0, 3], [5.1, 0]])
    assert k_center_greedy(f, np.array([0]), 2).tolist() == [4, 3]
    assert k_center_greedy(f, np.array([], dtype=int), 1).tolist() == [0]


def test_qbc_scores_are_the_committee_spread():
    class Const:
        def __init__(self, v):
            self.v = v

        def predict(self, U):
            return np.full((len(U), 2), self.v) * U[:, :1]

    U = np.array([[0.0], [1.0], [2.0]])
    s = qbc_scores([Const(0.0), Const(2.0)], U)
    np.testing.assert_allclose(s, [0.0, 2.0, 8.0])  # mean over members of the squared deviation, summed


def test_bound_report_puts_the_bound_beside_the_error_it_bounds():
    doc = {"zero_error": 4.0, "relative_ood_error": [{}, {}, {}],
           "per_run": [{"errors": [1.0, 0.5, 0.25], "objectives": [8.0, None, 6.0]},
                       {"errors": [1.0, 0.5], "objectives": [8.0, 7.0]}]}  # a run that stopped early
    rows = operators.bound_report(doc)
    assert rows[0] == {"bound": 8.0, "measured": 4.0, "zero": 4.0, "bound_over_measured": 2.0, "bound_over_zero": 2.0}
    assert rows[1]["bound"] == 7.5 and rows[1]["measured"] == 1.0  # None carried: 8 (run 0), 7 (run 1)
    assert rows[2]["bound"] == 6.5 and rows[2]["measured"] == (0.25 + 1.0) / 2  # run 1 carries its last
