"""The service's commands in the ``lwl`` CLI without a server (service/cli.py): what `lwl status`
prints of a job document, and what `lwl tell` refuses before it sends anything."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from service.cli import describe_job, elapsed_seconds


def test_elapsed_time_is_the_stores_from_start_to_end_as_the_dashboard_counts_it():
    """Issue 85: `lwl status` said 1249 s (a slice's compute time, the waits on the lab left out)
    where the dashboard said 29 min 29 s (finished_at - started_at)."""
    doc = {"id": "j", "status": "succeeded", "started_at": 1000.0, "finished_at": 1000.0 + 1769.0,
           "progress": {"iteration": 13, "total": 13, "elapsed_seconds": 1249.0}}
    assert elapsed_seconds(doc) == 1769.0
    assert describe_job(doc)[0] == "j  succeeded  iteration 13/13  29 min 29 s"
    running = {**doc, "status": "running", "finished_at": None}
    assert elapsed_seconds(running, now=1041.25) == 41.25
    assert elapsed_seconds({**doc, "started_at": None}) is None  # queued: not started
    assert describe_job({**doc, "started_at": 0.0, "finished_at": 4320.0})[0].endswith("  1.2 h")


def test_a_nan_label_is_refused_with_the_flag_that_tells_it_as_failed(tmp_path):
    from lwl.cli import app

    labels = tmp_path / "y.npy"
    np.save(labels, np.array([1.0, np.nan, 3.0]))
    # nothing listens at the URL: the refusal comes before any request
    out = CliRunner().invoke(app, ["tell", "job", "1.0", str(labels), "--url", "http://127.0.0.1:9"],
                             env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert out.exit_code == 2, out.output
    assert "1 NaN label(s); a failed measurement is told with --nan-failed" in out.output
