"""Jobs as the API sees them: create (idempotently), read, list, page, cancel, delete; a job's
spec, result and iteration history; the counts the metrics show."""

from __future__ import annotations

import json

from sqlalchemy import delete, func, insert, select, update

from service.core.store.engine import StoreEngine
from service.core.store.records import FullJobRecord, IdempotencyConflict, JobRecord, JobStatus, job_kind
from service.core.store.rows import _json, _new_id, _unjson
from service.core.store.tables import history, jobs, label_batches


class JobStore(StoreEngine):
    """The jobs table (and its history) from the API's side."""

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

    def result(self, job_id: str) -> dict | None:
        with self.engine.connect() as c:
            return _unjson(c.execute(select(jobs.c.result).where(jobs.c.id == job_id)).scalar())
