import numpy as np
import pytest

from lwl.experiments import robustness
from lwl.spec import parse_job_spec


def test_problem_list_covers_the_variations_and_is_fixed():
    ps = robustness.problems(32)
    assert ps == robustness.problems(32)
    assert {p.oracle for p in ps} == {"sobol_g", "friedman1", "friedman2", "kernel_expansion"}
    assert {p.start for p in ps} == set(robustness.STARTS)
    assert {p.scale for p in ps} == set(robustness.SCALES)
    assert min(p.dim for p in ps) == 2 and max(p.dim for p in ps) == 10
    assert min(p.members for p in ps) == 1 and max(p.members for p in ps) >= 9


def test_problem_specs_use_defaults_and_their_starts():
    cfg = dict(size=400, validation=100, iterations=None, lengthscale_factor=None)
    for p in robustness.problems(8):
        doc = robustness.problem_spec(p, **cfg)
        assert "algorithm" not in doc and "model" not in doc and "evaluation" not in doc
        spec = parse_job_spec(doc)
        assert spec.algorithm.optimizer == "adaptive" and spec.oracle.params["scale"] == p.scale
        if p.start == "default":
            assert spec.family.name == "auto"  # no family block: lwl's default
        if p.start == "far":
            centre = np.mean([m.gaussian.mean for m in spec.test_distributions.members], axis=0)
            assert np.linalg.norm(np.array(spec.family.mean) - centre) > 3.9 * np.sqrt(p.dim)


@pytest.mark.slow
def test_smoke_preset_writes_the_study(tmp_path):
    doc = robustness.run("smoke")
    assert doc["summary"]["problems"] == 4 and len(doc["problems"]) == 4
    assert doc["summary"]["diverged"] == 0
    for row in doc["problems"]:
        assert np.isfinite(row["err"]) and set(row["baselines"]) == {"normal", "barycenter", "mixture"}
        assert row["iterations_run"] <= 20
    paths = robustness.write_outputs(doc, tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)
    assert "| problem |" in (tmp_path / "results.md").read_text()


def test_a_rerun_of_some_problems_keeps_the_other_rows(monkeypatch):
    """--columns with --resume: only the named problems run; the rest come from the earlier
    results, the rerun is recorded, and a different preset's results are refused."""
    ran = []

    def fake_row(p, cfg):  # the rows' contents are the study's business, not this test's
        ran.append(p.key)
        return {"key": p.key, "err": 0.1 if len(ran) > 4 else 0.2, "initial_err": 0.3, "diverged": False,
                "baselines": {"normal": 0.3, "barycenter": 0.4, "mixture": 0.25}, "best_of_mixture_barycenter": 0.25,
                "seconds": 1.0}

    monkeypatch.setattr(robustness, "run_problem", fake_row)
    first = robustness.run("smoke")
    keys = [r["key"] for r in first["problems"]]
    assert ran == keys
    second = robustness.run("smoke", problems_run=["p01", keys[3]], previous=first)
    assert ran[4:] == [keys[1], keys[3]]  # only those ran, in the study's order
    assert [r["key"] for r in second["problems"]] == keys
    assert [r["err"] for r in second["problems"]] == [0.2, 0.1, 0.2, 0.1]
    assert second["problems"][0] is first["problems"][0]
    assert second["reruns"][-1]["problems"] == [keys[1], keys[3]]
    assert second["reruns"][-1]["why"].startswith("rerun with --columns --resume by lwl ")
    assert second["summary"]["win_rate"]["mixture"] == 1.0 and first["summary"]["win_rate"]["mixture"] == 1.0
    assert second["summary"]["median_ratio_to_best_of_mixture_barycenter"] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="no problem 'p99'"):
        robustness.run("smoke", problems_run=["p99"])
    with pytest.raises(ValueError, match="preset 'smoke'"):
        robustness.run("quick", problems_run=["p01"], previous=first)


def test_divergence_means_runaway_parameters_or_blown_up_predictions():
    sane = {"cov_ratio_max": 3.0, "cov_ratio_min": 0.1, "mean_offset": 2.0}
    assert not robustness.diverged(0.9, 1.0, sane)
    assert not robustness.diverged(1.2, 1.0, sane)  # worse than the start, but not a divergence
    assert robustness.diverged(1.6, 1.0, sane) and robustness.diverged(float("nan"), 1.0, sane)
    assert robustness.diverged(0.5, 1.0, {**sane, "cov_ratio_max": 1e15})  # the old default's runaway
    assert robustness.diverged(0.5, 1.0, {**sane, "mean_offset": 1e7})
    assert robustness.diverged(0.5, 1.0, {**sane, "cov_ratio_min": 0.0})


def test_summary_counts_a_baseline_at_its_better_lengthscale():
    row = {"key": "p", "start": "default", "scale": 1.0, "err": 0.2, "initial_err": 0.5, "diverged": False,
           "baselines": {"normal": 0.5, "barycenter": 0.3, "mixture": 0.25},
           "baselines_own_lengthscale": {"mixture": 0.15, "barycenter": 0.4},
           "best_of_mixture_barycenter": 0.15, "iterations_run": 10, "selected_iteration": 5, "seconds": 1.0}
    s = robustness.summary([row, {**row, "baselines_own_lengthscale": {}, "best_of_mixture_barycenter": 0.25}])
    assert s["win_rate"]["mixture"] == 0.5 and s["win_rate"]["barycenter"] == 1.0
    assert s["win_rate"]["better_of_mixture_barycenter"] == 0.5
    doc = {"preset": "full-selected", "settings": {"lengthscale_factor": None}, "problems": [row], "summary": s,
           "wall_seconds": 1.0}
    md = robustness.markdown(doc)
    assert "| 0.250 / 0.150 | loss |" in md and "design's / own" in md
