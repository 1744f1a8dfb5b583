"""Jobs as the workers see them: a slice takes a job under a *lease* (the id of the slice) if
the message's generation is current, and every write it makes afterwards (checkpoint, heartbeat,
result, pause for labels) is conditional on still holding that lease: a slice presumed dead and
re-run elsewhere can never overwrite its successor. The reaper's and dispatcher's queries
(stale leases, stranded rounds, slice messages that may be lost) are here too."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select, update

from service.core.store.job_store import JobStore
from service.core.store.records import FullJobRecord, JobStatus, Undispatched
from service.core.store.rows import _finite_json, _json
from service.core.store.tables import history, jobs, label_batches


class LeaseStore(JobStore):
    """The jobs table from the workers' side: leases, fencing, requeues and dispatch."""

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

    def pause_for_labels(self, job_id: str, lease: str) -> bool:
        """The round's batches exist already (a resumed slice): pause again."""
        return self._finish(job_id, lease, status=JobStatus.AWAITING_LABELS, attempts=0)

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
