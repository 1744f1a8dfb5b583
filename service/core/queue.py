"""The Celery configuration shared by the API (which only sends) and the workers.

JSON only (never pickle), late acks, reject on worker loss, prefetch 1, no result backend.
The API sends tasks by name, so it never imports worker code.
"""

from __future__ import annotations

from typing import Callable

from celery import Celery

from service.core.routing import QUEUE_CPU
from service.core.settings import Settings
from service.core.sql_broker import split_url
from service.core.store import private_sqlite_file

TASK_RUN_SLICE = "lwl.run_slice"


def make_celery(settings: Settings, include: list[str] | None = None) -> Celery:
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    private_sqlite_file(settings.resolved_broker_url())  # 0600, like the job store
    broker, transport = split_url(settings.resolved_broker_url())
    app = Celery("lwl", broker=broker, include=include or [])
    if transport:  # the SQL broker: kombu's transport made safe for several processes
        app.conf.broker_transport = transport
    app.conf.update(
        task_serializer="json", accept_content=["json"], result_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,  # a message is acked only after its slice ended...
        task_reject_on_worker_lost=True,  # ...and requeued if the worker process died
        worker_prefetch_multiplier=1,  # a worker holds one message at a time
        task_default_queue=QUEUE_CPU,  # every send names its queue (service.core.routing)
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=5,
        worker_hijack_root_logger=False,
    )
    if app.conf.broker_url.startswith(("redis", "rediss")):
        # slices are bounded (slice_seconds) far below Redis' redelivery timeout
        app.conf.broker_transport_options = {"visibility_timeout": 3600}
    return app


def sender(app: Celery, queue_of: Callable[[str], str | None]):
    """``enqueue(job_id, generation)`` that sends one slice message to the job's queue
    (``queue_of(job_id)``, e.g. :meth:`Store.job_queue`; jobs from before routing: lwl.cpu)."""

    def enqueue(job_id: str, generation: int) -> None:
        app.send_task(TASK_RUN_SLICE, args=[job_id, generation], queue=queue_of(job_id) or QUEUE_CPU)

    return enqueue


def waiting_messages(app: Celery) -> Callable[[str], int | None]:
    """``waiting(queue)``: how many messages wait in a broker queue (not those a worker holds),
    or None when the broker cannot be reached (service.core.dispatch compares it with the
    store's queued jobs). Kombu's virtual transports (Redis, the embedded SQLite broker) count
    them on a passive declare; a queue the broker does not know (Redis restarted empty) holds
    none."""
    from kombu.exceptions import ChannelError

    def waiting(queue: str) -> int | None:
        try:
            with app.connection_for_read() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
                try:
                    return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
                except ChannelError:  # NOT_FOUND: nothing was ever sent to it since the broker started
                    return 0
        except Exception:  # unreachable: the caller tries again next round
            return None

    return waiting
