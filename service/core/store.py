"""The job store: tables, queries and checkpoints (SQLAlchemy Core, no web imports).

SQLite in embedded mode, PostgreSQL in distributed mode. The database, not Celery's result
backend, is the source of truth for a job's state. A running job holds a *lease* (the id of
the task slice stepping it) and writes a heartbeat with every checkpoint; writes that carry a
lease which is no longer the job's are refused, so a slice that was presumed dead and re-run
elsewhere can never overwrite its successor.

**One clock: the database's.** Every timestamp the store writes or compares (``created_at``,
``updated_at``, ``started_at``, ``finished_at``, ``heartbeat_at``, ``dispatched_at``, a batch's
``labelled_at``, a worker's presence heartbeat) is the database server's time, an SQL
expression evaluated inside the statement (:func:`db_now`): no host's ``time.time()`` enters
them. Cutoffs are given as ages (``requeue_stale(stale_seconds)``, ``undispatched(age)``,
``list_workers(within)``, ``prune_workers(silent_for)``) and evaluated against that same clock,
so the API's host and the workers' hosts may disagree about the time by any amount without a
living job being reaped or a live worker counted dead. Ages a caller shows (how long a worker
has been silent) come from the store too (:meth:`Store.now`, ``WorkerRecord.silent_seconds``).
"""

from __future__ import annotations

import io
import json
import math
import uuid
from dataclasses import dataclass, fields
from enum import IntEnum, StrEnum
from typing import Any, Self

import numpy as np
from sqlalchemy import (Boolean, Column, Float, Integer, LargeBinary, MetaData, String, Table, Text,
                        UniqueConstraint, cast, create_engine, delete, event, func, insert, literal_column,
                        select, update)
from sqlalchemy.engine import Engine
from sqlalchemy.sql.elements import ColumnElement

from service.core.outage import TellContended

metadata = MetaData()

