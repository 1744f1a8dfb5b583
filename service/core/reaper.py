"""The recovery loop of every worker and of the API server: jobs whose worker died are resumed
from their last checkpoint, jobs awaiting labels whose round is fully told are resumed, and
queued jobs whose message the broker lost are sent again.

Crash recovery cannot rest on the broker alone: kombu's local transports never redeliver a
task whose worker was SIGKILLed, and Redis only after its visibility timeout (docs/service.md);
and a broker may lose its messages (service.core.dispatch). Every worker and the server run
this loop; the store's generation counter makes concurrent loops harmless.

A heartbeat cannot be written while the store is unreachable, so every heartbeat looks stale
just after an outage although its slice is alive and waiting for the store. The loop therefore
reaps nothing until the store has been reachable again for ``stale_seconds`` plus the longest
pause of a waiting slice's retries (``LONGEST_WAIT``, :mod:`service.core.outage`), from this
loop's view: a living slice may still be asleep between two tries when the store returns, so
only after that pause has it surely written its heartbeat, and only dead ones are resumed.
(With ``stale_seconds`` below that pause, the hold-off of ``stale_seconds`` alone resumed a
living slice after a 10 s PostgreSQL outage: a flaky test_outages on a loaded machine.)
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from service.core.dispatch import redispatch_once, send_or_leave
from service.core.outage import LONGEST_WAIT, is_store_outage
from service.core.store import Store

log = logging.getLogger("lwl.reaper")


def reap_once(store: Store, stale_seconds: float, enqueue: Callable[[str, int], None]) -> list[str]:
    ids = []
    for job_id, generation in store.requeue_stale(stale_seconds):
        log.warning("job %s: heartbeat older than %.0f s, resuming from its checkpoint", job_id, stale_seconds)
        send_or_leave(enqueue, job_id, generation)  # queued in the store: the dispatcher resends a lost send
        ids.append(job_id)
    return ids


def sweep_stranded_rounds(store: Store, enqueue: Callable[[str, int], None]) -> list[str]:
    """Resume jobs awaiting labels whose round has no pending batch left (Store.requeue_stranded_rounds)."""
    ids = []
    for job_id, generation in store.requeue_stranded_rounds():
        log.warning("job %s: every batch of its round is told but the job was not resumed; resuming it", job_id)
        send_or_leave(enqueue, job_id, generation)
        ids.append(job_id)
    return ids


class Recovery:
    """One round every ``interval`` seconds: reap stale jobs (unless the store was unreachable
    within ``hold_off`` = ``stale_seconds`` + ``LONGEST_WAIT``), then re-send lost messages (``waiting``: the broker's queue sizes,
    :func:`service.core.queue.waiting_messages`; None: no re-sending; ``redispatch_seconds`` and
    ``hold_seconds``: :func:`service.core.dispatch.redispatch_once`'s bounds)."""

    def __init__(self, store: Store, stale_seconds: float, enqueue: Callable[[str, int], None],
                 waiting: Callable[[str], int | None] | None = None, redispatch_seconds: float = 20.0,
                 hold_seconds: float | None = None):
        self.store, self.stale_seconds, self.enqueue = store, stale_seconds, enqueue
        self.waiting, self.redispatch_seconds, self.hold_seconds = waiting, redispatch_seconds, hold_seconds
        self.store_back_at = float("-inf")  # since when the store has answered without a break
        self.hold_off = stale_seconds + LONGEST_WAIT  # after an outage: see the module's docstring

    def round(self) -> None:
        try:
            if time.monotonic() - self.store_back_at >= self.hold_off:
                reap_once(self.store, self.stale_seconds, self.enqueue)
            sweep_stranded_rounds(self.store, self.enqueue)  # judges the store's rows, not heartbeats
            if self.waiting is not None:
                redispatch_once(self.store, self.enqueue, self.waiting, self.redispatch_seconds, self.hold_seconds)
        except Exception as exc:
            if is_store_outage(exc):  # heartbeats are not being written either: wait before judging them
                self.store_back_at = time.monotonic()
            raise


def start_reaper(store: Store, stale_seconds: float, interval: float, enqueue: Callable[[str, int], None],
                 waiting: Callable[[str], int | None] | None = None,
                 redispatch_seconds: float = 20.0, hold_seconds: float | None = None) -> threading.Event:
    recovery = Recovery(store, stale_seconds, enqueue, waiting, redispatch_seconds, hold_seconds)
    stop = threading.Event()

    def loop():
        while not stop.wait(interval):
            try:
                recovery.round()
            except Exception as exc:  # the store or the broker may be briefly unreachable: next round
                log.warning("recovery round failed: %s: %s", type(exc).__name__, exc)

    threading.Thread(target=loop, daemon=True, name="lwl-reaper").start()
    return stop
