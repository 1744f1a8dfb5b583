"""The job store: tables, queries and checkpoints (SQLAlchemy Core, no web imports).

SQLite in embedded mode, PostgreSQL in distributed mode. The database, not Celery's result
backend, is the source of truth for a job's state. A running job holds a *lease* (the id of
the task slice stepping it) and writes a heartbeat with every checkpoint; writes that carry a
lease which is no longer the job's are refused, so a slice that was presumed dead and re-run
elsewhere can never overwrite its successor.

**One clock: the database's**: every timestamp the store writes or compares is the database
server's time, and cutoffs are ages on that clock (:mod:`service.core.store.engine`).

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
