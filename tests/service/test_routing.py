"""Device-aware routing with real processes: ``lwl serve`` with its embedded CPU worker, and a
GPU worker that claims the GPU queue through the test-only LWL_TEST_PRETEND_GPU switch (this
machine has no GPU). Also the worker registry (GET /v1/workers, /readyz) and the conditions a
waiting job shows."""

from __future__ import annotations

import os
import signal
import sys
import time

import httpx
import pytest

from service.core.routing import QUEUE_CPU, QUEUE_GPU, queue_for, worker_queues
from service.processes import ENV_BASE, Proc
from tests.service.conftest import server_fixture, small_job, wait_until

pytestmark = pytest.mark.server


def test_queue_rules():
    assert queue_for({"device": "cuda", "algorithm": {"name": "bilevel"}}, gpu_alive=False) == QUEUE_GPU
    assert queue_for({"device": "cpu", "algorithm": {"name": "ama"}}, gpu_alive=True) == QUEUE_CPU
    # auto: operator-learning algorithms go to a live GPU, everything else to the CPUs
    assert queue_for({"device": "auto", "algorithm": {"name": "ama"}}, gpu_alive=True) == QUEUE_GPU
    assert queue_for({"device": "auto", "algorithm": {"name": "particle_ama"}}, gpu_alive=True) == QUEUE_GPU
    assert queue_for({"device": "auto", "algorithm": {"name": "ama"}}, gpu_alive=False) == QUEUE_CPU
    assert queue_for({"device": "auto", "algorithm": {"name": "bilevel"}}, gpu_alive=True) == QUEUE_CPU
    assert queue_for({"algorithm": {"name": "no-such"}}, gpu_alive=True) == QUEUE_CPU
    assert worker_queues("cpu") == [QUEUE_CPU] and worker_queues("cuda") == [QUEUE_GPU, QUEUE_CPU]


server = server_fixture("routing")


def workers(server):
    return httpx.get(f"{server.url}/v1/workers").json()


def job(server, job_id):
    return httpx.get(f"{server.url}/v1/jobs/{job_id}").json()


def submit(server, spec):
    r = httpx.post(f"{server.url}/v1/jobs", json=spec)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def test_a_cuda_job_is_never_taken_by_a_cpu_worker_and_says_why(server, tmp_path):
    wait_until(lambda: workers(server)["alive"] == {"cpu": 1, "cuda": 0}, 30, 0.2, "the embedded worker")
    cpu = workers(server)["items"][0]
    assert cpu["queues"] == [QUEUE_CPU] and cpu["pid"] > 0 and cpu["version"]
    # lwl serve's embedded worker keeps the operator's OMP_NUM_THREADS (the tests' ENV_BASE: 2), else
    # takes every usable core (service.core.threads)
    assert cpu["threads"] == int(ENV_BASE["OMP_NUM_THREADS"])
    assert httpx.get(f"{server.url}/readyz").json()["workers"] == {"cpu": 1, "cuda": 0}

    gpu_spec = small_job(iterations=5)
    gpu_spec["device"] = "cuda"
    gpu_job = submit(server, gpu_spec)
    view = job(server, gpu_job)
    assert view["queue"] == QUEUE_GPU
    assert [c["type"] for c in view["conditions"]] == ["NoLiveWorker"]
    assert "lwl worker --device cuda" in view["conditions"][0]["message"]
    cpu_job = submit(server, small_job(iterations=5))  # the CPU worker is idle, and stays off the GPU job
    wait_until(lambda: job(server, cpu_job)["status"] == "succeeded", 60, 0.2, "the CPU job")
    time.sleep(1.0)
    view = job(server, gpu_job)
    assert view["status"] == "queued" and view["worker"] is None and view["attempts"] == 0

    # a GPU worker (pretend: the switch is for tests only) starts and takes the waiting job
    env = {**os.environ, **ENV_BASE, "LWL_DATA_DIR": str(server.data_dir), "LWL_TEST_PRETEND_GPU": "1"}
    gpu = Proc([sys.executable, "-m", "lwl.cli", "worker", "--device", "cuda"], env, tmp_path / "gpu.log")
    try:
        wait_until(lambda: workers(server)["alive"] == {"cpu": 1, "cuda": 1}, 60, 0.2, "the GPU worker")
        wait_until(lambda: job(server, gpu_job)["worker"] is not None, 60, 0.2, "the GPU job taken")
        taken = job(server, gpu_job)
        assert taken["worker"].endswith(f":{gpu.pid}"), taken["worker"]
        assert taken["conditions"] == [] or taken["status"] != "queued"
        info = next(w for w in workers(server)["items"] if w["device"] == "cuda")
        assert info["queues"] == [QUEUE_GPU, QUEUE_CPU] and "pretend" in info["gpu"]
        # with a GPU worker alive, operator learning set to auto goes to it; a bilevel job does not
        from tests.conftest import ama_spec

        ama = ama_spec.__wrapped__()
        ama["algorithm"]["iterations"] = 1
        assert job(server, submit(server, ama))["queue"] == QUEUE_GPU
        assert job(server, submit(server, small_job(iterations=2, seed=4)))["queue"] == QUEUE_CPU
    finally:
        gpu.stop()
    wait_until(lambda: workers(server)["alive"]["cuda"] == 0, 30, 0.2, "the GPU worker gone from the list")


