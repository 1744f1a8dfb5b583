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
    """Whether the slice still holds its lease: set once, by the heartbeat that found it gone."""

    def __init__(self) -> None:
        self._lost = threading.Event()

    def lose(self) -> None:
        self._lost.set()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self, job_id: str) -> None:
        """Raise :class:`LeaseLost` once the lease is gone (before any work or write)."""
        if self._lost.is_set():
            raise LeaseLost(job_id)
