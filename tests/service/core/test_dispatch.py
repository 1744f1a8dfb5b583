"""Dispatch and outages against real stores: a lost slice message is sent again after a bounded
time and only when the broker is short of messages, concurrent dispatchers send one copy, a
copy is harmless, a worker's store calls wait out a PostgreSQL outage, and the reaper does not
take a store outage for dead workers."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from lwl.spec import parse_job_spec
from service.core.dispatch import redispatch_once, redrive
from service.core.outage import LONGEST_WAIT, PatientStore, StoreUnavailable
from service.core.reaper import Recovery
from service.core.settings import Settings
from service.core.store import Store, jobs
from service.processes import Postgres
from tests.service.conftest import small_job
from worker.tasks import run_slice_now


@pytest.fixture
def store(tmp_path):
    return Store(f"sqlite:///{tmp_path}/jobs.db")


def submit(store, spec, queue="lwl.cpu") -> str:
    canonical = parse_job_spec(spec).model_dump(mode="json")
    return store.create_job("o", canonical, canonical["algorithm"]["iterations"], queue=queue)[0].id


def test_a_queued_job_is_sent_again_after_the_bound_when_the_broker_is_short(store):
    job_id = submit(store, small_job(iterations=2))
    sent = []
    enqueue = lambda j, g: sent.append((j, g))  # noqa: E731
    # not yet: its message may just be waiting its turn
    assert redispatch_once(store, enqueue, lambda q: 0, after_seconds=60) == []
    # the broker holds a message for every queued job: nothing lost, nothing sent
    assert redispatch_once(store, enqueue, lambda q: 1, after_seconds=0) == []
    # the broker cannot be read: try next round
    assert redispatch_once(store, enqueue, lambda q: None, after_seconds=0) == []
    assert sent == []
    # fewer messages than queued jobs, and queued since before the bound: sent again, same generation
    assert redispatch_once(store, enqueue, lambda q: 0, after_seconds=0) == [job_id]
    assert sent == [(job_id, 0)]
    # its dispatch time moved: the next round waits the bound again
    assert redispatch_once(store, enqueue, lambda q: 0, after_seconds=30) == []


def test_as_many_are_sent_as_messages_are_missing_oldest_first(store):
    first = submit(store, small_job(iterations=2))
    second = submit(store, small_job(iterations=2, seed=1))
    sent = []
    # two queued, one message waiting: one is missing; the one sent longest ago goes again
    assert redispatch_once(store, lambda j, g: sent.append(j), lambda q: 1, after_seconds=0) == [first]
    assert redispatch_once(store, lambda j, g: sent.append(j), lambda q: 1, after_seconds=0) == [second]
    assert sent == [first, second]


def test_concurrent_dispatchers_send_one_copy(tmp_path):
    """Dispatchers in real threads, each with its own store connection (as every worker and the
    API run one), racing: a barrier in the broker's count holds each of them until all have read
    the same lost messages, then they claim them at once. One copy between them per message."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    store = Store(url)
    job_ids = {submit(store, small_job(iterations=2, seed=s)) for s in range(3)}
    with store.engine.begin() as c:  # their messages were sent a minute ago and lost
        c.execute(update(jobs).values(dispatched_at=jobs.c.dispatched_at - 60))
    dispatchers = 6
    stores = [Store(url) for _ in range(dispatchers)]
    barrier = threading.Barrier(dispatchers)
    sent, lock, errors = [], threading.Lock(), []

    def enqueue(job_id, generation):
        with lock:
            sent.append((job_id, generation))

    def waiting(queue: str) -> int:
        barrier.wait(30)  # every dispatcher has read the lost messages: now they race to claim them
        return 0

    def dispatcher(s: Store) -> None:
        try:
            redispatch_once(s, enqueue, waiting, after_seconds=30)
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=dispatcher, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(sent) == sorted((j, 0) for j in job_ids)  # each lost message sent once, by one of them


def test_one_queues_send_error_does_not_stop_the_others(store):
    cpu = submit(store, small_job(iterations=2), queue="lwl.cpu")  # the oldest: tried first
    gpu = submit(store, small_job(iterations=2, seed=1), queue="lwl.cuda")
    sent = []

    def enqueue(job_id, generation):
        if job_id == cpu:
            raise ConnectionError("the lwl.cpu send failed")
        sent.append(job_id)

    assert redispatch_once(store, enqueue, lambda q: 0, after_seconds=0) == [gpu]
    assert sent == [gpu]


