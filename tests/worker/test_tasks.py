"""The slice task against a real SQLite store, without a broker: enqueueing is recorded."""

from __future__ import annotations

import numpy as np
import pytest

from lwl import run_job
from lwl.spec import parse_job_spec
from service.core.settings import Settings
from service.core.store import Store
from tests.service.conftest import small_job
from service.core.reaper import reap_once
from worker.tasks import run_slice_now


@pytest.fixture
def store(tmp_path):
    return Store(f"sqlite:///{tmp_path}/jobs.db")


def submit(store, spec) -> str:
    canonical = parse_job_spec(spec).model_dump(mode="json")
    return store.create_job("o", canonical, canonical["algorithm"]["iterations"])[0].id


def drive(store, settings, job_id, generation=0, limit=100):
    """Run slices until the job stops being requeued; returns the outcomes."""
    queue, outcomes = [(job_id, generation)], []
    while queue and len(outcomes) < limit:
        jid, gen = queue.pop(0)
        outcomes.append(run_slice_now(store, settings, jid, gen, lambda j, g: queue.append((j, g))))
    return outcomes


def test_sliced_job_equals_uninterrupted_run(store, tmp_path):
    spec = small_job(iterations=40)
    job_id = submit(store, spec)
    settings = Settings(data_dir=tmp_path, slice_seconds=0.0)  # one iteration per slice
    outcomes = drive(store, settings, job_id)
    assert outcomes[-1] == "succeeded" and outcomes.count("sliced") >= 40
    job = store.get_job(job_id)
    assert job.status == "succeeded" and job.attempts == 1 and job.generation == len(outcomes) - 1
    local = run_job(spec)
    assert store.result(job_id)["distribution"] == local["distribution"]
    assert [h["objective"] for h in store.history(job_id)] == [h["objective"] for h in local["history"]]


def test_stale_and_duplicate_messages_are_dropped(store, tmp_path):
    job_id = submit(store, small_job(iterations=3))
    settings = Settings(data_dir=tmp_path)
    assert run_slice_now(store, settings, job_id, 5, lambda *a: None) == "stale"
    assert run_slice_now(store, settings, job_id, 0, lambda *a: None) == "succeeded"
    assert run_slice_now(store, settings, job_id, 0, lambda *a: None) == "stale"  # redelivered


def test_job_that_keeps_killing_its_worker_fails_with_a_clear_problem(store, tmp_path):
    job_id = submit(store, small_job(iterations=3))
    settings = Settings(data_dir=tmp_path, max_attempts=2)
    enq = []
    for attempt in range(2):  # a slice takes the job, then its worker "dies" without a trace
        gen = store.get_job(job_id).generation
        assert store.acquire(job_id, gen, f"lease{attempt}", "w") is not None
        assert reap_once(store, stale_seconds=-1, enqueue=lambda j, g: enq.append((j, g))) == [job_id]
    assert run_slice_now(store, settings, job_id, enq[-1][1], lambda *a: None) == "failed"
    job = store.get_job(job_id)
    assert job.status == "failed" and job.attempts == 3
    assert "kept losing its worker" in job.error["title"] and "max_attempts=2" in job.error["detail"]


def test_cancel_between_slices_and_failures_become_problems(store, tmp_path):
    settings = Settings(data_dir=tmp_path, slice_seconds=0.0)
    job_id = submit(store, small_job(iterations=50))
    assert run_slice_now(store, settings, job_id, 0, lambda *a: None) == "sliced"
    store.request_cancel(job_id)  # the job is queued between slices: cancelled at once
    assert store.get_job(job_id).status == "cancelled"
    # a dataset that is gone by the time the job runs fails the job, not the worker
    spec = small_job(iterations=2)
    spec["test_distributions"]["members"][0] = {"dataset": "missing"}
    job_id = submit(store, spec)
    assert run_slice_now(store, settings, job_id, 0, lambda *a: None) == "failed"
    err = store.get_job(job_id).error
    assert err["status"] == 422 and "missing" in err["detail"]


def test_lost_lease_stops_the_old_slice(store, tmp_path):
    job_id = submit(store, small_job(iterations=2))
    job = store.acquire(job_id, 0, "old", "w")
    assert job is not None
    reap_once(store, stale_seconds=-1, enqueue=lambda *a: None)  # presumed dead, taken over
    assert not store.save_step(job_id, "old", b"x", {"iteration": 1}, None)
    assert not store.heartbeat(job_id, "old")
    assert np.isfinite(store.get_job(job_id).generation)