def test_a_job_whose_worker_died_says_it_waits_for_recovery(server):
    wait_until(lambda: workers(server)["alive"]["cpu"] >= 1, 30, 0.2, "a CPU worker")
    spec = small_job(iterations=4000)
    # the paper's plain schedule never stops early: the job is still running when it is killed
    spec["algorithm"].update(samples_per_iteration=200, optimizer="paper", learning_rate=1e-3)
    spec["device"] = "cpu"
    job_id = submit(server, spec)
    wait_until(lambda: job(server, job_id)["status"] == "running"
               and (job(server, job_id)["progress"] or {}).get("iteration", 0) > 5, 60, 0.2, "running")
    running_it = lambda: [w["pid"] for w in workers(server)["items"] if w["current_job"] == job_id]  # noqa: E731
    wait_until(lambda: running_it(), 10, 0.2, "the worker's heartbeat naming the job")
    pid = running_it()[0]
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    wait_until(lambda: any(c["type"] == "WaitingForRecovery" for c in job(server, job_id)["conditions"]),
               15, 0.2, "the recovery condition")
    seen = time.monotonic() - t0
    cond = next(c for c in job(server, job_id)["conditions"] if c["type"] == "WaitingForRecovery")
    assert cond["attempts"] >= 1 and cond["silent_seconds"] >= 5
    # the supervisor restarts the worker and the reaper resumes the job from its checkpoint
    wait_until(lambda: job(server, job_id)["attempts"] >= 2 and job(server, job_id)["conditions"] == [],
               60, 0.2, "the job resumed")
    httpx.post(f"{server.url}/v1/jobs/{job_id}/cancel")
    assert seen < 15


def test_gpus_flag_starts_one_supervised_worker_per_device(server, tmp_path):
    env = {**os.environ, **ENV_BASE, "LWL_DATA_DIR": str(server.data_dir), "LWL_TEST_PRETEND_GPU": "1"}
    parent = Proc([sys.executable, "-m", "lwl.cli", "worker", "--gpus", "0,1"], env, tmp_path / "gpus.log")
    try:
        wait_until(lambda: workers(server)["alive"]["cuda"] == 2, 60, 0.2, "two GPU workers")
        gpus = [w for w in workers(server)["items"] if w["alive"] and w["device"] == "cuda"]
        assert sorted(w["cuda_visible_devices"] for w in gpus) == ["0", "1"]
        assert parent.pid not in {w["pid"] for w in gpus}  # the parent only supervises
        victim = next(w for w in gpus if w["cuda_visible_devices"] == "1")
        os.kill(victim["pid"], signal.SIGKILL)  # the parent starts device 1's worker again
        wait_until(lambda: any(w["alive"] and w["cuda_visible_devices"] == "1" and w["pid"] != victim["pid"]
                               for w in workers(server)["items"]), 60, 0.2, "device 1's worker restarted")
    finally:
        parent.stop()
    wait_until(lambda: workers(server)["alive"]["cuda"] == 0, 30, 0.2, "the GPU workers stopped with their parent")
