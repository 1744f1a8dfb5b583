"""lwl/experiments/report.py: what a committed result records about where it was made."""

import json

import numpy as np
import scipy

from lwl.experiments.report import (
    environment,
    provenance,
    provenance_line,
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
