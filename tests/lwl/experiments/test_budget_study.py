"""The budget study (lwl.experiments.budget) at its smoke size: every run within its budget,
every comparison three-valued, the outputs written."""

import json

import pytest

from lwl.design.budgeted_bilevel import BudgetedBilevel
from lwl.experiments import budget


@pytest.mark.slow
def test_smoke_study_holds_every_budget_and_writes_its_outputs(tmp_path):
    doc = budget.run("smoke")
    (B,) = doc["settings"]["budgets"]
    assert len(doc["rows"]) == 2
    for row in doc["rows"]:
        cell = row["budgets"][str(B)]
        assert cell["within_budget"] and cell["labels_used"] == B
        assert cell["mixture"]["outcome"] in ("better", "tie", "worse")
        assert cell["nipv"]["outcome"] in ("better", "tie", "worse")
        assert row["unbudgeted"]["design_labels"] > B  # the paper's design pays far more than the budget
    s = doc["summary"][str(B)]
    assert s["within_budget"] == s["runs"] == 2
    assert s["mixture"]["better"] + s["mixture"]["tie"] + s["mixture"]["worse"] == 2
    paths = budget.write_outputs(doc, tmp_path)
    assert {p.name for p in paths} == {"results.json", "results.md", "err_vs_labels.png"}
    assert json.loads((tmp_path / "results.json").read_text())["experiment"] == "budget"
    assert "| 120 |" in (tmp_path / "results.md").read_text()


@pytest.mark.slow
def test_worker_processes_give_the_rows_of_one_process():
    one, two = budget.run("smoke"), budget.run("smoke", workers=2)
    assert [(r["problem"], r["seed"]) for r in two["rows"]] == [(r["problem"], r["seed"]) for r in one["rows"]]
    for a, b in zip(one["rows"], two["rows"]):
        for B, cell in a["budgets"].items():
            assert b["budgets"][B]["err"] == cell["err"]  # seeded jobs: the same numbers in any process
            assert b["budgets"][B]["mixture"]["other_err"] == cell["mixture"]["other_err"]
    assert two["workers"] == 2


@pytest.mark.slow
def test_an_interrupted_study_resumes_from_its_checkpoint_with_the_same_rows():
    saved = []
    full = budget.run("smoke", checkpoint=lambda doc: saved.append(json.loads(json.dumps(doc))))
    assert [len(d["rows"]) for d in saved] == [1, 2]  # written after every problem
    # interrupted after the first problem: the rerun computes only the second
    ran = []
    resumed = budget.run("smoke", previous=saved[0], progress=ran.append)
    assert resumed["reused_rows"] == 1
    assert sum(msg.endswith("reused") for msg in ran) == 1
    assert [r["problem"] for r in resumed["rows"]] == [r["problem"] for r in full["rows"]]
    assert resumed["rows"][1]["budgets"]["120"]["err"] == full["rows"][1]["budgets"]["120"]["err"]
    # other settings: nothing reused
    other = dict(saved[0], settings=dict(saved[0]["settings"], size=999))
    assert budget.reusable_rows(other, budget.PRESETS["smoke"]) == {}


