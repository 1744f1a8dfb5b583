"""The operator-budget study (lwl.experiments.operator_budget) at its smoke preset."""

import numpy as np
import pytest

from lwl.experiments import operator_budget


@pytest.mark.slow
def test_the_smoke_study_counts_every_solve_and_writes_its_tables(tmp_path, monkeypatch):
    doc = operator_budget.run("smoke", out=tmp_path)
    (row,) = doc["rows"]
    cell = row["budgets"]["60"]
    assert cell["design_solves"] == cell["labels_used"] == 60 and cell["within_budget"]
    # held out, and 2 draws of each comparator (Q's law, theta0, CoreSet), each of 60 solves
    assert cell["audit_solves"] == 3 * 30 + 3 * 2 * 60
    assert set(cell["comparisons"]) == {"mixture", "initial", "coreset"}
    assert all(c["other_err"] > 0 for c in cell["comparisons"].values())
    assert doc["summary"]["60"]["runs"] == 1 and doc["summary"]["60"]["within_budget"]
    outcomes = doc["summary"]["60"]["mixture"]
    assert sum(outcomes.values()) == 1 and outcomes[cell["comparisons"]["mixture"]["outcome"]] == 1
    paths = operator_budget.write_outputs(doc, tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert [p.name for p in paths] == ["results.json", "results.md"] and "| darcy | 0 | 60 | 60 |" in md
    assert "vs CoreSet" in md and "QbC" not in md.split("\n\n")[2]  # the table names only what ran

    def no_job(*args):  # a rerun in the same folder resumes: every row is there already
        raise AssertionError("a finished row was run again")

    monkeypatch.setattr(operator_budget, "run_budget", no_job)
    again = operator_budget.run("smoke", out=tmp_path)
    assert again["rows"] == doc["rows"]


def test_a_counting_oracle_counts_every_row_and_is_otherwise_its_oracle():
    from lwl.oracles import make_oracle
    from lwl.oracles.counting import CountingOracle

    darcy = make_oracle({"name": "darcy"})
    s = CountingOracle(darcy)
    x = np.zeros((3, 16))
    np.testing.assert_array_equal(s.label(x), darcy.label(x))
    assert s.solves == s.labels == 3
    s.label(x[:1])
    assert s.solves == 4 and s.output_grid(16)[0].shape == darcy.output_grid(16)[0].shape


def test_a_larger_preset_keeps_the_rows_of_a_smaller_one_that_made_the_same_jobs(tmp_path):
    """The full preset (one more budget) resumes from the quick preset's rows.json; a study with
    other job settings (another DeepONet) keeps nothing."""
    import json

    quick = {k: list(v) if isinstance(v, tuple) else v for k, v in operator_budget.PRESETS["quick"].items()}
    full = {k: list(v) if isinstance(v, tuple) else v for k, v in operator_budget.PRESETS["full"].items()}
    cell = {"seconds": 1.0}
    rows = [{"problem": "ntd", "seed": 1, "budgets": {"250": cell, "1000": cell}, "unbudgeted": None},
            {"problem": "ntd", "seed": 7, "budgets": {"250": cell}, "unbudgeted": None}]
    (tmp_path / "rows.json").write_text(json.dumps({"settings": quick, "rows": rows}))
    kept = operator_budget.earlier_rows(tmp_path / "rows.json", full)
    assert list(kept) == [("ntd", 1)] and set(kept[("ntd", 1)]["budgets"]) == {"250", "1000"}
    smaller = {**full, "budgets": [250]}
    assert set(operator_budget.earlier_rows(tmp_path / "rows.json", smaller)[("ntd", 1)]["budgets"]) == {"250"}
    other = {**full, "model": {"iterations": 50}}
    assert operator_budget.earlier_rows(tmp_path / "rows.json", other) == {}


def test_a_smaller_preset_run_in_a_larger_ones_folder_keeps_its_rows(tmp_path, monkeypatch):
    """Saving merges per (problem, seed) and budget: a run of fewer budgets in the folder of a
    run of more keeps every finished cell there, and reruns none."""
    import json

    ran = []

    def fake_job(name, cfg, seed, B):
        ran.append(B)
        return {"seconds": 0.0, "within_budget": True, "comparisons": {"mixture": {"outcome": "tie"}}}

    small = {**operator_budget.PRESETS["smoke"], "budgets": (60,)}
    large = {**operator_budget.PRESETS["smoke"], "budgets": (60, 120)}
    monkeypatch.setitem(operator_budget.PRESETS, "small", small)
    monkeypatch.setitem(operator_budget.PRESETS, "large", large)
    monkeypatch.setattr(operator_budget, "run_budget", fake_job)
    operator_budget.run("large", out=tmp_path)
    assert ran == [60, 120]
    doc = operator_budget.run("small", out=tmp_path)
    assert ran == [60, 120] and doc["reused_cells"] == 1 and list(doc["rows"][0]["budgets"]) == ["60"]
    (row,) = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert set(row["budgets"]) == {"60", "120"}  # the larger run's cell is still there


def test_the_study_runs_the_rte_example_as_a_budgeted_particle_job():
    """The inline RTE problem is examples/rte_particles.json but for the members' sizes (the
    study's held-out samples), and its budgeted job runs the particle design on the budget layer."""
    import json
    from pathlib import Path

    from lwl.design.budgeted_particles import BudgetedParticleAMA
    from lwl.runner import build_stepper
    from lwl.spec import parse_job_spec

    example = json.loads((Path(__file__).resolve().parents[3] / "examples" / "rte_particles.json").read_text())
    spec = {**operator_budget.PROBLEMS["rte"](), "seed": example["seed"]}
    for m in spec["test_distributions"]["members"]:
        m["size"] = example["test_distributions"]["members"][0]["size"]
    assert parse_job_spec(spec).model_dump() == parse_job_spec(example).model_dump()
    cfg = operator_budget.PRESETS["quick"]
    job = operator_budget.problem_spec("rte", cfg, 1)
    assert all(m["size"] == 40 + cfg["heldout"] for m in job["test_distributions"]["members"])
    job["budget"] = 250
    assert isinstance(build_stepper(parse_job_spec(job)), BudgetedParticleAMA)


@pytest.mark.slow
def test_the_unbudgeted_row_tells_the_designs_solves_from_its_evaluations(tmp_path):
    """The unbudgeted job's solves are the design's, counted by the solver up to its last step; the
    held-out solves of its own evaluation are counted apart (Q's validation_per_member per member
    for ama)."""
    cfg = {**operator_budget.PRESETS["smoke"], "budgets": (), "unbudgeted": True}
    row = operator_budget.run_problem("darcy", cfg, 0)
    unb = row["unbudgeted"]
    spec = operator_budget.problem_spec("darcy", cfg, 0)
    tests = spec["test_distributions"]
    assert unb["evaluation_solves"] == len(tests["members"]) * tests["validation_per_member"]
    assert unb["solves"] == unb["labels_used"] > 0  # the design's own count agrees with the solver's


@pytest.mark.slow
def test_cells_in_two_processes_give_the_rows_of_one(tmp_path, monkeypatch):
    """``workers`` 2 runs the cells in spawned single-threaded processes, saves each as it finishes,
    and returns the rows a single process gives (every cell is deterministic from its spec and seed),
    budgets in the preset's order."""
    import json

    import torch
    from threadpoolctl import threadpool_limits

    # the larger budget first: it is submitted first and finishes last, so the rows' order is restored
    two = {**operator_budget.PRESETS["smoke"], "budgets": (60, 40)}
    monkeypatch.setitem(operator_budget.PRESETS, "two", two)
    parallel = operator_budget.run("two", out=tmp_path / "p", workers=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as each worker runs
    try:
        with threadpool_limits(1):
            serial = operator_budget.run("two", out=tmp_path / "s")
    finally:
        torch.set_num_threads(threads)
    (p,), (s,) = parallel["rows"], serial["rows"]
    assert list(p["budgets"]) == list(s["budgets"]) == ["60", "40"]
    for B in ("40", "60"):
        assert p["budgets"][B]["labels_used"] == s["budgets"][B]["labels_used"] == int(B)
        assert p["budgets"][B]["selected"] == s["budgets"][B]["selected"]
        np.testing.assert_allclose(p["budgets"][B]["err"], s["budgets"][B]["err"], rtol=1e-5)
    saved = json.loads((tmp_path / "p" / "rows.json").read_text())["rows"]
    assert set(saved[0]["budgets"]) == {"40", "60"} and parallel["workers"] == 2


def test_the_examples_preset_is_the_one_its_committed_rows_were_made_with():
    """docs/results/operator-budget-examples (the examples' DeepONet iterations) resumes and reruns
    as ``--preset examples``; the quick and full presets train lwl's default iterations instead."""
    import json
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "docs" / "results" / "operator-budget-examples"
    saved = json.loads((folder / "rows.json").read_text())["settings"]
    examples = {k: list(v) if isinstance(v, tuple) else v for k, v in operator_budget.PRESETS["examples"].items()}
    assert saved == examples
    assert operator_budget.PRESETS["quick"]["model"] == operator_budget.PRESETS["full"]["model"] == {"iterations": 2000}
    spec = operator_budget.problem_spec("burgers", operator_budget.PRESETS["quick"], 0)
    assert spec["model"]["iterations"] == 2000 and spec["model"]["branch"] == [64, 64]


def test_an_interrupted_study_reports_what_finished_and_says_it_is_partial(tmp_path):
    """saved_study reads the rows an interrupted run saved: only the finished cells are summarised,
    and the tables say how many of the preset's cells are missing."""
    import json

    quick = {k: list(v) if isinstance(v, tuple) else v for k, v in operator_budget.PRESETS["quick"].items()}
    cmp = {k: {"outcome": o, "other_err": 0.1, "ratio": 0.9, "ratio_interval": [0.8, 1.0]}
           for k, o in (("mixture", "better"), ("initial", "better"), ("qbc", "tie"), ("coreset", "worse"))}
    cell = {"seconds": 60.0, "audit_seconds": 60.0, "within_budget": True, "comparisons": cmp, "design_solves": 250,
            "selected": "q_mixture", "err": 0.09, "validation_verdict": "tie"}
    rows = [{"problem": "ntd", "seed": 1, "budgets": {"250": cell}, "unbudgeted": None}]
    (tmp_path / "rows.json").write_text(json.dumps({"settings": quick, "rows": rows}))
    doc = operator_budget.saved_study("quick", tmp_path)
    assert list(doc["summary"]) == ["250"] and doc["summary"]["250"]["mixture"] == {"better": 1, "tie": 0, "worse": 0}
    assert doc["compute_seconds"] == 120.0
    md = operator_budget.markdown(doc)
    assert "Partial: 1 of the preset's 24 budgeted cells" in md and "| ntd | 1 | 250 | 250 | q_mixture |" in md
    assert operator_budget.saved_study("examples", tmp_path)["rows"] == []  # other jobs: nothing reported
