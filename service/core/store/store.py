"""The one :class:`Store` that the routers, the workers and the tests use, made of the store's
parts by resource (after Optuna's ``storages/``: one storage face, its tables, its migrations
and its queries apart)."""

from __future__ import annotations

from service.core.store.batch_store import BatchStore
from service.core.store.dataset_store import DatasetStore
from service.core.store.lease_store import LeaseStore
from service.core.store.worker_store import WorkerStore


class Store(LeaseStore, BatchStore, DatasetStore, WorkerStore):
    """The job store on one database URL: jobs from the API's side (:class:`JobStore`) and the
    workers' (:class:`LeaseStore`), the batches and tells of ask/tell rounds
    (:class:`BatchStore`), uploaded datasets (:class:`DatasetStore`) and the worker registry
    (:class:`WorkerStore`), all through one engine and one clock (:class:`StoreEngine`)."""
