"""Dispatch: the store says which jobs must run; every one of them reaches a worker.

The store is the source of truth. A job becomes runnable in one commit (submitted, a slice
ended, labels told, a dead worker's job reaped) and its slice message is sent after that
commit. The message can still be lost: the process can die between the commit and the send
(an API killed after a tell), the broker can be down at that moment, or it can lose what it
held (Redis restarted without persistence). So a queued job records when its last message
was sent (``jobs.dispatched_at``), and :func:`redispatch_once`, run every few seconds by every
worker and by the API (:mod:`service.core.reaper`), sends it again when

- it has been queued for ``after_seconds`` since its last message, and
- its broker queue holds fewer waiting messages than the store has queued jobs for that queue
  (so a job that merely waits its turn behind others is not sent again and again); as many
  jobs are sent as messages are missing, those sent longest ago first;
- or, whatever the broker holds, its last message is older than ``hold_seconds``. The broker's
  count cannot tell a job's message from a stale copy (a message of an ended job or of an old
  generation, dropped when taken), so a count that covers every queued job vouches for a
  message only for that long: a message's age, not its mere presence, decides whether it is
  held.

Ages are by the store's clock (``Store.undispatched``): the hosts' clocks never enter them.
Each queue is sent to on its own: a send that fails (that queue's broker connection) is logged
and the round goes on with the other queues; the job it failed for is tried again a bound later.

A copy is harmless: a slice message carries the job's generation, only a message of the
current generation can take a queued job (``Store.acquire``), and a job taken or moved on drops
every other copy. Concurrent dispatchers send one copy between them: each claims the re-send
with a conditional update of ``dispatched_at``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Callable

from service.core.routing import QUEUE_CPU
from service.core.store import JobStatus, Store, Undispatched

log = logging.getLogger("lwl.dispatch")

Enqueue = Callable[[str, int], None]


def send_or_leave(enqueue: Enqueue, job_id: str, generation: int) -> bool:
    """Send a slice message for a job the store has just made queued. When the broker is
    unreachable the job is left to :func:`redispatch_once` (it is queued in the store) instead
    of failing the request or the slice that queued it; False then."""
    try:
        enqueue(job_id, generation)
        return True
    except Exception as exc:  # kombu's OperationalError, a connection reset, ...
        log.warning("job %s: could not send its slice message (%s: %s); the dispatcher sends it again",
                    job_id, type(exc).__name__, exc)
        return False


def redrive(store: Store, enqueue: Enqueue, job_id: str) -> bool:
    """Send the message of a queued job again now (a tell retried after its commit: its first
    send may never have happened). Nothing for a job that is not queued."""
    job = store.get_job(job_id)
    if job is None or job.status != JobStatus.QUEUED:
        return False
    store.mark_dispatched(job_id, job.generation)
    return send_or_leave(enqueue, job_id, job.generation)


def redispatch_once(store: Store, enqueue: Enqueue, waiting: Callable[[str], int | None],
                    after_seconds: float, hold_seconds: float | None = None) -> list[str]:
    """Send again the messages the broker may have lost (module docstring); returns the ids.
    ``waiting(queue)``: the messages waiting in a broker queue, None when it cannot be read;
    ``hold_seconds``: the longest a message counts as held (None: as long as the broker's count
    covers it)."""
    lost = store.undispatched(after_seconds)
    if not lost:
        return []
    queued: dict[str, int] = defaultdict(int)
    for queue, n in store.queued_counts().items():
        queued[queue or QUEUE_CPU] += n
    by_queue: dict[str, list[Undispatched]] = defaultdict(list)
    for job in lost:
        by_queue[job.queue or QUEUE_CPU].append(job)
    out = []
    for queue, candidates in by_queue.items():
        held = waiting(queue)
        if held is None:
            continue  # broker unreachable: the next round tries
        # as many as are missing, oldest first: a message still unconsumed long after it was sent
        # is the likeliest lost; if another one was, the next round sends that one. Beyond them,
        # every message older than the hold bound: the count may be made of stale copies
        missing = max(0, queued[queue] - held)
        overdue = sum(hold_seconds is not None and job.age >= hold_seconds for job in candidates)
        for job in candidates[:max(missing, overdue)]:
            if not store.mark_dispatched(job.job_id, job.generation, was=job.sent):
                continue  # another dispatcher re-sends it
            log.warning("job %s: queued %.0f s without being taken and the broker's %s holds %d of %d "
                        "messages; sending it again", job.job_id, job.age, queue, held, queued[queue])
            try:
                enqueue(job.job_id, job.generation)
            except Exception as exc:  # this queue's send failed: the other queues still get theirs
                log.warning("job %s: could not send its slice message to %s (%s: %s); tried again in %g s",
                            job.job_id, queue, type(exc).__name__, exc, after_seconds)
                break
            out.append(job.job_id)
    return out
