"""Re-enqueue jobs whose worker died (stale heartbeat), from their last checkpoint.

Crash recovery cannot rest on the broker alone: kombu's local transports never redeliver a
task whose worker was SIGKILLed, and Redis only after its visibility timeout (docs/service.md). Every
worker and the embedded server run this loop; the store's generation counter makes concurrent
reapers harmless.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from service.core.store import Store

log = logging.getLogger("lwl.reaper")


def reap_once(store: Store, stale_seconds: float, enqueue: Callable[[str, int], None]) -> list[str]:
    ids = []
    for job_id, generation in store.requeue_stale(stale_seconds):
        log.warning("job %s: heartbeat older than %.0f s, resuming from its checkpoint", job_id, stale_seconds)
        enqueue(job_id, generation)
        ids.append(job_id)
    return ids


def start_reaper(store: Store, stale_seconds: float, interval: float,
                 enqueue: Callable[[str, int], None]) -> threading.Event:
    stop = threading.Event()

    def loop():
        while not stop.wait(interval):
            try:
                reap_once(store, stale_seconds, enqueue)
            except Exception:  # the store may be briefly unreachable; try again next round
                log.exception("reaper round failed")

    threading.Thread(target=loop, daemon=True, name="lwl-reaper").start()
    return stop