@pytest.mark.slow
def test_the_gp_study_judges_with_the_gp_and_states_the_krr_pipeline_of_the_krr_study(tmp_path):
    """``--model gp``: every job within its budget, compared with Q's mixture + GP and NIPV + GP;
    its KRR pipeline is the krr study's own job (the same selection and labels, scored on the gp
    study's larger held-out population), and no krr row is reused for it."""
    gp, krr = budget.run("smoke", model="gp"), budget.run("smoke")
    assert gp["settings"]["model"] == "gp" and "model" not in krr["settings"]
    for row, krr_row in zip(gp["rows"], krr["rows"]):
        cell = row["budgets"]["120"]
        assert cell["within_budget"] and cell["mixture"]["outcome"] in ("better", "tie", "worse")
        assert cell["nipv"]["outcome"] in ("better", "tie", "worse")
        # the same job (its selection and labels); its Err on the gp study's larger held-out
        # population, within the krr study's interval on the job's own held-out points
        kcell = krr_row["budgets"]["120"]
        assert cell["krr_pipeline"]["selected"] == kcell["selected"]
        assert cell["krr_pipeline"]["labels_used"] == kcell["labels_used"]
        assert cell["krr_pipeline"]["err"] != kcell["err"]
        assert kcell["err_interval"][0] <= cell["krr_pipeline"]["err"] <= kcell["err_interval"][1]
    assert budget.reusable_rows(krr, {**budget.PRESETS["smoke"], "model": "gp"}) == {}
    # rows fitted on 300 points at every d (before the fitting-subset rule) are not reused either
    gp_cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in gp["settings"].items()}
    assert gp["settings"]["gp_fit_points"] == "max(300, 30 (d + 2))" and budget.reusable_rows(gp, gp_cfg)
    before = dict(gp, settings={k: v for k, v in gp["settings"].items() if k != "gp_fit_points"})
    assert budget.reusable_rows(before, gp_cfg) == {}
    # nor rows served without the final fit (before GPSpec.final_fit_points)
    assert gp["settings"]["gp_final_fit_points"] == 2000
    unrefined = dict(gp, settings={k: v for k, v in gp["settings"].items() if k != "gp_final_fit_points"})
    assert budget.reusable_rows(unrefined, gp_cfg) == {}
    # nor rows judged on the job's own held-out points (before the larger held-out population)
    assert gp["settings"]["heldout_per_member"] == 1000 and "gp_heldout_per_member" not in gp["settings"]
    small = dict(gp, settings={k: v for k, v in gp["settings"].items() if k != "heldout_per_member"})
    assert budget.reusable_rows(small, gp_cfg) == {}
    s = gp["summary"]["120"]["krr_pipeline"]
    assert s["compared"] == 2 and sum(s["lowest"].values()) == 2
    a = gp["summary"]["120"]["validation_verdict"]  # the job's own verdict against the held-out one
    heldout = [r["budgets"]["120"]["mixture"]["outcome"] for r in gp["rows"]]
    own = [r["budgets"]["120"]["validation_verdict"]["outcome"] for r in gp["rows"]]
    assert a["compared"] == 2 and a["agree"] == sum(v == h for v, h in zip(own, heldout))
    assert sum(a["pairs"].values()) == 2
    paths = budget.write_outputs(gp, tmp_path)
    text = (tmp_path / "results.md").read_text()
    assert "KRR pipeline Err" in text and "against held-out data" in text and len(paths) == 3
    assert "Held-out points: 1,000 per member of Q" in text


def test_the_held_out_population_extends_the_jobs_own_q_samples():
    """The gp study's larger held-out population: the job's validation points unchanged, its
    held-out points the first of the larger population's, ``heldout_per_member`` per member."""
    from lwl.q_samples import MetaTestSamples
    from lwl.spec import parse_job_spec

    _, spec = budget.problem_specs(budget.PRESETS["smoke"])[0]
    tests = parse_job_spec(budget._with(spec, 0, algorithm={"name": "bilevel"}, budget=120)).test_distributions
    small = MetaTestSamples.from_spec(tests, 0)
    big = MetaTestSamples.from_spec(budget.heldout_population(tests, {"heldout_per_member": 700}), 0)
    assert [len(h) for h in big.heldout] == [700] * len(small.members)
    for a, b in zip(small.validation, big.validation):
        assert a.shape == b.shape and (a == b).all()
    for a, b in zip(small.heldout, big.heldout):
        assert (a == b[: len(a)]).all() and len(b) > len(a)
    assert budget.heldout_population(tests, {}) is tests  # the krr study: the job's own Q


def test_gp_fit_draws_reach_every_gp_of_the_study_and_a_chosen_problem_study_says_so(tmp_path, monkeypatch):
    """``--gp-fit-draws 2 --columns KEY``: a setting of its own (rows of one draw are not reused
    for it), every GP the study fits (the job's served one, the comparators', the KRR data's)
    goes through the draws, and results.md names the chosen problems instead of calling the
    study partial."""
    from lwl.models.gp import GaussianProcess

    key = budget.problem_specs(budget.PRESETS["smoke"])[0][0]
    calls = []
    original = GaussianProcess._fit_best_draw

    def counted(self, X, y):
        calls.append(int(self.fit_draws))
        return original(self, X, y)

    monkeypatch.setattr(GaussianProcess, "_fit_best_draw", counted)
    one = budget.run("smoke", model="gp", problems=[key])
    assert calls == [] and "gp_fit_draws" not in one["settings"]
    two = budget.run("smoke", model="gp", gp_fit_draws=2, problems=[key])
    # the job's served fit, its own verdict's, 2 mixture draws and the KRR pipeline's data: >= 4
    assert len(calls) >= 4 and set(calls) == {2}
    assert two["settings"]["gp_fit_draws"] == 2 and two["problems"] == [key] and len(two["rows"]) == 1
    cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in two["settings"].items()}
    assert budget.reusable_rows(one, cfg) == {} and budget.reusable_rows(two, cfg)
    budget.write_outputs(two, tmp_path)
    text = (tmp_path / "results.md").read_text()
    assert "every GP fitted 2 times" in text and f"Problems chosen with `--columns`: {key}" in text
    assert "Partial" not in text


