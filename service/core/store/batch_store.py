"""The batches of ask/tell rounds and the tells that label them: a worker opens a round (its
inputs split into batches, the job paused awaiting labels), a lab tells labels or failures of
some or all points of a batch, and the tell that completes the round requeues the job."""

from __future__ import annotations

import numpy as np
from sqlalchemy import func, insert, select, update

from service.core.outage import TellContended
from service.core.store.engine import StoreEngine
from service.core.store.records import BatchRecord, JobStatus, PointOutcome, Told
from service.core.store.rows import _npy
from service.core.store.tables import jobs, label_batches


class BatchStore(StoreEngine):
    """The label_batches table: rounds, batches and tells."""

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