jobs = Table(
    "jobs", metadata,
    Column("id", String(32), primary_key=True),
    Column("owner", String(200), nullable=False, index=True),
    Column("status", String(20), nullable=False, index=True),
    Column("spec", Text, nullable=False),
    Column("idempotency_key", String(200)),
    Column("request_hash", String(64)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("total", Integer, nullable=False),
    Column("progress", Text),
    Column("error", Text),
    Column("result", Text),
    Column("checkpoint", LargeBinary),
    Column("attempts", Integer, nullable=False, default=0),
    Column("lease", String(64)),
    Column("worker", String(200)),
    Column("heartbeat_at", Float),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    # each enqueued slice message carries the generation it was sent for; only the current
    # generation may take the job, so duplicate or redelivered messages are dropped
    Column("generation", Integer, nullable=False, default=0),
    Column("ask_step", Integer, nullable=False, default=0),  # latest ask/tell round
    # {"algorithm", "family", "oracle"} names for job lists (the spec column can be megabytes)
    Column("kind", Text),
    Column("queue", String(40)),  # the Celery queue of its slices (service.core.routing)
    # when the last slice message of a queued job was sent (or, before that, when it became
    # queued): service.core.dispatch re-sends one the broker lost, after a bounded time
    Column("dispatched_at", Float),
    UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency"),
)

history = Table(
    "history", metadata,
    Column("job_id", String(32), primary_key=True),
    Column("iteration", Integer, primary_key=True),
    Column("seconds", Float, nullable=False, default=0.0),
    Column("record", Text, nullable=False),
)

datasets = Table(
    "datasets", metadata,
    Column("id", String(32), primary_key=True),
    Column("owner", String(200), nullable=False, index=True),
    Column("shape", Text, nullable=False),
    Column("dtype", String(20), nullable=False),
    Column("nbytes", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
)

label_batches = Table(
    "label_batches", metadata,
    Column("job_id", String(32), primary_key=True),
    Column("batch_id", String(64), primary_key=True),
    Column("step", Integer, nullable=False),  # ask/tell round of the job: 1, 2, ...
    Column("step_key", String(64), nullable=False),  # hash of the round's inputs
    Column("position", Integer, nullable=False),
    Column("n", Integer, nullable=False),
    Column("inputs", LargeBinary, nullable=False),  # .npy bytes
    Column("labels", LargeBinary),  # .npy bytes once every point is told (NaN at failed points)
    Column("created_at", Float, nullable=False),
    Column("labelled_at", Float),
    # per-point outcomes while a batch is told in parts (PointOutcome codes, .npy int8) and the
    # labels told so far (.npy float64, NaN where pending or failed); NULL until the first tell
    Column("outcomes", LargeBinary),
    Column("partial", LargeBinary),
)

class PointOutcome(IntEnum):
    """What became of one point of an ask/tell batch."""

    PENDING = 0
    LABELLED = 1
    FAILED = 2  # the lab's measurement failed: paid for, never data (lwl.outcomes)


@dataclass(frozen=True)
class Told:
    """One tell: ``labels`` of the points ``indices`` of a batch (positions in the batch), with
    ``failed`` marking the points whose measurement failed (their labels are NaN)."""

    indices: np.ndarray  # int64 (k,)
    labels: np.ndarray  # float64 (k,), or (k, p): a field of p values per point (an operator job)
    failed: np.ndarray  # bool (k,)


class JobStatus(StrEnum):
    """A job's place in its life: queued -> running -> succeeded | failed | cancelled; an
    ask/tell job goes running -> awaiting_labels -> queued between rounds; a dead worker's job
    goes running -> queued (the reaper)."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_LABELS = "awaiting_labels"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class IdempotencyConflict(Exception):
    """The same Idempotency-Key was used with another request body."""


def _new_id() -> str:
    return uuid.uuid4().hex


def _json(value) -> str | None:
    return None if value is None else json.dumps(value, allow_nan=False)


def _finite_json(value) -> str:
    """JSON of a progress or history record, with NaN and infinities written as null (a step
    whose objective could not be computed records NaN; strict JSON has no such number)."""
    def clean(v):
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(value), allow_nan=False)


def _unjson(text):
    return None if text is None else json.loads(text)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def _unnpy(b: bytes) -> np.ndarray:
    return np.load(io.BytesIO(b), allow_pickle=False)


_JOB_JSON = ("spec", "progress", "error", "result", "kind")  # the jobs columns that hold JSON


@dataclass(frozen=True)
class JobRecord:
    """One row of the jobs table as the status view reads it (``get_job``, ``list_jobs``), its
    JSON columns decoded; the large columns are a :class:`FullJobRecord`'s."""

    id: str
    owner: str
    status: JobStatus
    idempotency_key: str | None
    request_hash: str | None
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    total: int
    progress: dict | None  # iteration/total, objective, validation error, elapsed; verdict once done
    error: dict | None  # a failed job's problem document
    attempts: int  # slices started since the job last made progress
    lease: str | None  # the id of the slice stepping it
    worker: str | None
    heartbeat_at: float | None
    cancel_requested: bool
    generation: int  # only a slice message of this generation may take the job
    ask_step: int  # latest ask/tell round
    kind: dict | None  # {"algorithm", "family", "oracle"} names; None on rows older than the column
    queue: str | None  # the Celery queue of its slices
    dispatched_at: float | None  # when its last slice message was sent (queued jobs)

    @classmethod
    def from_row(cls, row) -> Self:
        names = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in row.items() if k in names}, "status": JobStatus(row["status"]),
                      "cancel_requested": bool(row["cancel_requested"]),
                      **{k: _unjson(row[k]) for k in _JOB_JSON if k in row and k in names}})


@dataclass(frozen=True)
class FullJobRecord(JobRecord):
    """A job with its large columns (``get_job(full=True)``, ``acquire``): the spec as accepted,
    the result once it succeeded and the last checkpoint (None before the first step)."""

    spec: dict
    result: dict | None
    checkpoint: bytes | None


@dataclass(frozen=True)
class WorkerRecord:
    """A worker process as it reported itself (worker.presence): its device, the queues it
    takes, its hardware facts (``info``: host, pid, version, GPU name and memory) and its last
    heartbeat, with the job it runs now and the slices it ran."""

    name: str
    device: str
    queues: list[str]
    info: dict
    started_at: float
    heartbeat_at: float
    current_job: str | None
    slices: int
    silent_seconds: float = 0.0  # the heartbeat's age by the store's clock when it was read

    @classmethod
    def from_row(cls, row) -> WorkerRecord:
        return cls(**{**row, "queues": _unjson(row["queues"]), "info": _unjson(row["info"])})


@dataclass(frozen=True)
class Undispatched:
    """A queued job whose last slice message may be lost (:meth:`Store.undispatched`)."""

    job_id: str
    generation: int
    queue: str | None
    sent: float  # its dispatched_at (its updated_at on rows from before the column)
    age: float  # seconds since ``sent``, by the store's clock


