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

The store by resource (after Optuna's ``storages/``):

- :mod:`~service.core.store.tables`: the tables (built by the Alembic revisions of
  :mod:`service.core.migrations`);
- :mod:`~service.core.store.records`: the typed rows (``JobRecord``, ``BatchRecord``, ...);
- :mod:`~service.core.store.rows`: JSON and ``.npy`` column values;
- :mod:`~service.core.store.engine`: the connection, the migration on open and the clock;
- :mod:`~service.core.store.job_store`, :mod:`~service.core.store.lease_store`: jobs from the
  API's side and from the workers' (leases and fencing);
- :mod:`~service.core.store.batch_store`: ask/tell rounds, batches and tells;
- :mod:`~service.core.store.dataset_store`, :mod:`~service.core.store.worker_store`: uploaded
  datasets and the worker registry;
- :mod:`~service.core.store.store`: :class:`Store`, all of them on one engine.
"""

from service.core.store.engine import StoreEngine, db_now, private_sqlite_file
from service.core.store.records import (TERMINAL, BatchRecord, DatasetRecord, FullJobRecord, IdempotencyConflict,
                                        JobRecord, JobStatus, PointOutcome, Told, Undispatched, WorkerRecord,
                                        job_kind)
from service.core.store.rows import _npy, _unnpy  # noqa: F401 (tests write and read .npy columns with them)
from service.core.store.store import Store
from service.core.store.tables import datasets, history, jobs, label_batches, metadata, workers

__all__ = ["TERMINAL", "BatchRecord", "DatasetRecord", "FullJobRecord", "IdempotencyConflict", "JobRecord",
           "JobStatus", "PointOutcome", "Store", "StoreEngine", "Told", "Undispatched", "WorkerRecord",
           "datasets", "db_now", "history", "job_kind", "jobs", "label_batches", "metadata",
           "private_sqlite_file", "workers"]
