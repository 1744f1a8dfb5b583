"""Store outages: telling them from bugs, and waiting them out.

A database that restarts, fails over or drops its connections raises SQLAlchemy's
``OperationalError``/``InterfaceError`` (or a ``DBAPIError`` whose connection was invalidated).
That is no fault of the job or of the request: the API answers 503 with ``Retry-After``
(:mod:`service.problems`), and a worker waits until the store is back (:class:`PatientStore`)
instead of failing its slice, so that no attempt of ``LWL_MAX_ATTEMPTS`` is spent on it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

log = logging.getLogger("lwl.outage")

FIRST_WAIT, LONGEST_WAIT = 0.25, 5.0  # seconds between tries: doubling from the first to the longest


class StoreUnavailable(Exception):
    """The store stayed unreachable for longer than a worker waits (LWL_STORE_WAIT_SECONDS)."""


class TellContended(Exception):
    """A tell lost its conditional update to concurrent tells of the same batch too many times
    in a row (``Store.tell``): nothing of it was stored; the API answers 503 with Retry-After."""

    def __init__(self, batch_id: str, attempts: int):
        super().__init__(f"batch {batch_id}: {attempts} concurrent tells in a row changed it first")
        self.batch_id, self.attempts = batch_id, attempts


def is_store_outage(exc: BaseException) -> bool:
    """True for errors of reaching the database, False for errors of what was asked of it."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


class PatientStore:
    """The store's methods, each retried with backoff while the store is unreachable, for up
    to ``wait_seconds`` in all; then :class:`StoreUnavailable`. Other errors pass at once.

    Retrying is safe because every write of a slice is conditional on its lease and generation:
    a write whose commit went through but whose answer was lost is refused or repeated
    unchanged the second time (``Store.acquire`` recognises its own lease)."""

    def __init__(self, store, wait_seconds: float):
        self._store, self._wait = store, wait_seconds

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def patiently(*args, **kwargs):
            deadline = time.monotonic() + self._wait
            pause = FIRST_WAIT
            while True:
                try:
                    return attr(*args, **kwargs)
                except Exception as exc:
                    if not is_store_outage(exc):
                        raise
                    if time.monotonic() + pause > deadline:
                        raise StoreUnavailable(f"store unreachable for {self._wait:g} s: {exc}") from exc
                    log.warning("store unreachable (%s during %s); retrying in %.2f s",
                                type(exc).__name__, name, pause)
                    time.sleep(pause)
                    pause = min(2 * pause, LONGEST_WAIT)

        return patiently