@dataclass(frozen=True)
class BatchRecord:
    """One batch of an ask/tell round (label_batches): ``n`` inputs to be labelled, as .npy
    bytes, and what was told of them so far (see :meth:`point_state`). ``inputs`` is None where
    a query did not read it (:meth:`Store.batch`)."""

    job_id: str
    batch_id: str  # "<step>.<position>"
    step: int  # the job's ask/tell round: 1, 2, ...
    step_key: str  # hash of the round's inputs
    position: int
    n: int
    labels: bytes | None  # .npy float64 (n,) once every point has an outcome (NaN at failed points)
    created_at: float
    labelled_at: float | None
    outcomes: bytes | None  # .npy int8 PointOutcome codes; None until the first tell
    partial: bytes | None  # .npy float64 labels told so far while the batch is told in parts
    inputs: bytes | None = None  # .npy float64 (n, d)

    @classmethod
    def from_row(cls, row) -> BatchRecord:
        return cls(**row)

    def point_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(outcomes (n,) of PointOutcome codes, labels (n,) told so far, NaN elsewhere)."""
        if self.labels is not None:
            labels = _unnpy(self.labels)
            if self.outcomes is not None:
                return _unnpy(self.outcomes), labels
            return np.full(self.n, PointOutcome.LABELLED, dtype=np.int8), labels  # told whole, before outcomes
        if self.outcomes is None:
            return np.full(self.n, PointOutcome.PENDING, dtype=np.int8), np.full(self.n, np.nan)
        return _unnpy(self.outcomes), _unnpy(self.partial)


@dataclass(frozen=True)
class DatasetRecord:
    """An uploaded (M, d) array's description; :meth:`Store.load_dataset` reads the array."""

    id: str
    owner: str
    shape: list[int]
    dtype: str
    nbytes: int
    created_at: float

    @classmethod
    def from_row(cls, row) -> DatasetRecord:
        return cls(**{**row, "shape": _unjson(row["shape"])})


workers = Table(  # every worker process, with a heartbeat (GET /v1/workers, job conditions)
    "workers", metadata,
    Column("name", String(200), primary_key=True),
    Column("device", String(20), nullable=False),
    Column("queues", Text, nullable=False),  # JSON list
    Column("info", Text, nullable=False),  # JSON: host, pid, version, GPU name and memory
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False, index=True),
    Column("current_job", String(32)),
    Column("slices", Integer, nullable=False, default=0),
)


def job_kind(spec: dict) -> dict:
    """What a job list shows of a spec: the names of its algorithm, family and oracle."""
    def name(part):
        block = spec.get(part)
        return block.get("name") if isinstance(block, dict) else None
    return {"algorithm": name("algorithm"), "family": name("family"), "oracle": name("oracle")}


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


