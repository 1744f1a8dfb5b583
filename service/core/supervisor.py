"""The embedded workers of ``lwl serve``: started, restarted when they die, stopped with it.

A worker that dies (killed, out of memory) is started again after a backoff that doubles from
0.5 s up to 30 s while it keeps dying quickly, and resets once a worker has lived a minute; a
worker that exits cleanly (it recycled itself, LWL_WORKER_MAX_SLICES) is replaced after 0.5 s. Its
job is not lost: the reaper (:mod:`service.core.reaper`) re-enqueues a job whose heartbeat went stale,
from its last checkpoint, and the new worker takes it. Every worker gets the kernel's
parent-death signal (SIGKILL), so when ``lwl serve`` itself is killed, even with SIGKILL, no
worker lives on running a job as an orphan; a normal stop sends SIGTERM first and lets the
current slice checkpoint.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import threading
import time

log = logging.getLogger("lwl.supervisor")

MIN_BACKOFF, MAX_BACKOFF, STABLE_SECONDS = 0.5, 30.0, 60.0


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the parent dies, however it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the parent's stop() still ends the workers
        pass


class WorkerSupervisor:
    """Keep ``count`` processes of ``args`` running until :meth:`stop`."""

    def __init__(self, args: list[str], env: dict, count: int = 1, poll: float = 0.5):
        self.args, self.env, self.count, self.poll = args, env, count, poll
        self.procs: list[subprocess.Popen | None] = [None] * count
        self.started_at = [0.0] * count
        self.backoff = [MIN_BACKOFF] * count
        self.restarts = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def _spawn(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(self.args, env=self.env, preexec_fn=_die_with_parent)
        self.started_at[i] = time.monotonic()

    def start(self) -> "WorkerSupervisor":
        with self._lock:
            for i in range(self.count):
                self._spawn(i)
        threading.Thread(target=self._watch, daemon=True, name="lwl-supervisor").start()
        return self

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.poll() is None]

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            for i, proc in enumerate(self.procs):
                if proc is None or proc.poll() is None:
                    continue
                lived = time.monotonic() - self.started_at[i]
                # a clean exit (a worker recycling itself after its slice budget) is no crash:
                # it is replaced at once and does not grow the backoff
                if lived > STABLE_SECONDS or proc.returncode == 0:
                    self.backoff[i] = MIN_BACKOFF
                wait = self.backoff[i]
                log.warning("embedded worker %d (pid %d) exited with %s after %.0f s; restarting in %.1f s",
                            i, proc.pid, proc.returncode, lived, wait)
                if self._stop.wait(wait):
                    return
                with self._lock:
                    if self._stop.is_set():
                        return
                    self._spawn(i)
                    self.restarts += 1
                if proc.returncode != 0:
                    self.backoff[i] = min(2 * wait, MAX_BACKOFF)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every worker (a slice in progress checkpoints), SIGKILL after ``timeout``."""
        self._stop.set()
        with self._lock:
            procs = [p for p in self.procs if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