@pytest.mark.slow
def test_rerun_runs_the_named_problems_again_and_keeps_the_other_rows(tmp_path):
    """``--rerun KEY``: the named problem's row is computed again (its earlier numbers replaced),
    every other row is the earlier study's as it was; a key the preset lacks, or no earlier rows
    made with these settings, is an error rather than a silent full run."""
    full = budget.run("smoke")
    first, second = (r["problem"] for r in full["rows"])
    earlier = json.loads(json.dumps(full))
    for row in earlier["rows"]:  # marks: a kept row keeps them, a rerun row loses them
        row["budgets"]["120"]["err"] = -1.0
    earlier["rerun"] = [first]  # an earlier --rerun: still named after this one
    ran = []
    doc = budget.run("smoke", previous=earlier, rerun=[second], progress=ran.append)
    kept, again = doc["rows"]
    assert (kept["problem"], again["problem"]) == (first, second)
    assert kept["budgets"]["120"]["err"] == -1.0
    assert again["budgets"]["120"]["err"] == full["rows"][1]["budgets"]["120"]["err"]  # seeded: the same job
    assert doc["reused_rows"] == 1 and doc["rerun"] == [first, second] and "problems" not in doc
    assert sum(msg.endswith("reused") for msg in ran) == 1
    budget.write_outputs(doc, tmp_path)
    assert f"`--rerun`, or whose left-out check decided otherwise than the check's current rule): {first}, {second}" in (
        tmp_path / "results.md").read_text()
    with pytest.raises(ValueError, match="no problem nope"):
        budget.run("smoke", previous=earlier, rerun=["nope"])
    with pytest.raises(ValueError, match="no rows made with these settings"):
        budget.run("smoke", previous=None, rerun=[second])
    with pytest.raises(ValueError, match="name at least one problem"):
        budget.run("smoke", previous=earlier, rerun=[])
    chosen = dict(earlier, problems=[first], rows=earlier["rows"][:1])  # a --columns study
    with pytest.raises(ValueError, match=f"{second} not among the earlier study's problems"):
        budget.run("smoke", previous=chosen, rerun=[second])


def _row(problem: str, *checks) -> dict:
    return {"problem": problem, "seed": 0, "budgets": {str(i): {"left_out": c} for i, c in enumerate(checks)}}


def test_rows_the_current_left_out_rule_decides_otherwise_are_not_reused(monkeypatch):
    """A row is reused only if its left-out checks decide as the current rule does, recomputed from
    the recorded z and rank p. With the rank rule off (the default) a row that left points out by
    ranks alone (z below LEAVE_OUT_Z) is stale; with it on, a row made before it (no rank_p, z in
    (0, LEAVE_OUT_Z)) is stale, and so is one whose rank p now says leave out."""
    before = {"z": 1.2, "left_out": False}
    rows = [_row("stale", None, before),
            _row("kept", {**before, "rank_p": 0.3}),
            _row("by_ranks", {**before, "rank_p": 1e-5, "left_out": True}),
            _row("kept_low_p", {**before, "rank_p": 1e-5}),
            _row("high", {"z": 1.7, "left_out": True}),
            _row("negative", {"z": -0.4, "rank_p": 1e-9, "left_out": False}),
            _row("failed", {"z": None, "left_out": False, "error": "not checked"}),
            _row("krr", None),
            _row("at_bar", {"z": BudgetedBilevel.leave_out_z, "rank_p": 1e-5, "left_out": False})]
    assert [budget.decided_otherwise(r) for r in rows] == [False, False, True, False, False, False, False, False,
                                                           False]
    cfg = dict(budget.PRESETS["smoke"])
    previous = {"experiment": "budget", "settings": budget._settings(cfg), "rows": rows}
    assert sorted(k for k, _ in budget.reusable_rows(previous, cfg)) == [
        "at_bar", "failed", "high", "kept", "kept_low_p", "krr", "negative", "stale"]
    monkeypatch.setattr(BudgetedBilevel, "leave_out_rank_p", 0.05)  # the rank rule switched on
    # (at the bar, z = leave_out_z, the z rule does not leave out and the rank rule would: stale)
    assert [budget.decided_otherwise(r) for r in rows] == [True, False, False, True, False, False, False, False,
                                                           True]
    monkeypatch.setattr(BudgetedBilevel, "leave_out_z", 1.0)  # a lower bar: "kept" (z 1.2) now leaves out
    assert budget.decided_otherwise(rows[1])


