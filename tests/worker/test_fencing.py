"""Fencing that stops work: a slice whose lease is taken while it runs makes no lab call after
its next heartbeat and writes nothing more (worker.fencing), against a real SQLite store and a
real HTTP lab on loopback."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from sqlalchemy import select, update

from lwl.oracles import make_oracle
from lwl.spec import parse_job_spec
from service.core.settings import Settings
from service.core.store import JobStatus, Store, jobs
from tests.service.conftest import LabHandler, LoopbackLab, small_job
from worker.tasks import LEASE_LOST, run_slice_now

FRIEDMAN = make_oracle({"name": "friedman1"})
HEARTBEAT = 0.25  # the slice's heartbeat interval
SLACK = 0.75  # a call already on the wire when the heartbeat fired, on a loaded machine


class CountingLab(LoopbackLab):
    """A lab on loopback that labels with Friedman-1, taking ``delay`` seconds a call, and
    records when each call arrived (monotonic) with its batch id. ``on_call(n, batch_id)`` runs
    in the handler before it answers the n-th call (1-based)."""

    def __init__(self, delay: float, on_call):
        self.calls: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        lab = self

        class Handler(LabHandler):
            def do_POST(self):
                doc = json.loads(self.body())
                with lab.lock:
                    lab.calls.append((time.monotonic(), doc["batch_id"]))
                    n = len(lab.calls)
                on_call(n, doc["batch_id"])
                time.sleep(delay)
                self.send_json({"labels": FRIEDMAN.label(np.asarray(doc["inputs"])).tolist()})

        super().__init__(Handler)


def job_row(store: Store, job_id: str) -> dict:
    with store.engine.connect() as c:
        return dict(c.execute(select(jobs).where(jobs.c.id == job_id)).mappings().one())


def test_a_slice_whose_lease_is_stolen_calls_the_lab_no_more_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_NETWORKS", "127.0.0.1/32")
    store = Store(f"sqlite:///{tmp_path}/jobs.db")
    spec = small_job(iterations=50)
    # every label() call of an iteration is 40 lab calls of 10 points, about 2 s of lab time:
    # without fencing the slice goes on calling for the rest of the iteration after the theft
    spec["algorithm"]["samples_per_iteration"] = 400
    spec["evaluation"] = {"enabled": False}
    stolen = {}

    def steal(n: int, batch_id: str) -> None:
        # the reaper's update (service.core.store.requeue_stale), made while the slice runs: the
        # second batch of the third label() call, so most of that call's batches are still to come
        if batch_id.endswith(".1") and sum(b.endswith(".0") for _, b in lab.calls) == 3 and not stolen:
            with store.engine.begin() as c:
                c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.status == JobStatus.RUNNING)
                          .values(status=JobStatus.QUEUED, lease=None, generation=jobs.c.generation + 1))
            stolen["at"] = time.monotonic()
            stolen["row"] = job_row(store, job_id)

    lab = CountingLab(delay=0.05, on_call=steal)
    try:
        spec["oracle"] = {"name": "http", "url": lab.url, "batch_size": 10, "attempts": 1, "timeout_s": 10}
        canonical = parse_job_spec(spec).model_dump(mode="json")
        job_id = store.create_job("o", canonical, canonical["algorithm"]["iterations"])[0].id
        settings = Settings(data_dir=tmp_path, heartbeat_seconds=HEARTBEAT, slice_seconds=600)
        outcome = run_slice_now(store, settings, job_id, 0, lambda *a: None)
    finally:
        lab.close()
    assert "at" in stolen, "the lease was never stolen: the job made fewer lab calls than planned"
    assert outcome == LEASE_LOST
    late = [t - stolen["at"] for t, _ in lab.calls if t > stolen["at"] + HEARTBEAT + SLACK]
    assert late == [], f"{len(late)} lab calls after the heartbeat that found the lease gone (s after the theft: {late})"
    assert job_row(store, job_id) == stolen["row"]  # the old slice wrote nothing after the theft


def test_a_heartbeat_refused_after_the_slice_released_its_lease_is_no_theft():
    """The slice's own ending writes give the lease back; a heartbeat racing them is refused by
    the store, and must not be read as a theft (no "lease lost", no fence)."""
    from worker.fencing import Fence, LeaseLost

    ours = Fence()
    ours.release()
    assert not ours.heartbeat_refused() and not ours.lost
    ours.check("j")  # nothing raised
    stolen = Fence()
    assert stolen.heartbeat_refused() and stolen.lost
    with pytest.raises(LeaseLost):
        stolen.check("j")
