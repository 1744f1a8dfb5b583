"""The store's engine: the database connection (SQLite's pragmas, PostgreSQL's pool), the schema
brought to the newest revision, and the store's one clock.

**One clock: the database's.** Every timestamp the store writes or compares (``created_at``,
``updated_at``, ``started_at``, ``finished_at``, ``heartbeat_at``, ``dispatched_at``, a batch's
``labelled_at``, a worker's presence heartbeat) is the database server's time, an SQL
expression evaluated inside the statement (:func:`db_now`): no host's ``time.time()`` enters
them. Cutoffs are given as ages (``requeue_stale(stale_seconds)``, ``undispatched(age)``,
``list_workers(within)``, ``prune_workers(silent_for)``) and evaluated against that same clock,
so the API's host and the workers' hosts may disagree about the time by any amount without a
living job being reaped or a live worker counted dead. Ages a caller shows (how long a worker
has been silent) come from the store too (:meth:`StoreEngine.now`, ``WorkerRecord.silent_seconds``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, cast, create_engine, event, func, literal_column, select
from sqlalchemy.engine import Engine
from sqlalchemy.sql.elements import ColumnElement

from service.core.store.tables import jobs, label_batches


def db_now(dialect: str) -> ColumnElement:
    """The database server's current time in seconds since the epoch, as an SQL expression of
    ``dialect`` evaluated inside the statement that uses it (the store's one clock, see the
    module docstring). SQLite: the Julian day of 'now' (milliseconds), PostgreSQL: the wall
    clock at evaluation (``clock_timestamp()``, not the transaction's start)."""
    if dialect == "sqlite":
        return literal_column("((julianday('now') - 2440587.5) * 86400.0)", Float)
    if dialect == "postgresql":
        return cast(func.extract("epoch", func.clock_timestamp()), Float)
    raise ValueError(f"no database clock known for the {dialect!r} dialect")


def private_sqlite_file(url: str) -> None:
    """Create the SQLite file of ``url`` (``sqlite:///...`` or a broker's ``sqla+sqlite:///...``)
    readable and writable by this user only (0600), or narrow an existing one to 0600: it holds
    every owner's specs, datasets and results. SQLite gives its -wal and -shm files the same
    mode. Other URLs: nothing."""
    import os

    from sqlalchemy.engine import make_url

    url = url.removeprefix("sqla+")
    if not url.startswith("sqlite"):
        return
    path = make_url(url).database
    if not path or path == ":memory:" or path.startswith("file:"):
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class StoreEngine:
    """The connection to the store's database that every part of :class:`service.core.store.Store`
    queries through (``engine``), and the database's clock as an SQL expression (``_now``)."""

    def __init__(self, url: str):
        kwargs: dict[str, Any] = {}
        private_sqlite_file(url)
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            # a dropped connection is found before use (pool_pre_ping) and a server that does not
            # answer is given up on after 5 s: the caller then waits out the outage (service.core.outage)
            kwargs.update(pool_pre_ping=True, pool_size=5, max_overflow=5)
            if url.startswith("postgresql"):
                kwargs["connect_args"] = {"connect_timeout": 5}
        self.engine: Engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            @event.listens_for(self.engine, "connect")
            def _pragmas(conn, _):  # WAL lets the API read while a worker writes
                cur = conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA busy_timeout=30000")
                cur.close()
        # "now" in every statement that stamps or compares a time (the module docstring)
        self._now = db_now(self.engine.dialect.name)
        from service.core.migrations import upgrade

        # the schema of this module, by Alembic revisions (service/core/migrations); a store made
        # before migrations first gains the nullable columns of these tables added since
        upgrade(self.engine, legacy_tables=(jobs, label_batches))

    def ping(self) -> None:
        with self.engine.connect() as c:
            c.execute(select(1))

    def now(self) -> float:
        """The database's clock, the one every stored timestamp is on (seconds since the epoch):
        ``store.now() - job.heartbeat_at`` is how long ago the job beat, whatever this host's
        clock says."""
        with self.engine.connect() as c:
            return float(c.execute(select(self._now)).scalar())
