"""The embedded SQL broker shared by separate processes: several processes sending to queues that
none of them has used yet all succeed, every message arrives, and a channel keeps working after
losing the race to create a queue (kombu's own transport raised IntegrityError there and left
the channel's session unusable: the API answered 503 to every later submission), and the
broker's tables made by two processes at once."""

from __future__ import annotations

import multiprocessing as mp

from service.core.queue import make_celery
from service.core.settings import Settings
from service.core.sql_broker import TRANSPORT, split_url

PROCESSES, QUEUES = 8, 24


def send_all(data_dir: str, barrier, failures) -> None:
    app = make_celery(Settings(data_dir=data_dir))
    with app.connection_for_write() as conn:
        barrier.wait()
        for q in range(QUEUES):
            try:
                with conn.Producer() as producer:
                    producer.publish({"q": q}, routing_key=f"fresh.{q}", declare=[], serializer="json")
            except Exception as exc:  # what the API turned into a 503
                failures.put(f"fresh.{q}: {type(exc).__name__} {exc}")


def test_processes_sending_to_new_queues_at_once_all_succeed(tmp_path):
    ctx = mp.get_context("fork")
    barrier, failures = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=send_all, args=(str(tmp_path), barrier, failures)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    lost = []
    while not failures.empty():
        lost.append(failures.get())
    assert lost == []
    app = make_celery(Settings(data_dir=tmp_path))
    with app.connection_for_read() as conn:
        counts = [conn.default_channel.queue_declare(queue=f"fresh.{q}", passive=True).message_count
                  for q in range(QUEUES)]
    assert counts == [PROCESSES] * QUEUES


def test_only_sql_broker_urls_get_the_safe_transport():
    assert split_url("sqla+sqlite:////d/broker.db") == ("sqlite:////d/broker.db", TRANSPORT)
    assert split_url("sqlalchemy+postgresql://h/db") == ("postgresql://h/db", TRANSPORT)
    assert split_url("redis://localhost:6379/0") == ("redis://localhost:6379/0", None)
