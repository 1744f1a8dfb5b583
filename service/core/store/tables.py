"""The job store's tables (SQLAlchemy Core): jobs with their iteration history, uploaded
datasets, the batches of ask/tell rounds, and the worker registry. Alembic revisions in
``service/core/migrations/versions`` build them; ``tests/service/core/test_migrations.py`` fails
when these tables and what the revisions build differ."""

from __future__ import annotations

from sqlalchemy import (Boolean, Column, Float, Integer, LargeBinary, MetaData, String, Table, Text,
                        UniqueConstraint)

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
