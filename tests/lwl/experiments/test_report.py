"""lwl/experiments/report.py: what a committed result records about where it was made."""

import json

import numpy as np
import pytest
import scipy

from lwl.experiments.report import (
    environment,
    provenance,
    provenance_line,
    single_threaded,
    write_tables,
)


def test_the_environment_names_the_libraries_and_the_blas_kernels_in_use():
    env = environment()
    assert env["numpy"] == np.__version__ and env["scipy"] == scipy.__version__
    # numpy's and scipy's BLAS: what decides the last bits of every factorisation
    assert env["blas"], "threadpoolctl found no BLAS after numpy and scipy.linalg were loaded"
    assert all(b["internal_api"] and b["version"] for b in env["blas"])
    assert env["python"].count(".") == 2 and env["machine"]
    json.dumps(env, allow_nan=False)  # it is stored in results.json


def test_results_record_and_state_their_environment(tmp_path):
    out, _, _ = write_tables({"rows": []}, tmp_path / "r", lambda doc: "# table\n")
    doc = json.loads((out / "results.json").read_text())
    assert doc["provenance"]["environment"]["numpy"] == np.__version__
    line = (out / "results.md").read_text().strip().splitlines()[-1]
    assert line.startswith("Produced by lwl") and f"numpy {np.__version__}" in line
    assert f"scipy {scipy.__version__}" in line


def test_a_stamp_from_before_the_environment_was_recorded_still_reads():
    stamp = {k: v for k, v in provenance().items() if k != "environment"}
    line = provenance_line(stamp)
    assert line.startswith("Produced by lwl") and "numpy" not in line and line.endswith(".")


def test_single_threaded_pins_blas_and_torch_and_restores_them():
    """Inside single_threaded one BLAS and one torch thread compute (a row must not depend on how
    many threads the caller had: reductions round differently); the caller's settings come back."""
    import torch
    from threadpoolctl import threadpool_info

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with single_threaded():
            assert torch.get_num_threads() == 1
            assert all(lib["num_threads"] == 1 for lib in threadpool_info() if lib.get("user_api") == "blas")
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError, match="inside"), single_threaded():
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 2  # restored on the way out of a failure too
    finally:
        torch.set_num_threads(before)


def test_a_study_in_this_process_computes_its_rows_single_threaded(monkeypatch):
    """budget.run with one worker computes each row under single_threaded, as its worker processes
    do, so --workers 1 and --workers 2 give the same rows."""
    import torch

    from lwl.experiments import budget

    seen = []

    def fake_row(key, spec, cfg, seed, progress=None):
        seen.append(torch.get_num_threads())
        return {"problem": key, "seed": seed, "budgets": {}}

    monkeypatch.setattr(budget, "run_problem", fake_row)
    monkeypatch.setattr(budget, "summary", lambda rows, budgets: {})
    torch_before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        budget.run("smoke")
        assert torch.get_num_threads() == 2  # the caller's threads after the study
    finally:
        torch.set_num_threads(torch_before)
    assert seen and set(seen) == {1}


def test_the_commit_a_result_names_is_read_once_per_process(monkeypatch):
    """A study names the commit its code was loaded from: git is asked at the first call only, so
    a commit made while a long study runs does not take the name of rows the earlier code made."""
    import subprocess

    from lwl.experiments import report

    calls = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):
        calls.append(args[0])
        return real_run(*args, **kwargs)

    report.code_state.cache_clear()
    monkeypatch.setattr(subprocess, "run", counting_run)
    try:
        first = report.provenance()
        if first["commit"] is None:
            pytest.skip("not run from a git checkout")
        asked = len(calls)
        assert asked == 2  # rev-parse and status, once
        assert report.provenance()["commit"] == first["commit"] and len(calls) == asked
        assert report.code_state() == (first["commit"], first["dirty"])
    finally:
        report.code_state.cache_clear()
