"""The one task: step a job's algorithm for one bounded slice of time.

A slice takes the job (store lease), restores its last checkpoint, runs :func:`lwl.run_job`
until the job finishes, the slice's time is up or a cancel is requested, writing progress,
history and a checkpoint after every iteration, then either stores the result or enqueues the
next slice. A heartbeat thread keeps the lease fresh; a reaper (:mod:`service.core.reaper`)
re-enqueues jobs whose worker died, and the attempt count in the store fails a job that keeps
killing its workers.

**Fencing stops the work, not only the writes.** A slice that was presumed dead (a long GC
pause, a stalled VM) and reaped keeps its thread; its writes are refused by the lease, but its
computing and its lab calls would go on until its next save, buying the same measurement twice.
So a heartbeat that finds the lease gone marks the slice's :class:`worker.fencing.Fence`, and
the slice stops cooperatively at its next oracle call or step: :mod:`lwl.outbound` refuses (or
aborts) the lab call, ``should_stop`` and ``progress`` raise :class:`LeaseLost`, and the slice
ends as "lease lost" without any further store write (the job is its successor's).

An unreachable store is waited out, not failed: the slice's store calls retry with backoff
(:class:`service.core.outage.PatientStore`) and the slice goes on where it was, keeping its
lease. Only a store gone for longer than ``LWL_STORE_WAIT_SECONDS`` ends the slice, and then its
message goes back to the broker (``Reject(requeue=True)``) rather than being acknowledged and
dropped. A broker that cannot take the next slice's message leaves the job queued in the store,
for the dispatcher (:mod:`service.core.dispatch`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
import uuid
from typing import Callable

from celery.exceptions import Reject

from lwl import outbound
from lwl.oracles.http import OracleCallError
from lwl.runner import Interrupted, run_job
from lwl.spec import SpecError, parse_job_spec
from service.core.dispatch import send_or_leave
from service.core.outage import PatientStore, StoreUnavailable
from service.core.queue import TASK_RUN_SLICE
from service.core.routing import QUEUE_CPU
from service.core.settings import Settings, get_settings
from service.core.store import JobStatus, Store
from worker.asktell import AwaitLabels, StoreOracle, announce
from worker.celery_app import celery_app
from worker.fencing import Fence, LeaseLost
from worker.presence import CURRENT

log = logging.getLogger("lwl.worker")
WORKER_NAME = f"{socket.gethostname()}:{os.getpid()}"

_store: Store | None = None


def get_store() -> Store:
    global _store
    if _store is None:
        _store = Store(get_settings().resolved_database_url())
    return _store


LEASE_LOST = "lease lost"  # what run_slice_now returns for a slice that lost its lease


def problem(title: str, detail: str, status: int = 500, **extra) -> dict:
    return {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}


def run_slice_now(store: Store, settings: Settings, job_id: str, generation: int,
                  enqueue: Callable[[str, int], None]) -> str:
    """Run one slice of a job; returns what happened (for logs and tests)."""
    lease = uuid.uuid4().hex
    job = store.acquire(job_id, generation, lease, WORKER_NAME)
    if job is None:
        return "stale"  # a duplicate or outdated message: another slice owns the job
    if job.attempts > settings.max_attempts:
        store.fail(job_id, lease, problem(
            "Job kept losing its worker",
            f"{job.attempts - 1} slices of this job started and never finished (a worker died, e.g. "
            f"out of memory); giving up after max_attempts={settings.max_attempts}", 500))
        return JobStatus.FAILED
    if job.cancel_requested:
        store.cancelled(job_id, lease)
        return JobStatus.CANCELLED
    try:
        spec = parse_job_spec(job.spec)
    except SpecError as exc:  # cannot happen for specs the API accepted; kept for old rows
        store.fail(job_id, lease, problem("Invalid job spec", str(exc), 422))
        return JobStatus.FAILED
    if spec.device == "auto" and settings.worker_device != "auto":
        spec = spec.model_copy(update={"device": settings.worker_device})

    stop = threading.Event()
    fence = Fence()  # the heartbeat found the lease gone: stop, write nothing more (worker.fencing)

    def beat():
        while not stop.wait(settings.heartbeat_seconds):
            try:
                if not store.heartbeat(job_id, lease):
                    if fence.heartbeat_refused():  # not the slice's own release: taken over
                        log.warning("job %s: lease lost (the job was taken over); the slice stops", job_id)
                    return
            except Exception as exc:  # the store is away: beat again when it is back
                log.warning("job %s: heartbeat not written: %s", job_id, type(exc).__name__)

    threading.Thread(target=beat, daemon=True, name=f"heartbeat-{job_id}").start()
    # the job's time so far: started_at and the heartbeat acquire wrote are on the store's clock,
    # this host's may differ by any amount; from here on the monotonic clock counts
    before = 0.0 if job.started_at is None or job.heartbeat_at is None else job.heartbeat_at - job.started_at
    taken = time.monotonic()
    deadline = time.monotonic() + settings.slice_seconds
    pending: dict = {}
    steps = [0]
    next_cancel_check = [0.0]

    def checkpoint(blob: bytes) -> None:
        pending["blob"] = blob

    def progress(p: dict) -> None:
        fence.check(job_id)
        steps[0] += 1
        doc = {"iteration": p["iteration"], "total": p["total"], "objective": p["objective"],
               "validation_err": p["validation_err"], "labels_used": p.get("labels_used"),
               "elapsed_seconds": before + time.monotonic() - taken}
        if spec.budget is not None:  # a budgeted job: labels used of its budget (one iteration = one round)
            record = p.get("record") or {}
            doc.update(budget=spec.budget, labels_failed=record.get("labels_failed", 0), round=p["iteration"])
        if not store.save_step(job_id, lease, pending["blob"], doc, p["record"]):
            raise LeaseLost(job_id)

    def should_stop() -> bool:
        fence.check(job_id)
        now = time.monotonic()
        if now > deadline and steps[0] > 0:  # every slice moves the job at least one step
            return True
        if now >= next_cancel_check[0]:  # a cancel takes effect within half a second
            next_cancel_check[0] = now + 0.5
            return store.cancel_requested(job_id)
        return False

    oracle = (StoreOracle(store, job_id, lease, spec.oracle.batch_size, fence) if spec.oracle.is_external else None)
    try:
        # a cancel, or the lease lost, also interrupts a lab call in flight (lwl.outbound) and
        # refuses the next one, not only between steps
        with outbound.cancellation(lambda: fence.lost or store.cancel_requested(job_id)):
            try:
                result = run_job(spec, oracle=oracle, resolve=lambda ref: store.load_dataset(ref, job.owner),
                                 state=job.checkpoint, progress=progress, checkpoint=checkpoint,
                                 # checkpoints leave the history out (O(state) per iteration): the
                                 # store keeps one row per iteration and gives them back on resume
                                 checkpoint_history=False,
                                 history=store.history(job_id) if job.checkpoint else None,
                                 should_stop=should_stop)
            finally:  # every write from here on ends the slice and gives its lease back
                fence.release()
    except LeaseLost:
        return LEASE_LOST
    except outbound.Cancelled:
        if fence.lost:
            return LEASE_LOST
        store.cancelled(job_id, lease)
        return JobStatus.CANCELLED
    except AwaitLabels as wait:
        if wait.new_round:  # open_round already paused the job
            announce(spec.oracle.webhook_url, job_id, wait.batch_ids)
        else:
            store.pause_for_labels(job_id, lease)
        return JobStatus.AWAITING_LABELS
    except OracleCallError as exc:
        if fence.lost:  # e.g. the call aborted while the lease went: not the lab's failure
            return LEASE_LOST
        store.fail(job_id, lease, problem("Lab oracle failed", str(exc), 502, batch_id=exc.batch_id))
        return JobStatus.FAILED
    except Interrupted:
        if fence.lost:
            return LEASE_LOST
        if store.cancel_requested(job_id):
            store.cancelled(job_id, lease)
            return JobStatus.CANCELLED
        gen = store.end_slice(job_id, lease)
        if gen is not None:
            send_or_leave(enqueue, job_id, gen)
        return "sliced"
    except StoreUnavailable:  # not the job's fault: the task gives its message back (run_slice)
        raise
    except Exception as exc:  # the job fails with a problem document; the worker lives on
        if fence.lost:  # the job is its successor's now: nothing of this slice's is written
            return LEASE_LOST
        log.error("job %s failed: %s", job_id, traceback.format_exc())
        status = 422 if isinstance(exc, (ValueError, KeyError)) else 500
        store.fail(job_id, lease, problem("Job failed", f"{type(exc).__name__}: {exc}", status))
        return JobStatus.FAILED
    finally:
        stop.set()
    if fence.lost:  # finished after the lease went: the successor's slice stores the result
        return LEASE_LOST
    result["worker"] = WORKER_NAME
    store.succeed(job_id, lease, result)
    return JobStatus.SUCCEEDED


def enqueue(job_id: str, generation: int) -> None:
    run_slice.apply_async(args=[job_id, generation], queue=get_store().job_queue(job_id) or QUEUE_CPU)


@celery_app.task(name=TASK_RUN_SLICE)
def run_slice(job_id: str, generation: int) -> str:
    CURRENT["job"] = job_id  # the worker's heartbeat names the job it runs
    settings = get_settings()
    try:
        # every store call of the slice, its heartbeats included, waits out a store outage
        return run_slice_now(PatientStore(get_store(), settings.store_wait_seconds), settings, job_id,
                             generation, enqueue)
    except StoreUnavailable as exc:
        log.error("job %s: %s; the message goes back to the broker", job_id, exc)
        raise Reject(str(exc), requeue=True) from None
    finally:
        CURRENT["job"] = None
        CURRENT["slices"] += 1
        release_gpu_memory()
        recycle_if_due(get_settings())


def resident_mib() -> float:
    """This process's resident memory (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def recycle_if_due(settings: Settings) -> None:
    """Ask this worker to stop after its slice (a warm shutdown: the task returns and is acked
    first) once it ran ``worker_max_slices`` slices or holds more than ``worker_max_rss_mb``."""
    slices_due = settings.worker_max_slices and CURRENT["slices"] >= settings.worker_max_slices
    rss = resident_mib()
    memory_due = settings.worker_max_rss_mb and rss > settings.worker_max_rss_mb
    if slices_due or memory_due:
        import signal

        log.warning("worker recycles after %d slices (%.0f MiB resident)", CURRENT["slices"], rss)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()


def release_gpu_memory() -> None:
    """Return the slice's cached CUDA blocks to the driver, so the next job (or another process
    on the GPU) starts from free memory; nothing when CUDA was never used here."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
