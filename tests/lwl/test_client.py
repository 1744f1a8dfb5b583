"""The Python client's progress bar (no server: the job documents are stubbed)."""

from __future__ import annotations

import io

import rich
from rich.console import Console

from lwl.client import Client, bar_fields


def _doc(status: str, iteration: int, total: int = 1000) -> dict:
    return {"id": "0" * 32, "status": status, "progress": {"iteration": iteration, "total": total,
                                                           "validation_err": 0.25}}


def test_a_running_job_fills_its_bar_by_iterations():
    assert bar_fields(_doc("running", 425)) == {"completed": 425, "total": 1000, "info": "running  Err 0.2500"}


def test_a_job_that_stopped_early_ends_with_a_full_bar_that_says_where():
    f = bar_fields(_doc("succeeded", 425))
    assert f["completed"] == f["total"] == 425
    assert f["info"].startswith("succeeded") and "stopped at iteration 425 of 1000" in f["info"]
    assert bar_fields(_doc("cancelled", 0))["completed"] == bar_fields(_doc("cancelled", 0))["total"]
    full = bar_fields(_doc("succeeded", 1000))
    assert (full["completed"], full["total"]) == (1000, 1000) and "stopped" not in full["info"]


class _Stub(Client):
    def __init__(self, docs):
        super().__init__("http://127.0.0.1:9")  # never contacted
        self.docs = iter(docs)

    def job(self, job):
        return next(self.docs)


def test_wait_draws_the_final_bar_full(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=out, width=120, force_terminal=True, color_system=None))
    with _Stub([_doc("running", 100), _doc("running", 425), _doc("succeeded", 425)]) as c:
        assert c.wait("x", poll=0.0)["status"] == "succeeded"
    final = out.getvalue().rsplit("\r", 1)[-1]
    assert "425/425" in final and "425/1000" not in final, final
