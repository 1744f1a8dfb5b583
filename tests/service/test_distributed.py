"""Distributed mode: Redis broker, PostgreSQL store, ``lwl serve --no-worker`` and two
``lwl worker`` processes; a worker SIGKILLed mid-job."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from lwl import run_job
from lwl.client import Client
from tests.service.conftest import Server, small_job, start_worker, wait_until

pytestmark = [pytest.mark.server, pytest.mark.distributed]


def test_killed_worker_job_completes_elsewhere_with_the_same_result(tmp_path, redis_url, postgres_url):
    env = {"LWL_BROKER_URL": redis_url, "LWL_DATABASE_URL": postgres_url,
           # a dead worker's job is re-enqueued after 3 s without heartbeat
           "LWL_STALE_SECONDS": "3", "LWL_REAPER_INTERVAL": "0.5", "LWL_HEARTBEAT_SECONDS": "0.5",
           "LWL_SLICE_SECONDS": "5"}
    api = Server(tmp_path, env=env, no_worker=True).start()
    workers = [start_worker(tmp_path, env, f"worker{i}") for i in range(2)]
    try:
        spec = small_job(iterations=1500)
        with Client(api.url) as c:
            job_id = c.submit(spec)
            job = wait_until(lambda: (j := c.job(job_id))["progress"]["iteration"] >= 100 and j, 120, 0.05,
                             "job running")
            victim = int(job["worker"].rsplit(":", 1)[1])
            assert victim in {w.pid for w in workers}, (job["worker"], [w.pid for w in workers])
            os.kill(victim, signal.SIGKILL)
            killed_at = job["progress"]["iteration"]
            done = c.wait(job_id, progress=False, timeout=300)
            assert done["status"] == "succeeded"
            assert int(done["worker"].rsplit(":", 1)[1]) != victim
            result = c.result(job_id)
            history = c.history(job_id)
        local = run_job(spec)  # the uninterrupted run
        assert result["distribution"] == local["distribution"]
        assert result["evaluation"] == local["evaluation"]
        assert [h["objective"] for h in history] == [h["objective"] for h in local["history"]]
        assert killed_at < 1500
    finally:
        for w in workers:
            w.stop()
        api.stop()


def test_api_restart_and_two_workers_share_jobs(tmp_path, redis_url, postgres_url):
    env = {"LWL_BROKER_URL": redis_url, "LWL_DATABASE_URL": postgres_url, "LWL_SLICE_SECONDS": "0.5"}
    api = Server(tmp_path, env=env, no_worker=True).start()
    workers = [start_worker(tmp_path, env, f"w{i}") for i in range(2)]
    try:
        with Client(api.url) as c:
            ids = [c.submit(small_job(iterations=300, seed=s)) for s in range(4)]
            api.stop()  # the API goes away while jobs run; workers carry on
            api = Server(tmp_path, env=env, no_worker=True, port=api.port).start()
            done = [c.wait(i, progress=False, timeout=300) for i in ids]
        assert all(d["status"] == "succeeded" for d in done)
        # short slices: jobs moved between slices and both workers took part (each ran slices: the
        # worker that ran a job's last slice, its result's "worker", may be one for all four where the
        # jobs end fast; every worker reports its slices with its heartbeat)
        def slices() -> list[int]:
            return sorted(w["slices"] for w in httpx.get(f"{api.url}/v1/workers").json()["items"] if w["alive"])

        wait_until(lambda: len(slices()) == 2 and min(slices()) > 0, 30, 0.5, "both workers' slices")
        # the dashboard and what it reads, on PostgreSQL
        jobs = httpx.get(f"{api.url}/v1/jobs", params={"limit": 10}).json()["items"]
        assert {j["kind"]["algorithm"] for j in jobs} == {"bilevel"} and {j["id"] for j in jobs} >= set(ids)
        url = f"{api.url}/v1/jobs/{ids[0]}/history"
        full = [r["iteration"] for r in httpx.get(url).json()["history"]]
        later = [r["iteration"] for r in httpx.get(url, params={"after": 100}).json()["history"]]
        assert later == [i for i in full if i > 100] and full[:3] == [0, 1, 2]
        assert "app.js" in httpx.get(f"{api.url}/ui").text
    finally:
        for w in workers:
            w.stop()
        api.stop()
