"""Fencing: a slice whose lease was taken stops working, not only writing.

The store refuses every write that carries a lease which is no longer the job's, but a slice
that was presumed dead (a long GC pause, a stalled VM) and reaped would otherwise go on
computing, and calling an ``http`` lab's instrument, until its next save: the same measurement
bought twice. The slice's heartbeat thread marks the :class:`Fence` when a heartbeat finds the
lease gone; every step, oracle call (through :func:`lwl.outbound.cancellation`) and store write
of the slice checks it first, so the slice stops within one heartbeat, with no further oracle
call and no write.
"""

from __future__ import annotations

import threading


class LeaseLost(Exception):
    """The job was taken over (reaped after a stall) while this slice ran."""


class Fence:
    """Whether the slice still holds its lease: lost once a heartbeat found it gone, unless the
    slice had released it itself (its ending writes and an ask/tell pause give the lease back,
    and a heartbeat racing them must not take that for a theft)."""

    def __init__(self) -> None:
        self._lost = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        """The slice is about to give its lease back itself: a heartbeat refused from now on is
        no theft. Set before the write that releases it."""
        self._released.set()

    def heartbeat_refused(self) -> bool:
        """A heartbeat found the lease gone: the lease is lost unless the slice released it.
        Returns whether it was lost."""
        if self._released.is_set():
            return False
        self._lost.set()
        return True

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self, job_id: str) -> None:
        """Raise :class:`LeaseLost` once the lease is gone (before any work or write)."""
        if self._lost.is_set():
            raise LeaseLost(job_id)
