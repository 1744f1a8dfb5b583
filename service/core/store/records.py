"""The store's typed rows: a job's status and its record, the outcome of an ask/tell point and
a tell, a batch, a dataset's description, a worker, a queued job whose message may be lost."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum, StrEnum
from typing import Self

import numpy as np

from service.core.store.rows import _unjson, _unnpy


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


def job_kind(spec: dict) -> dict:
    """What a job list shows of a spec: the names of its algorithm, family and oracle."""
    def name(part):
        block = spec.get(part)
        return block.get("name") if isinstance(block, dict) else None
    return {"algorithm": name("algorithm"), "family": name("family"), "oracle": name("oracle")}