def test_a_messages_age_not_its_presence_decides_whether_it_is_held(store):
    """The broker holds as many messages as there are queued jobs, but one of them is a stale
    copy (an ended job's): a job whose last message is older than the hold bound is sent again
    anyway, one sent more recently is not."""
    old = submit(store, small_job(iterations=2))
    recent = submit(store, small_job(iterations=2, seed=1))
    with store.engine.begin() as c:  # old's message was sent ten minutes ago (by the store's clock)
        c.execute(update(jobs).where(jobs.c.id == old).values(dispatched_at=jobs.c.dispatched_at - 600))
    sent = []
    enqueue = lambda j, g: sent.append(j)  # noqa: E731
    assert redispatch_once(store, enqueue, lambda q: 2, after_seconds=0) == []  # no bound: the count vouches
    assert redispatch_once(store, enqueue, lambda q: 2, after_seconds=0, hold_seconds=300) == [old]
    assert sent == [old]
    assert redispatch_once(store, enqueue, lambda q: 2, after_seconds=0, hold_seconds=300) == []  # sent now
    assert recent not in sent


def test_copies_of_a_message_are_harmless(store, tmp_path):
    """A re-sent message of a job whose first message did arrive runs nothing twice."""
    settings = Settings(data_dir=tmp_path)
    job_id = submit(store, small_job(iterations=3))
    sent = []
    redrive(store, lambda j, g: sent.append((j, g)), job_id)
    assert sent == [(job_id, 0)]  # now two messages of generation 0
    assert store.acquire(job_id, 0, "first", "w") is not None
    assert run_slice_now(store, settings, job_id, 0, lambda *a: None) == "stale"  # while the first runs
    store.end_slice(job_id, "first")
    assert run_slice_now(store, settings, job_id, 0, lambda *a: None) == "stale"  # after it moved on
    assert run_slice_now(store, settings, job_id, 1, lambda *a: None) == "succeeded"
    job = store.get_job(job_id)
    assert job.status == "succeeded" and job.attempts == 1
    assert not redrive(store, lambda j, g: sent.append((j, g)), job_id)  # only a queued job is re-driven


@pytest.fixture
def postgres():
    pg = Postgres()
    yield pg
    pg.stop()


@pytest.mark.distributed
def test_store_calls_wait_out_a_postgres_outage_and_the_reaper_holds_off(postgres):
    store = Store(postgres.url)
    job_id = submit(store, small_job(iterations=2))
    assert store.acquire(job_id, 0, "lease", "w") is not None  # a running slice
    patient = PatientStore(store, wait_seconds=60)
    with pytest.raises(KeyError):  # errors of the request, not of the store, are not retried
        patient.load_dataset("missing")
    postgres.stop_immediately()
    recovery = Recovery(store, stale_seconds=5, enqueue=lambda *a: None)
    with pytest.raises(StoreUnavailable):
        PatientStore(store, wait_seconds=1).heartbeat(job_id, "lease")
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(patient.save_step(job_id, "lease", b"x", {}, None)))
    waiting.start()
    time.sleep(2)
    assert answers == []  # still waiting for the store
    with pytest.raises(OperationalError):
        recovery.round()  # the recovery loop's last round of the outage
    postgres.start()
    waiting.join(30)
    assert answers == [True]  # written with its lease, as if nothing happened
    # the slice's heartbeat is older than stale_seconds now, yet the store was away until just now
    with store.engine.begin() as c:
        c.execute(update(jobs).where(jobs.c.id == job_id).values(heartbeat_at=time.time() - 60))
    recovery.round()
    assert store.get_job(job_id).status == "running"  # not reaped: its worker may be waiting like us
    time.sleep(5.2)
    recovery.round()  # stale_seconds later a living slice may still sleep between two retries
    assert store.get_job(job_id).status == "running"
    time.sleep(LONGEST_WAIT)
    recovery.round()  # reachable for stale_seconds + the longest retry pause, no heartbeat: dead
    assert store.get_job(job_id).status == "queued"
    store.engine.dispose()