def test_results_name_the_machines_of_a_study_resumed_on_another():
    """Each new row records the machine it was computed on (computed_on: CPU and BLAS kernels);
    results.md names the rows of each machine where a study's rows come from more than one, and
    says nothing where they come from one."""
    from lwl.experiments.report import environment, machine_words

    here = machine_words()
    env = environment()
    assert here.startswith(str(env["cpu"])) and "openblas" in here
    rows = [{"problem": "a", "seed": 0, "computed_on": here}, {"problem": "b", "seed": 0}]
    doc = {"rows": rows, "settings": {"seeds": [0]}}
    (line, _) = budget._machines_line(doc)
    assert f"{here}: a" in line and "not recorded (rows made before commit 3fb7692): b" in line
    rows[1]["computed_on"] = here
    assert budget._machines_line(doc) == []


def test_a_row_records_its_jobs_race_with_who_was_overtaken_and_by_which_rule():
    """race_summary: the looks of a job's race against Q's mixture as a row keeps them, so a later race
    rule can be judged on a study's rows (docs/method/budgets.md "The race's trend, measured")."""
    from lwl.experiments.budget import race_summary

    look = lambda m, z, t, **kw: {"round": m, "race": {"points_each": m, "z": z, "trend_ratio": t, **kw}}
    history = [{"round": 1}, look(300, -3.0, None), look(600, -1.0, 0.95),
               look(900, 1.2, 1.10, overtook="given", outcome="rival won", by="z"), {"round": 9}]
    assert race_summary(history) == {"looks": 3, "max_points_each": 900, "last_z": 1.2, "last_trend_ratio": 1.10,
                                     "overtook": "given", "by": "z"}
    held = race_summary(history[:3])
    assert held["looks"] == 2 and held["overtook"] is None and held["by"] is None and held["last_z"] == -1.0
    assert race_summary([{"round": 1}]) is None


def test_problems_are_named_by_key_or_prefix_and_an_unknown_one_is_refused():
    """``--columns p00`` picks the problem whose key starts p00- (as the robustness study does); a
    name that matches no problem is refused naming it, never a study of no rows."""
    from lwl.experiments import budget

    keys = [k for k, _ in budget.problem_specs(budget.PRESETS["quick"])]
    p00 = next(k for k in keys if k.startswith("p00-"))
    with pytest.raises(ValueError, match="p99"):
        budget.run("quick", problems=["p99"])
    from lwl.experiments.robustness import pick_keys

    assert pick_keys(keys, ["p00", keys[0]]) == [keys[0], p00]


def test_problems_run_at_several_seeds_get_a_verdict_over_their_seeds():
    """over_seeds: a problem with two or more seeds is judged on its rows' Err ratios together (the
    design's own draw included); a problem with one seed, or a seed without a ratio, gets none; results.md
    shows the table."""
    from lwl.experiments.budget import _over_seeds_lines, over_seeds

    def row(problem, seed, ratio):
        return {"problem": problem, "seed": seed, "budgets": {"2000": {"mixture": {"ratio": ratio}}}}

    rows = ([row("p04", s, r) for s, r in enumerate([1.13, 0.95, 1.04, 0.91, 1.0])]
            + [row("p12", s, r) for s, r in enumerate([1.3, 1.25, 1.35])]
            + [row("g1", 0, 0.2)] + [row("p03", s, r) for s, r in enumerate([0.5, None])])
    seeds = over_seeds(rows, 2000)
    assert sorted(seeds["problems"]) == ["p04", "p12"]
    assert (seeds["better"], seeds["tie"], seeds["worse"]) == (0, 1, 1)
    assert seeds["problems"]["p04"]["outcome"] == "tie" and seeds["problems"]["p12"]["outcome"] == "worse"
    assert over_seeds(rows[-3:], 2000) is None
    doc = {"settings": {"budgets": [2000]}, "summary": {"2000": {"over_seeds": seeds}}}
    text = "\n".join(_over_seeds_lines(doc))
    assert "**0 / 1 / 1**" in text and "| p04 | 5 | 1.130, 0.950, 1.040, 0.910, 1.000 |" in text
