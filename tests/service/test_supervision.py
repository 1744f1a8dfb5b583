"""Embedded mode under failure: ``lwl serve`` restarts a killed worker and the job finishes as
if nothing happened; killing ``lwl serve`` itself leaves no worker behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from lwl import run_job
from lwl.client import Client
from tests.service.conftest import Server, small_job, wait_until

pytestmark = pytest.mark.server


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_worker_is_restarted_and_its_job_finishes_as_if_uninterrupted(tmp_path):
    server = Server(tmp_path / "data").start()
    try:
        spec = small_job(iterations=600, seed=3)
        spec["algorithm"].update(optimizer="paper", learning_rate=1e-3)  # no early stop: runs all 600
        with Client(server.url) as c:
            job = c.submit(spec)
            wait_until(lambda: (c.job(job).get("progress") or {}).get("iteration", 0) >= 300, 120, 0.05, "progress")
            (worker,) = _children(server.proc.pid)
            os.kill(worker, signal.SIGKILL)
            killed = time.monotonic()
            done = c.wait(job, progress=False, timeout=120)
            recovered_in = time.monotonic() - killed
            assert done["status"] == "succeeded", done
            assert done["attempts"] >= 2  # the slice that died, and the one that finished the job
            result = c.result(job)
        # the reaper re-enqueues after the stale heartbeat (seconds); the bound only catches a
        # job left for dead, so it is generous for a loaded 2-core machine (31.6 s seen there)
        assert recovered_in < 90, recovered_in
        new = _children(server.proc.pid)
        assert len(new) == 1 and new[0] != worker  # a fresh worker took over
        direct = run_job(spec)
        np.testing.assert_array_equal(result["distribution"]["mean"], direct["distribution"]["mean"])
        np.testing.assert_array_equal(result["distribution"]["cov"], direct["distribution"]["cov"])
    finally:
        server.stop()


def test_killing_lwl_serve_leaves_no_worker_running(tmp_path):
    server = Server(tmp_path / "data").start()
    workers = _children(server.proc.pid)
    assert len(workers) == 1
    with Client(server.url) as c:
        c.submit(small_job(iterations=2000))  # busy when the server dies
    os.kill(server.proc.pid, signal.SIGKILL)
    try:
        wait_until(lambda: not any(_alive(w) for w in workers), 10, 0.1, "the orphaned worker to die")
    finally:
        server.stop()


def test_workers_recycle_after_their_slice_budget_and_jobs_carry_on(tmp_path):
    server = Server(tmp_path / "data", env={"LWL_WORKER_MAX_SLICES": "2", "LWL_SLICE_SECONDS": "0.25"}).start()
    try:
        spec = small_job(iterations=600, seed=5)
        # no early stop, and work for a few 0.25 s slices on an idle machine (about 1 s: at least
        # two slices, so the first worker recycles); not more: every recycled worker boots anew,
        # about 15 s each on a loaded machine, and 2,000 iterations took 26-47 of them there
        spec["algorithm"].update(optimizer="paper", learning_rate=1e-3, samples_per_iteration=200)
        with Client(server.url) as c:
            (first,) = _children(server.proc.pid)
            job = c.submit(spec)
            seen = {first}
            deadline = time.monotonic() + 480  # each recycled worker boots anew (seconds; more on a loaded machine)
            while c.job(job)["status"] not in ("succeeded", "failed") and time.monotonic() < deadline:
                seen.update(_children(server.proc.pid))
                time.sleep(0.05)
            done = c.job(job)
            result = c.result(job)
        assert done["status"] == "succeeded", done
        assert len(seen) >= 2  # the first worker recycled after 2 slices and a fresh one took over
        assert not _alive(first)
        direct = run_job(spec)
        # a dozen fresh processes (one per two slices) agree with the uninterrupted run to
        # rounding; the CI-like run once saw 5e-15 differences here, not yet explained (the
        # single-resume test above is bit for bit)
        np.testing.assert_allclose(result["distribution"]["mean"], direct["distribution"]["mean"], rtol=1e-12, atol=1e-14)
    finally:
        server.stop()