class Store:
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

    # -- jobs: API side -----------------------------------------------------------------------
    def create_job(self, owner: str, spec: dict, total: int, idempotency_key: str | None = None,
                   request_hash: str | None = None, queue: str | None = None,
                   progress: dict | None = None) -> tuple[JobRecord, bool]:
        """Insert a queued job (its progress ``{"iteration": 0, "total": total}`` unless given);
        with an idempotency key, return the existing job instead."""
        now = self._now
        with self.engine.begin() as c:
            if idempotency_key is not None:
                row = c.execute(select(jobs).where(jobs.c.owner == owner,
                                                   jobs.c.idempotency_key == idempotency_key)).mappings().first()
                if row is not None:
                    if row["request_hash"] != request_hash:
                        raise IdempotencyConflict(idempotency_key)
                    return JobRecord.from_row(row), False
            job_id = _new_id()
            c.execute(insert(jobs).values(
                id=job_id, owner=owner, status=JobStatus.QUEUED, spec=_json(spec), idempotency_key=idempotency_key,
                request_hash=request_hash, created_at=now, updated_at=now, total=total, attempts=0,
                cancel_requested=False, generation=0, ask_step=0, progress=_json(progress or {"iteration": 0, "total": total}),
                kind=_json(job_kind(spec)), queue=queue, dispatched_at=now))
        return self.get_job(job_id), True

    def delete_job(self, job_id: str) -> None:
        with self.engine.begin() as c:
            c.execute(delete(history).where(history.c.job_id == job_id))
            c.execute(delete(label_batches).where(label_batches.c.job_id == job_id))
            c.execute(delete(jobs).where(jobs.c.id == job_id))

    def get_job(self, job_id: str, owner: str | None = None, *, full: bool = False) -> JobRecord | FullJobRecord | None:
        # the status view reads neither the spec nor the large blobs
        cols = list(jobs.c) if full else [c for c in jobs.c if c.name not in ("checkpoint", "result", "spec")]
        q = select(*cols).where(jobs.c.id == job_id)
        if owner is not None:
            q = q.where(jobs.c.owner == owner)
        with self.engine.connect() as c:
            row = c.execute(q).mappings().first()
        return None if row is None else (FullJobRecord if full else JobRecord).from_row(row)

    def list_jobs(self, owner: str | None, status: str | None, limit: int, before: tuple | None) -> list[JobRecord]:
        cols = [c for c in jobs.c if c.name not in ("checkpoint", "result", "spec")]
        q = select(*cols).order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)
        if owner is not None:
            q = q.where(jobs.c.owner == owner)
        if status is not None:
            q = q.where(jobs.c.status == status)
        if before is not None:  # keyset paging: strictly after the cursor in this order
            ts, jid = before
            q = q.where((jobs.c.created_at < ts) | ((jobs.c.created_at == ts) & (jobs.c.id < jid)))
        with self.engine.connect() as c:
            return [JobRecord.from_row(r) for r in c.execute(q).mappings()]

    def history(self, job_id: str, after: int | None = None) -> list[dict]:
        """The job's iteration records in order; ``after``: only iterations after that one."""
        q = select(history.c.record).where(history.c.job_id == job_id)
        if after is not None:
            q = q.where(history.c.iteration > after)
        with self.engine.connect() as c:
            return [json.loads(r) for r in c.execute(q.order_by(history.c.iteration)).scalars()]

    def job_queue(self, job_id: str) -> str | None:
        with self.engine.connect() as c:
            return c.execute(select(jobs.c.queue).where(jobs.c.id == job_id)).scalar()

    # -- workers ------------------------------------------------------------------------------
    def register_worker(self, name: str, device: str, queues: list[str], info: dict) -> None:
        now = self._now
        with self.engine.begin() as c:
            c.execute(delete(workers).where(workers.c.name == name))
            c.execute(insert(workers).values(name=name, device=device, queues=_json(queues), info=_json(info),
                                             started_at=now, heartbeat_at=now, current_job=None, slices=0))

    def worker_heartbeat(self, name: str, current_job: str | None, slices: int) -> None:
        with self.engine.begin() as c:
            c.execute(update(workers).where(workers.c.name == name)
                      .values(heartbeat_at=self._now, current_job=current_job, slices=slices))

    def remove_worker(self, name: str) -> None:
        with self.engine.begin() as c:
            c.execute(delete(workers).where(workers.c.name == name))

    def list_workers(self, within: float | None = None) -> list[WorkerRecord]:
        """Workers whose last heartbeat is at most ``within`` seconds old by the store's clock
        (None: every worker), newest first; each with its ``silent_seconds``."""
        q = select(workers, (self._now - workers.c.heartbeat_at).label("silent_seconds"))
        if within is not None:
            q = q.where(workers.c.heartbeat_at > self._now - within)
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(workers.c.heartbeat_at.desc())).mappings()
            return [WorkerRecord.from_row(r) for r in rows]

    def prune_workers(self, silent_for: float) -> None:
        """Forget workers silent for more than ``silent_for`` seconds by the store's clock (dead
        for long; their jobs were reaped)."""
        with self.engine.begin() as c:
            c.execute(delete(workers).where(workers.c.heartbeat_at < self._now - silent_for))

    def spec(self, job_id: str) -> dict | None:
        with self.engine.connect() as c:
            text = c.execute(select(jobs.c.spec).where(jobs.c.id == job_id)).scalar()
        return _unjson(text)

    def request_cancel(self, job_id: str) -> bool:
        """Queued jobs are cancelled at once; running ones at their next step boundary. False
        when the job had already ended (nothing changed)."""
        now = self._now
        with self.engine.begin() as c:
            stopped = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.status.in_((JobStatus.QUEUED, JobStatus.AWAITING_LABELS)))
                                .values(status=JobStatus.CANCELLED, cancel_requested=True, finished_at=now, updated_at=now))
            asked = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.status == JobStatus.RUNNING)
                              .values(cancel_requested=True, updated_at=now))
        return stopped.rowcount + asked.rowcount > 0

    def iteration_totals(self) -> tuple[int, float]:
        with self.engine.connect() as c:
            n, total = c.execute(select(func.count(), func.coalesce(func.sum(history.c.seconds), 0.0))).one()
        return int(n), float(total)

    def counts_by_status(self) -> dict[str, int]:
        with self.engine.connect() as c:
            rows = c.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()
        return {s.value: 0 for s in JobStatus} | {s: n for s, n in rows}

    # -- jobs: worker side --------------------------------------------------------------------
    def acquire(self, job_id: str, generation: int, lease: str, worker: str) -> FullJobRecord | None:
        """Take a queued job for one slice if ``generation`` is current; counts the attempt.
        Returns the full job (with checkpoint) or None when the message is stale."""
        now = self._now
        with self.engine.begin() as c:
            res = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.status == JobStatus.QUEUED,
                                               jobs.c.generation == generation)
                            .values(status=JobStatus.RUNNING, lease=lease, worker=worker, heartbeat_at=now, updated_at=now,
                                    attempts=jobs.c.attempts + 1, started_at=func.coalesce(jobs.c.started_at, now)))
            if res.rowcount != 1:
                # a retry after a lost commit acknowledgement (a store outage): the first try took it
                mine = c.execute(select(jobs.c.lease).where(jobs.c.id == job_id)).scalar() == lease
                if not mine:
                    return None
        return self.get_job(job_id, full=True)

    def save_step(self, job_id: str, lease: str, checkpoint: bytes, progress: dict, record: dict | None) -> bool:
        """Checkpoint, progress, history record and heartbeat in one transaction; False when
        the lease was lost (the job was taken over or cancelled)."""
        now = self._now
        with self.engine.begin() as c:
            res = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.lease == lease)
                            .values(checkpoint=checkpoint, progress=_finite_json(progress), heartbeat_at=now,
                                    updated_at=now))
            if res.rowcount != 1:
                return False
            if record is not None:
                it = int(record["iteration"])
                # a slice replayed after a crash rewrites the same iterations: replace them
                c.execute(delete(history).where(history.c.job_id == job_id, history.c.iteration == it))
                c.execute(insert(history).values(job_id=job_id, iteration=it, record=_finite_json(record),
                                                 seconds=float(record.get("seconds", 0.0))))
        return True

    def heartbeat(self, job_id: str, lease: str) -> bool:
        """Refresh the lease's heartbeat (the store's clock); False when the lease is no longer
        the job's (reaped, cancelled or taken over): the slice must stop (worker.tasks)."""
        with self.engine.begin() as c:
            return c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.lease == lease)
                             .values(heartbeat_at=self._now)).rowcount == 1

    def cancel_requested(self, job_id: str) -> bool:
        with self.engine.connect() as c:
            return bool(c.execute(select(jobs.c.cancel_requested).where(jobs.c.id == job_id)).scalar())

    def _finish(self, job_id: str, lease: str | None, **values) -> bool:
        now = self._now
        q = update(jobs).where(jobs.c.id == job_id)
        if lease is not None:
            q = q.where(jobs.c.lease == lease)
        with self.engine.begin() as c:
            return c.execute(q.values(updated_at=now, lease=None, **values)).rowcount == 1

    def end_slice(self, job_id: str, lease: str) -> int | None:
        """The slice made progress and stops cleanly: requeue under the next generation and
        reset the attempt count. Returns the generation to enqueue, None if the lease was lost."""
        ok = self._finish(job_id, lease, status=JobStatus.QUEUED, attempts=0, generation=jobs.c.generation + 1,
                          dispatched_at=self._now)
        return self.get_job(job_id).generation if ok else None

    def succeed(self, job_id: str, lease: str, result: dict) -> bool:
        """Store the result; its verdict, warnings and kept iterate also go into ``progress`` so
        that ``GET /v1/jobs/{id}`` shows them without reading the whole result."""
        job = self.get_job(job_id)
        progress = {**((job and job.progress) or {}),
                    **{k: result[k] for k in ("verdict", "warnings", "selected", "labels_used") if k in result}}
        return self._finish(job_id, lease, status=JobStatus.SUCCEEDED, result=_json(result), progress=_json(progress),
                            finished_at=self._now)

    def fail(self, job_id: str, lease: str | None, problem: dict) -> bool:
        return self._finish(job_id, lease, status=JobStatus.FAILED, error=_json(problem), finished_at=self._now)

    def cancelled(self, job_id: str, lease: str) -> bool:
        return self._finish(job_id, lease, status=JobStatus.CANCELLED, finished_at=self._now)

    def requeue_stale(self, stale_seconds: float) -> list[tuple[str, int]]:
        """Running jobs whose heartbeat is older than ``stale_seconds`` by the store's clock
        (their worker died) go back to queued under a new generation; returns (id, generation)
        pairs to enqueue."""
        cutoff = self._now - stale_seconds
        out = []
        with self.engine.begin() as c:
            rows = c.execute(select(jobs.c.id, jobs.c.generation).where(
                jobs.c.status == JobStatus.RUNNING, jobs.c.heartbeat_at < cutoff)).all()
            for job_id, gen in rows:
                res = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.generation == gen,
                                                   jobs.c.status == JobStatus.RUNNING)
                                .values(status=JobStatus.QUEUED, lease=None, generation=gen + 1, updated_at=self._now,
                                        dispatched_at=self._now))
                if res.rowcount == 1:
                    out.append((job_id, gen + 1))
        return out

    def requeue_stranded_rounds(self) -> list[tuple[str, int]]:
        """Jobs awaiting labels whose current round has batches and none of them pending: every
        label is in, but no tell requeued the job (a round that two tells completed at once
        before tells locked the job row; issue 84). They go to queued under a new generation, as
        the round's last tell would have sent them; returns (id, generation) pairs to enqueue."""
        pending = select(label_batches.c.batch_id).where(
            label_batches.c.job_id == jobs.c.id, label_batches.c.step == jobs.c.ask_step,
            label_batches.c.labels.is_(None)).exists()
        told = select(label_batches.c.batch_id).where(
            label_batches.c.job_id == jobs.c.id, label_batches.c.step == jobs.c.ask_step).exists()
        stranded = (jobs.c.status == JobStatus.AWAITING_LABELS) & told & ~pending
        out = []
        with self.engine.begin() as c:
            for job_id, gen in c.execute(select(jobs.c.id, jobs.c.generation).where(stranded)).all():
                res = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.generation == gen, stranded)
                                .values(status=JobStatus.QUEUED, generation=gen + 1, updated_at=self._now,
                                        dispatched_at=self._now))
                if res.rowcount == 1:
                    out.append((job_id, gen + 1))
        return out

    def undispatched(self, age: float) -> list[Undispatched]:
        """Queued jobs whose last slice message was sent more than ``age`` seconds ago by the
        store's clock, oldest first. Their message may be lost."""
        sent = func.coalesce(jobs.c.dispatched_at, jobs.c.updated_at)
        with self.engine.connect() as c:
            rows = c.execute(select(jobs.c.id, jobs.c.generation, jobs.c.queue, sent, self._now - sent)
                             .where(jobs.c.status == JobStatus.QUEUED, sent < self._now - age)
                             .order_by(sent)).all()
        return [Undispatched(*r) for r in rows]

    def queued_counts(self) -> dict[str | None, int]:
        """Queued jobs per queue (None: jobs stored before routing)."""
        with self.engine.connect() as c:
            rows = c.execute(select(jobs.c.queue, func.count()).where(jobs.c.status == JobStatus.QUEUED)
                             .group_by(jobs.c.queue)).all()
        return {q: n for q, n in rows}

    def mark_dispatched(self, job_id: str, generation: int, was: float | None = None) -> bool:
        """Record that a message for ``generation`` was just sent. With ``was`` (the
        dispatched_at read before), only if nobody re-sent it in between: concurrent
        dispatchers (every worker and the API run one) send one copy, not one each."""
        q = update(jobs).where(jobs.c.id == job_id, jobs.c.status == JobStatus.QUEUED,
                               jobs.c.generation == generation)
        if was is not None:
            q = q.where(func.coalesce(jobs.c.dispatched_at, jobs.c.updated_at) == was)
        with self.engine.begin() as c:
            return c.execute(q.values(dispatched_at=self._now)).rowcount == 1

    # -- ask/tell -----------------------------------------------------------------------------
    def round_batches(self, job_id: str, step_key: str) -> list[BatchRecord]:
        """The batches of the ask/tell round whose inputs hash to ``step_key``, in order."""
        with self.engine.connect() as c:
            rows = c.execute(select(label_batches).where(label_batches.c.job_id == job_id,
                                                         label_batches.c.step_key == step_key)
                             .order_by(label_batches.c.position)).mappings().all()
        return [BatchRecord.from_row(r) for r in rows]

    def step_batches(self, job_id: str, step: int) -> list[BatchRecord]:
        """Every batch of the job's ask/tell round ``step`` (inputs included), in order."""
        with self.engine.connect() as c:
            rows = c.execute(select(label_batches).where(label_batches.c.job_id == job_id,
                                                         label_batches.c.step == step)
                             .order_by(label_batches.c.position)).mappings().all()
        return [BatchRecord.from_row(r) for r in rows]

    def open_round(self, job_id: str, lease: str, step_key: str, inputs: np.ndarray,
                   batch_size: int | None) -> list[str]:
        """Split ``inputs`` into batches of a new round and pause the job (awaiting_labels)."""
        now = self._now
        size = batch_size or len(inputs)
        with self.engine.begin() as c:
            step = c.execute(select(jobs.c.ask_step).where(jobs.c.id == job_id)).scalar() + 1
            ids = []
            for pos, i in enumerate(range(0, len(inputs), size)):
                part = inputs[i:i + size]
                batch_id = f"{step}.{pos}"
                c.execute(insert(label_batches).values(
                    job_id=job_id, batch_id=batch_id, step=step, step_key=step_key, position=pos, n=len(part),
                    inputs=_npy(part), created_at=now))
                ids.append(batch_id)
            res = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.lease == lease)
                            .values(ask_step=step, status=JobStatus.AWAITING_LABELS, lease=None, attempts=0,
                                    updated_at=now))
            if res.rowcount != 1:
                raise RuntimeError("lease lost while opening an ask/tell round")
        return ids

    def pause_for_labels(self, job_id: str, lease: str) -> bool:
        """The round's batches exist already (a resumed slice): pause again."""
        return self._finish(job_id, lease, status=JobStatus.AWAITING_LABELS, attempts=0)

    def batch(self, job_id: str, batch_id: str) -> BatchRecord | None:
        """The batch without its inputs (``inputs`` is None)."""
        cols = [c for c in label_batches.c if c.name != "inputs"]
        with self.engine.connect() as c:
            row = c.execute(select(*cols).where(label_batches.c.job_id == job_id,
                                                label_batches.c.batch_id == batch_id)).mappings().first()
        return None if row is None else BatchRecord.from_row(row)

    def pending_batches(self, job_id: str, inputs: bool = True) -> list[BatchRecord]:
        """Unlabelled batches of the job's current round (with their inputs unless ``inputs`` is
        False: then ``inputs`` is None)."""
        cols = [c for c in label_batches.c if inputs or c.name != "inputs"]
        with self.engine.connect() as c:
            step = c.execute(select(jobs.c.ask_step).where(jobs.c.id == job_id)).scalar()
            rows = c.execute(select(*cols).where(
                label_batches.c.job_id == job_id, label_batches.c.step == step,
                label_batches.c.labels.is_(None)).order_by(label_batches.c.position)).mappings().all()
        return [BatchRecord.from_row(r) for r in rows]

    def tell(self, job_id: str, batch_id: str, told: Told) -> tuple[str, int | None]:
        """Store the outcomes of some points of a batch (all of them, or a part: the rest stays
        pending). Returns (outcome, generation to enqueue or None): ``accepted``, ``duplicate``
        (every point told before with the same outcome: no change), ``conflict`` (a point told
        before with another label or outcome: nothing stored), ``stale`` (a batch of an earlier
        round), ``unknown``. A failed point's outcome is final. When every point of the round
        has an outcome the job is requeued under a new generation. :class:`TellContended` when
        concurrent tells of the batch won every one of 20 tries (nothing stored)."""
        for _ in range(20):
            answer = self._tell_once(job_id, batch_id, told)
            if answer is not None:
                return answer
        raise TellContended(batch_id, 20)

    def _tell_once(self, job_id: str, batch_id: str, told: Told) -> tuple[str, int | None] | None:
        """One attempt of :meth:`tell`; None when another tell of the same batch came in between
        (the update is conditional on the outcomes read, so two partial tells cannot overwrite
        each other's points)."""
        now = self._now
        with self.engine.begin() as c:
            # the job row is locked first (PostgreSQL: FOR UPDATE; SQLite writes one transaction
            # at a time, and pysqlite's transaction starts at the first UPDATE below, so the count
            # of missing batches runs under the write lock there too): tells of one job count the
            # missing batches one after another, each seeing the others' committed batches, so a
            # round completes exactly once however its batches' tells interleave (issue 84). Under
            # READ COMMITTED without it, two tells completing the last two batches at once each
            # counted the other's batch as missing, and neither requeued the job.
            job = c.execute(select(jobs.c.ask_step, jobs.c.status, jobs.c.generation)
                            .where(jobs.c.id == job_id).with_for_update()).mappings().first()
            row = c.execute(select(label_batches).where(label_batches.c.job_id == job_id,
                                                        label_batches.c.batch_id == batch_id)).mappings().first()
            if row is None:
                return "unknown", None
            batch = BatchRecord.from_row(row)
            outcomes, values = batch.point_state()
            if told.labels.ndim == 2 and values.ndim == 1:  # the first tell of a batch of fields
                values = np.full((batch.n, told.labels.shape[1]), np.nan)
            i = told.indices
            was = outcomes[i]
            known = was != PointOutcome.PENDING
            want = np.where(told.failed, PointOutcome.FAILED, PointOutcome.LABELLED).astype(np.int8)
            equal = values[i] == told.labels
            same = (was == want) & (told.failed | (equal.all(1) if equal.ndim == 2 else equal))
            if np.any(known & ~same):
                return "conflict", None
            if known.all():
                return "duplicate", None
            if batch.step != job["ask_step"] or job["status"] != JobStatus.AWAITING_LABELS:
                return "stale", None
            outcomes, values = outcomes.copy(), values.copy()
            failed = told.failed[:, None] if told.labels.ndim == 2 else told.failed
            outcomes[i], values[i] = want, np.where(failed, np.nan, told.labels)
            complete = not np.any(outcomes == PointOutcome.PENDING)
            unchanged = (label_batches.c.outcomes.is_(None) if batch.outcomes is None
                         else label_batches.c.outcomes == batch.outcomes)
            res = c.execute(update(label_batches).where(label_batches.c.job_id == job_id,
                                                        label_batches.c.batch_id == batch_id,
                                                        label_batches.c.labels.is_(None), unchanged)
                            .values(outcomes=_npy(outcomes), partial=None if complete else _npy(values),
                                    labels=_npy(values) if complete else None, labelled_at=now))
            if res.rowcount != 1:
                return None  # told by a concurrent request in between: read again
            if not complete:
                return "accepted", None
            missing = c.execute(select(func.count()).select_from(label_batches).where(
                label_batches.c.job_id == job_id, label_batches.c.step == batch.step,
                label_batches.c.labels.is_(None))).scalar()
            if missing:
                return "accepted", None
            res = c.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.status == JobStatus.AWAITING_LABELS)
                            .values(status=JobStatus.QUEUED, generation=jobs.c.generation + 1, updated_at=now,
                                    dispatched_at=now))
            if res.rowcount != 1:
                return "accepted", None
            # read under the write: on SQLite the job was read above before its write lock was held
            return "accepted", c.execute(select(jobs.c.generation).where(jobs.c.id == job_id)).scalar()

    def result(self, job_id: str) -> dict | None:
        with self.engine.connect() as c:
            return _unjson(c.execute(select(jobs.c.result).where(jobs.c.id == job_id)).scalar())

    # -- datasets -----------------------------------------------------------------------------
    def put_dataset(self, owner: str, array: np.ndarray) -> DatasetRecord:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        ds_id = _new_id()
        with self.engine.begin() as c:
            c.execute(insert(datasets).values(id=ds_id, owner=owner, shape=_json(list(array.shape)),
                                              dtype=str(array.dtype), nbytes=int(array.nbytes),
                                              data=buf.getvalue(), created_at=self._now))
        return self.get_dataset(ds_id, owner)

    def get_dataset(self, ds_id: str, owner: str | None = None) -> DatasetRecord | None:
        q = select(datasets.c.id, datasets.c.owner, datasets.c.shape, datasets.c.dtype, datasets.c.nbytes,
                   datasets.c.created_at).where(datasets.c.id == ds_id)
        if owner is not None:
            q = q.where(datasets.c.owner == owner)
        with self.engine.connect() as c:
            row = c.execute(q).mappings().first()
        return None if row is None else DatasetRecord.from_row(row)

    def load_dataset(self, ds_id: str, owner: str | None = None) -> np.ndarray:
        q = select(datasets.c.data).where(datasets.c.id == ds_id)
        if owner is not None:
            q = q.where(datasets.c.owner == owner)
        with self.engine.connect() as c:
            data = c.execute(q).scalar()
        if data is None:
            raise KeyError(ds_id)
        return np.load(io.BytesIO(data), allow_pickle=False)
