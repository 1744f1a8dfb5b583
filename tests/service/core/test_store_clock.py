"""The store's one clock (service.core.store): every timestamp it writes and every cutoff it
judges is the database's time, so hosts whose clocks disagree neither reap a living job nor
count a live worker dead. Real SQLite and PostgreSQL stores; hosts' clocks are skewed by
patching ``time.time``."""

from __future__ import annotations

import threading
import time

import pytest

from lwl.spec import parse_job_spec
from service.core.reaper import reap_once
from service.core.settings import Settings
from service.core.store import Store
from service.processes import Postgres
from tests.service.conftest import small_job
from worker.tasks import run_slice_now

REAL_TIME = time.time


def skew_clocks(monkeypatch, main: float, others: float) -> None:
    """``time.time`` is ``main`` seconds off in the test's thread (the API's or a reaping
    worker's host) and ``others`` seconds off in every other thread (the slice's host)."""
    def skewed() -> float:
        off = main if threading.current_thread() is threading.main_thread() else others
        return REAL_TIME() + off
    monkeypatch.setattr(time, "time", skewed)


def submit(store: Store, spec: dict) -> str:
    canonical = parse_job_spec(spec).model_dump(mode="json")
    return store.create_job("o", canonical, canonical["algorithm"]["iterations"])[0].id


@pytest.mark.parametrize("reaper_offset, slice_offset", [(0.0, -60.0), (0.0, 60.0), (60.0, 0.0)],
                         ids=["worker-60s-behind", "worker-60s-ahead", "reaping-host-60s-ahead"])
def test_a_worker_whose_clock_is_a_minute_off_is_not_reaped_while_it_beats(tmp_path, monkeypatch, reaper_offset,
                                                                            slice_offset):
    store = Store(f"sqlite:///{tmp_path}/jobs.db")
    spec = small_job(iterations=5000)
    spec["algorithm"]["max_halvings"] = 60  # it runs until cancelled, not to an early convergence
    job_id = submit(store, spec)
    settings = Settings(data_dir=tmp_path, heartbeat_seconds=0.25, slice_seconds=600)
    skew_clocks(monkeypatch, reaper_offset, slice_offset)
    outcome = []
    slice_ = threading.Thread(target=lambda: outcome.append(run_slice_now(store, settings, job_id, 0, lambda *a: None)))
    slice_.start()
    try:
        deadline = REAL_TIME() + 120
        while (store.get_job(job_id).progress or {}).get("iteration", 0) < 2:  # it beats and steps
            assert REAL_TIME() < deadline and slice_.is_alive(), "the slice never stepped"
            time.sleep(0.1)
        reaped = []
        for _ in range(8):  # the reaper's rounds, with a stale cutoff of 15 s, while the slice beats
            reaped += reap_once(store, stale_seconds=15, enqueue=lambda *a: None)
            time.sleep(0.25)
        assert store.get_job(job_id).status == "running" and slice_.is_alive()
    finally:
        store.request_cancel(job_id)
        slice_.join(120)
    assert reaped == []
    job = store.get_job(job_id)
    assert outcome == ["cancelled"] and job.attempts == 1 and job.generation == 0
    # the job's elapsed time mixes no clocks: not a minute off
    assert 0 < job.progress["elapsed_seconds"] < REAL_TIME() - job.created_at + 1


def test_stamps_and_cutoffs_are_the_store_clock_whatever_the_host_says(tmp_path, monkeypatch):
    store = Store(f"sqlite:///{tmp_path}/jobs.db")
    skew_clocks(monkeypatch, 3600.0, 3600.0)  # this host is an hour ahead
    assert abs(store.now() - REAL_TIME()) < 5
    job_id = submit(store, small_job(iterations=2))
    job = store.get_job(job_id)
    assert abs(job.created_at - REAL_TIME()) < 5 and job.dispatched_at == job.created_at
    assert [j.job_id for j in store.undispatched(0)] == [job_id]
    assert store.undispatched(60) == []  # sent just now by the store's clock, not an hour ago
    store.register_worker("w", "cpu", ["lwl.cpu"], {})
    (w,) = store.list_workers(within=5)
    assert w.name == "w" and 0 <= w.silent_seconds < 5
    store.prune_workers(silent_for=60)
    assert [w.name for w in store.list_workers()] == ["w"]
    assert store.acquire(job_id, 0, "lease", "w") is not None
    assert store.requeue_stale(60) == []  # its heartbeat is fresh on the store's clock
    assert store.heartbeat(job_id, "lease")
    assert store.requeue_stale(-1) == [(job_id, 1)]  # and stale once the cutoff passes it
    assert not store.heartbeat(job_id, "lease")


@pytest.mark.distributed
def test_postgres_stamps_with_its_own_clock(monkeypatch):
    pg = Postgres()
    try:
        store = Store(pg.url)
        skew_clocks(monkeypatch, -3600.0, -3600.0)
        assert abs(store.now() - REAL_TIME()) < 5
        job_id = submit(store, small_job(iterations=2))
        assert abs(store.get_job(job_id).created_at - REAL_TIME()) < 5
        assert store.acquire(job_id, 0, "lease", "w") is not None
        assert store.heartbeat(job_id, "lease")
        assert store.requeue_stale(60) == []
        store.register_worker("w", "cpu", ["lwl.cpu"], {})
        assert [w.name for w in store.list_workers(within=5)] == ["w"]
        assert [j.job_id for j in store.undispatched(0)] == []  # the job runs: not queued
        assert store.requeue_stale(-1) == [(job_id, 1)]
        (lost,) = store.undispatched(-1)
        assert lost.job_id == job_id and lost.generation == 1 and -1 < lost.age < 5
        store.engine.dispose()
    finally:
        pg.stop()
