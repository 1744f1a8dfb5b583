"""The job store (service.core.store): job kinds for lists, history after an iteration, and an
older store gaining the columns added since without losing a row."""

from __future__ import annotations

import sqlite3

from service.core.store import Store, job_kind
from tests.service.conftest import small_job


def test_jobs_carry_their_kind_and_history_reads_after_an_iteration(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'jobs.db'}")
    job, _ = store.create_job("alice", small_job(), 30)
    assert store.get_job(job.id).kind == {"algorithm": "bilevel", "family": "gaussian", "oracle": "friedman1"}
    assert store.list_jobs("alice", None, 10, None)[0].kind["oracle"] == "friedman1"
    assert store.spec(job.id) == small_job()
    assert store.acquire(job.id, 0, "lease-1", "w") is not None
    lease = "lease-1"
    for it in range(5):
        assert store.save_step(job.id, lease, b"", {"iteration": it + 1, "total": 30}, {"iteration": it, "objective": it})
    assert [r["iteration"] for r in store.history(job.id)] == [0, 1, 2, 3, 4]
    assert [r["iteration"] for r in store.history(job.id, after=2)] == [3, 4]
    assert store.history(job.id, after=4) == []
    assert [r["iteration"] for r in store.history(job.id, after=-1)] == [0, 1, 2, 3, 4]


def test_kind_of_specs_without_a_family_or_with_odd_blocks():
    assert job_kind({"oracle": {"name": "darcy"}, "algorithm": {"name": "ama"}}) == \
        {"algorithm": "ama", "family": None, "oracle": "darcy"}
    assert job_kind({"oracle": "x"}) == {"algorithm": None, "family": None, "oracle": None}


def test_an_older_store_gains_the_kind_column_and_keeps_its_jobs(tmp_path):
    path = tmp_path / "old.db"
    store = Store(f"sqlite:///{path}")
    job, _ = store.create_job("alice", small_job(), 30)
    store.engine.dispose()
    with sqlite3.connect(path) as db:  # the store as lwl wrote it before job kinds (and migrations) existed
        db.execute("ALTER TABLE jobs DROP COLUMN kind")
        db.execute("DROP TABLE alembic_version")
        assert "kind" not in {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
    store = Store(f"sqlite:///{path}")
    old = store.get_job(job.id)
    assert old.kind is None and old.status == "queued" and store.spec(job.id) == small_job()
    new, _ = store.create_job("alice", small_job(seed=1), 30)
    assert store.get_job(new.id).kind["algorithm"] == "bilevel"


def test_non_finite_numbers_in_records_are_stored_as_null(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'jobs.db'}")
    job, _ = store.create_job("alice", small_job(), 30)
    store.acquire(job.id, 0, "lease-1", "w")
    # a step whose sample was degenerate records objective NaN; strict JSON has no NaN
    assert store.save_step(job.id, "lease-1", b"", {"iteration": 1, "total": 30, "objective": float("nan")},
                           {"iteration": 0, "objective": float("nan"), "grad_norm": float("inf"), "x": [1.0]})
    assert store.history(job.id) == [{"iteration": 0, "objective": None, "grad_norm": None, "x": [1.0]}]
    assert store.get_job(job.id).progress["objective"] is None


def _asktell_round(store: Store, n: int = 8) -> tuple[str, list[str]]:
    """A job paused in its first ask/tell round of one batch of ``n`` points."""
    import numpy as np

    job, _ = store.create_job("alice", small_job(), 30)
    store.acquire(job.id, 0, "lease-1", "w")
    ids = store.open_round(job.id, "lease-1", "key", np.arange(2.0 * n).reshape(n, 2), None)
    return job.id, ids


def test_an_older_store_gains_the_outcome_columns_and_reads_told_batches_as_labelled(tmp_path):
    import numpy as np

    from service.core.store import PointOutcome, Told

    path = tmp_path / "old.db"
    store = Store(f"sqlite:///{path}")
    job, (batch,) = _asktell_round(store)
    store.tell(job, batch, Told(np.arange(8), np.arange(8.0), np.zeros(8, dtype=bool)))
    store.engine.dispose()
    with sqlite3.connect(path) as db:  # label_batches as lwl wrote it before per-point outcomes (and migrations)
        db.execute("ALTER TABLE label_batches DROP COLUMN outcomes")
        db.execute("ALTER TABLE label_batches DROP COLUMN partial")
        db.execute("DROP TABLE alembic_version")
    again = Store(f"sqlite:///{path}")
    outcomes, labels = again.batch(job, batch).point_state()
    assert (outcomes == PointOutcome.LABELLED).all() and labels.tolist() == list(range(8))


def test_concurrent_partial_tells_of_one_batch_keep_every_point(tmp_path):
    import threading

    import numpy as np

    from service.core.store import PointOutcome, Told

    store = Store(f"sqlite:///{tmp_path / 'jobs.db'}")
    job, (batch,) = _asktell_round(store, n=40)
    answers = []

    def tell(i):  # forty tells of one point each, at once
        answers.append(store.tell(job, batch, Told(np.array([i]), np.array([float(i)]), np.array([i % 10 == 3]))))

    threads = [threading.Thread(target=tell, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a[0] for a in answers) == ["accepted"] * 40
    assert sum(a[1] is not None for a in answers) == 1  # the last point requeues the job, once
    outcomes, labels = store.batch(job, batch).point_state()
    failed = np.arange(40) % 10 == 3
    assert (outcomes[failed] == PointOutcome.FAILED).all() and (outcomes[~failed] == PointOutcome.LABELLED).all()
    assert np.isnan(labels[failed]).all() and labels[~failed].tolist() == np.arange(40)[~failed].tolist()
    assert store.get_job(job).status == "queued"
