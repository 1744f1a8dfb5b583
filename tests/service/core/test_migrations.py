"""The job store's schema migrations (service.core.migrations, Alembic)."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from service.core import migrations
from service.core.store import Store, metadata


def _differences(engine) -> list:
    with engine.connect() as c:
        return compare_metadata(MigrationContext.configure(c), metadata)


def test_a_new_store_is_at_the_head_and_its_tables_are_the_store_modules(tmp_path):
    """Fails when a table of service.core.store changes without a revision that builds it."""
    store = Store(f"sqlite:///{tmp_path / 'new.db'}")
    assert migrations.current(store.engine) == migrations.head() == "0003"
    assert _differences(store.engine) == []
    Store(f"sqlite:///{tmp_path / 'new.db'}")  # opening again changes nothing
    assert migrations.current(store.engine) == "0003"


# the store as lwl made it before the columns kind, queue (jobs), outcomes, partial
# (label_batches) and the workers table were added, and before migrations existed
OLD_SCHEMA = """
CREATE TABLE jobs (id VARCHAR(32) NOT NULL, owner VARCHAR(200) NOT NULL, status VARCHAR(20) NOT NULL,
  spec TEXT NOT NULL, idempotency_key VARCHAR(200), request_hash VARCHAR(64), created_at FLOAT NOT NULL,
  updated_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT, total INTEGER NOT NULL, progress TEXT,
  error TEXT, result TEXT, checkpoint BLOB, attempts INTEGER NOT NULL, lease VARCHAR(64), worker VARCHAR(200),
  heartbeat_at FLOAT, cancel_requested BOOLEAN NOT NULL, generation INTEGER NOT NULL, ask_step INTEGER NOT NULL,
  PRIMARY KEY (id), CONSTRAINT uq_jobs_owner_idempotency UNIQUE (owner, idempotency_key));
CREATE INDEX ix_jobs_owner ON jobs (owner);
CREATE INDEX ix_jobs_status ON jobs (status);
CREATE TABLE history (job_id VARCHAR(32) NOT NULL, iteration INTEGER NOT NULL, seconds FLOAT NOT NULL,
  record TEXT NOT NULL, PRIMARY KEY (job_id, iteration));
CREATE TABLE datasets (id VARCHAR(32) NOT NULL, owner VARCHAR(200) NOT NULL, shape TEXT NOT NULL,
  dtype VARCHAR(20) NOT NULL, nbytes INTEGER NOT NULL, data BLOB NOT NULL, created_at FLOAT NOT NULL,
  PRIMARY KEY (id));
CREATE INDEX ix_datasets_owner ON datasets (owner);
CREATE TABLE label_batches (job_id VARCHAR(32) NOT NULL, batch_id VARCHAR(64) NOT NULL, step INTEGER NOT NULL,
  step_key VARCHAR(64) NOT NULL, position INTEGER NOT NULL, n INTEGER NOT NULL, inputs BLOB NOT NULL,
  labels BLOB, created_at FLOAT NOT NULL, labelled_at FLOAT, PRIMARY KEY (job_id, batch_id));
INSERT INTO jobs (id, owner, status, spec, created_at, updated_at, total, attempts, cancel_requested,
  generation, ask_step) VALUES ('j1', 'alice', 'succeeded', '{}', 1.0, 2.0, 10, 0, 0, 3, 0);
"""


def test_a_store_made_before_migrations_is_upgraded_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as c:
        c.executescript(OLD_SCHEMA)
    store = Store(f"sqlite:///{path}")
    assert migrations.current(store.engine) == migrations.head()
    assert _differences(store.engine) == []
    job = store.get_job("j1", "alice")
    assert job.status == "succeeded" and job.total == 10 and job.queue is None
    assert "workers" in inspect(store.engine).get_table_names()


def test_a_first_start_cut_short_is_finished_by_the_next(tmp_path):
    """SQLite commits each CREATE TABLE on its own: a first start killed after the jobs table
    leaves a store without a version row; the next start makes the rest."""
    path = tmp_path / "cut.db"
    with sqlite3.connect(path) as c:
        c.executescript(OLD_SCHEMA.split("CREATE TABLE history")[0])  # the jobs table only
        c.executescript("INSERT INTO" + OLD_SCHEMA.split("INSERT INTO")[1])  # and its row
    store = Store(f"sqlite:///{path}")
    assert migrations.current(store.engine) == migrations.head()
    assert _differences(store.engine) == []
    assert store.get_job("j1", "alice").status == "succeeded"


def test_processes_that_open_a_new_store_together_all_get_it(tmp_path):
    """Separate processes (the API and its workers start together) on one new SQLite store."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'raced.db'}"
    code = ("import sys; from service.core.store import Store; from service.core import migrations; "
            "print(migrations.current(Store(sys.argv[1]).engine))")
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-500:] for _, err in outs]
    assert {out.strip() for out, _ in outs} == {migrations.head()}


def test_threads_of_one_process_that_open_a_new_store_together_all_get_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'raced.db'}"
    errors, stores = [], []

    def open_store():
        try:
            stores.append(Store(url))
        except Exception as exc:  # noqa: BLE001 (the assertion below reports it)
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == 4
    assert migrations.current(stores[0].engine) == migrations.head()


@pytest.mark.distributed
def test_postgres_store_is_migrated_to_the_head(postgres_url):
    engine = create_engine(postgres_url)
    with engine.begin() as c:  # start from an empty database
        for table in ("alembic_version", "label_batches", "datasets", "history", "jobs", "workers"):
            c.execute(text(f"DROP TABLE IF EXISTS {table} CASCADE"))
    store = Store(postgres_url)
    assert migrations.current(store.engine) == migrations.head()
    assert _differences(store.engine) == []
