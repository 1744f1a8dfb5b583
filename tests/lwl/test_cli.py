"""The ``lwl`` command line, run as a real subprocess."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT


def lwl(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "lwl.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=900)


@pytest.mark.slow
def test_run_the_issue_spec(tmp_path):
    proc = lwl("run", str(ROOT / "examples" / "friedman1.json"), "--out", str(tmp_path), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "result.json").read_text())
    n = len(res["history"])
    assert 0 < n <= 1000 and res["spec"]["algorithm"]["optimizer"] == "adaptive"
    # stderr is no terminal here: progress comes as log lines (throttled), the last one complete
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("design ")]
    assert lines and lines[-1].startswith(f"design {n}/{n}"), proc.stderr
    assert set(res["evaluation"]["err"]) == {"optimized", "normal", "barycenter", "mixture", "uniform"}
    # the README's job, unchanged, beats the mixture and the barycenter on held-out data
    v = res["verdict"]
    assert v["err"] < min(v["baselines"]["mixture"], v["baselines"]["barycenter"]), v
    assert "verdict: the design" in proc.stderr and "better than the best baseline" in proc.stderr
    assert res["distribution"]["family"] == "gaussian" and len(res["distribution"]["mean"]) == 5
    # the design lowers the validation error it descends
    hist = res["history"]
    assert np.mean([h["validation_err"] for h in hist[-20:]]) < hist[0]["validation_err"]
    # sampling from the written result reproduces lwl.measures.from_spec bit for bit
    out = tmp_path / "s.npy"
    assert lwl("sample", str(tmp_path / "result.json"), "-n", "7", "--seed", "3", "--out", str(out)).returncode == 0
    from lwl.measures import from_spec

    assert np.array_equal(np.load(out), from_spec(res["distribution"]).sample(7, 3))


def test_invalid_spec_names_the_field(tmp_path, issue_spec):
    issue_spec["family"]["cov"][1][1] = -2.0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(issue_spec))
    proc = lwl("run", str(path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert "family.cov" in proc.stderr and "positive definite" in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_dataset_member_resolved_next_to_the_spec(tmp_path, small_spec):
    np.save(tmp_path / "q0.npy", np.random.default_rng(0).standard_normal((300, 5)))
    small_spec["test_distributions"]["members"][0] = {"dataset": "q0.npy"}
    (tmp_path / "spec.json").write_text(json.dumps(small_spec))
    proc = lwl("run", str(tmp_path / "spec.json"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "result.json").read_text())["evaluation"]["held_out"] == 400


@pytest.mark.slow
def test_table1_quick_preset_orders_optimized_mixture_normal(tmp_path):
    # the preset split over two runs (as two processes would run it side by side), then joined
    for key in ("g2_d5", "g1"):
        proc = lwl("experiment", "table1", "--preset", "quick", "--columns", key, "--out", str(tmp_path / key))
        assert proc.returncode == 0, proc.stderr
    parts = ",".join(str(tmp_path / key / "results.json") for key in ("g2_d5", "g1"))
    proc = lwl("experiment", "table1", "--preset", "quick", "--join", parts, "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    assert list(doc["columns"]) == ["g1", "g2_d5"] and doc["parts"] == 2
    for key in ("g1", "g2_d5"):
        s = doc["columns"][key]["summary"]
        assert s["optimized"]["mean"] < s["mixture"]["mean"] < s["normal"]["mean"], (key, s)
        assert len(doc["columns"][key]["runs"]) == 2
    for name in ("results.md", "convergence.png", "err_vs_n.png", "covariances.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "| Ours (bilevel) |" in (tmp_path / "results.md").read_text()


@pytest.mark.slow
def test_run_a_budgeted_job_writes_its_training_set(tmp_path):
    """examples/friedman1_budget.json with the built-in oracle (a lab labels it through ask/tell)."""
    spec = json.loads((ROOT / "examples" / "friedman1_budget.json").read_text())
    spec["oracle"] = {"name": "friedman1"}
    spec["budget"] = 400
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = lwl("run", str(tmp_path / "spec.json"), "--out", str(tmp_path), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "result.json").read_text())
    with np.load(tmp_path / "training_set.npz") as z:
        X, y, out_x, out_y = z["inputs"], z["labels"], z["left_out_inputs"], z["left_out_labels"]
    # the served model's training set, and the paid labels the left-out check kept out of it: every label paid
    assert X.shape == (len(y), 5) and out_x.shape == (len(out_y), 5) and len(y) + len(out_y) == res["labels_used"]
    assert res["labels_used"] <= 400 and np.array_equal(X, np.asarray(res["training_set"]["inputs"]))
    assert np.array_equal(out_y, np.asarray(res["left_out"]["labels"]).reshape(-1))
    assert "labels used: 400 of a budget of 400" in proc.stderr
    assert "verdict at equal labels (400)" in proc.stderr and res["verdict"]["kind"] == "equal_labels"
    # the example's model: a fitted GP (the console wraps long lines: compared with whitespace folded)
    said = " ".join(proc.stderr.split())
    assert f"model gp, kernel {res['model']['kernel']})" in said
    loo = res["model_diagnosis"]["outputs"][0]["loo_err"]  # its Err on Q estimated from its own labels
    assert f"Err on Q estimated from its own labels {loo:.4f}" in said



@pytest.mark.slow
def test_run_a_budgeted_ama_job_writes_its_fields_and_every_solve_counted(tmp_path):
    """examples/darcy_ama.json with a budget of 120 solves (a small DeepONet): the training set is
    the input fields and their solution fields, and the verdict is at equal solves."""
    spec = json.loads((ROOT / "examples" / "darcy_ama.json").read_text())
    spec["model"].update(iterations=30, branch=[32], trunk=[32], latent=16)
    spec["budget"] = 120
    for m in spec["test_distributions"]["members"]:
        m["size"] = 50 + 30
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = lwl("run", str(tmp_path / "spec.json"), "--out", str(tmp_path), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "result.json").read_text())
    with np.load(tmp_path / "training_set.npz") as z:
        X, Y = z["inputs"], z["labels"]
    out = len(res["left_out"]["labels"])  # paid solves of dropped candidates kept out of the served DeepONet
    assert X.shape == Y.shape == (120 - out, 256) and res["labels_used"] == 120
    assert "labels used: 120 of a budget of 120" in proc.stderr
    assert res["evaluation"]["kind"] == "equal_solves" and set(res["verdict"]["outcomes"]) == {"mixture", "initial"}
    said = " ".join(proc.stderr.split())
    assert res["model"]["model"] == "deeponet" and "model deeponet)" in said  # the served DeepONet, no kernel

# -- the command line's own surface: version, -h, usage lines, help texts ---------------------

def _help(*args) -> str:
    from typer.testing import CliRunner

    from lwl.cli import app

    result = CliRunner().invoke(app, [*args], prog_name="lwl", env={"COLUMNS": "200", "TERMINAL_WIDTH": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def _commands() -> dict:
    import typer.main

    from lwl.cli import app

    return typer.main.get_command(app).commands


def test_version():
    from lwl import __version__

    proc = lwl("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"lwl {__version__}", proc.stdout + proc.stderr


def test_every_command_takes_h_and_writes_its_arguments_in_capitals():
    commands = _commands()
    assert {"run", "experiment", "sample", "report", "serve", "worker", "ask", "tell",
            "submit", "status", "wait", "training-set"} <= set(commands)
    assert "-h" in _help("-h") and "--version" in _help("-h")
    for name in commands:
        out = _help(name, "-h")
        usage = next(line for line in out.splitlines() if "Usage:" in line)
        assert f"lwl {name} [OPTIONS]" in usage and "{" not in usage, usage
    assert "lwl run [OPTIONS] SPEC_PATH" in _help("run", "-h")
    assert "lwl tell [OPTIONS] JOB BATCH_ID LABELS" in _help("tell", "-h")
    assert "lwl training-set [OPTIONS] JOB" in _help("training-set", "-h")


def test_every_option_has_a_help_text():
    missing = [f"{name} {p.opts[0]}" for name, cmd in _commands().items() for p in cmd.params
               if p.param_type_name == "option" and not p.help]
    assert missing == []
    assert "random seed" in _help("sample", "-h") and "LWL_DATA_DIR" in _help("worker", "-h")


def test_loglevel_lists_its_choices_and_refuses_others():
    from typer.testing import CliRunner

    from lwl.cli import app

    loglevel = next(p for p in _commands()["worker"].params if p.name == "loglevel")
    assert type(loglevel.type).__name__.endswith("Choice")  # typer carries its own click
    assert list(loglevel.type.choices) == ["debug", "info", "warning", "error", "critical"]
    assert "debug|info|warning|error|critical" in _help("worker", "-h").replace(" ", "").replace("\n", "")
    refused = CliRunner().invoke(app, ["worker", "--loglevel", "loud"])
    assert refused.exit_code == 2 and "loud" in refused.output


@pytest.mark.parametrize("args,why", [(["burgers", "--q-law", "paper"], "ntd and darcy only"),
                                      (["ntd", "--q-law", "uniform"], "known: paper, unit")])
def test_q_law_is_refused_where_it_does_not_apply(args, why):
    from typer.testing import CliRunner

    from lwl.cli import app

    result = CliRunner().invoke(app, ["experiment", *args, "--preset", "tiny", "--out", "/nonexistent/never"],
                                env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 2 and "--q-law" in result.output and why in result.output, result.output


def test_budget_rerun_is_refused_without_an_earlier_study_or_beside_columns(tmp_path):
    """``lwl experiment budget --rerun KEYS`` keeps OUT/results.json's other rows: with no such
    file, with --columns (a different study) or with no key (not a full study over OUT's rows),
    it is refused before anything runs."""
    from typer.testing import CliRunner

    from lwl.cli import app

    base = ["experiment", "budget", "--preset", "smoke", "--rerun"]
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    for extra in (["table1-g1", "--out", str(tmp_path / "none")],
                  ["table1-g1", "--out", str(tmp_path), "--columns", "table1-g1"], [",", "--out", str(tmp_path)]):
        (tmp_path / "results.json").write_text("{}")
        result = CliRunner().invoke(app, [*base, *extra], env=env)
        assert result.exit_code == 2 and "--rerun" in result.output, result.output
    assert not (tmp_path / "none").exists() and (tmp_path / "results.json").read_text() == "{}"


@pytest.mark.slow
def test_experiment_compare_passes_on_a_rerun_and_fails_on_a_changed_number(tmp_path):
    """--compare: the same seeded preset gives the committed numbers (exit 0); a committed number
    that the code no longer produces fails the check (exit 1) naming its path. results.md states
    what produced it."""
    from typer.testing import CliRunner

    from lwl.cli import app

    env = {"COLUMNS": "200", "NO_COLOR": "1", "OPENBLAS_NUM_THREADS": "1"}
    base = ["experiment", "table1", "--preset", "smoke", "--columns", "g1"]
    first = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a")], env=env)
    assert first.exit_code == 0, first.output
    assert "Produced by lwl" in (tmp_path / "a" / "results.md").read_text()
    again = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b"), "--compare", str(tmp_path / "a")], env=env)
    assert again.exit_code == 0 and "the same numbers" in again.output, again.output
    doc = json.loads((tmp_path / "a" / "results.json").read_text())
    doc["columns"]["g1"]["runs"][0]["err"]["optimized"] *= 1.01
    (tmp_path / "a" / "results.json").write_text(json.dumps(doc))
    changed = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b"), "--compare", str(tmp_path / "a")], env=env)
    assert changed.exit_code == 1 and "columns.g1.runs[0].err.optimized" in changed.output, changed.output
