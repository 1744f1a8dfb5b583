"""The worker registry: each worker process registers itself with its device, queues and
hardware, beats while it runs (with the job it steps), and is forgotten when it stops or has been
silent for long; ages by the store's clock."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update

from service.core.store.engine import StoreEngine
from service.core.store.records import WorkerRecord
from service.core.store.rows import _json
from service.core.store.tables import workers


class WorkerStore(StoreEngine):
    """The workers table."""

    def register_worker(self, name: str, device: str, queues: list[str], info: dict) -> None:
        now = self._now
        with self.engine.begin() as c:
            c.execute(delete(workers).where(workers.c.name == name))
            c.execute(insert(workers).values(name=name, device=device, queues=_json(queues), info=_json(info),
                                             started_at=now, heartbeat_at=now, current_job=None, slices=0))

    def worker_heartbeat(self, name: str, current_job: str | None, slices: int) -> None:
        with self.engine.begin() as c:
            c.execute(update(workers).where(workers.c.name == name)
                      .values(heartbeat_at=self._now, current_job=current_job, slices=slices))

    def remove_worker(self, name: str) -> None:
        with self.engine.begin() as c:
            c.execute(delete(workers).where(workers.c.name == name))

    def list_workers(self, within: float | None = None) -> list[WorkerRecord]:
        """Workers whose last heartbeat is at most ``within`` seconds old by the store's clock
        (None: every worker), newest first; each with its ``silent_seconds``."""
        q = select(workers, (self._now - workers.c.heartbeat_at).label("silent_seconds"))
        if within is not None:
            q = q.where(workers.c.heartbeat_at > self._now - within)
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(workers.c.heartbeat_at.desc())).mappings()
            return [WorkerRecord.from_row(r) for r in rows]

    def prune_workers(self, silent_for: float) -> None:
        """Forget workers silent for more than ``silent_for`` seconds by the store's clock (dead
        for long; their jobs were reaped)."""
        with self.engine.begin() as c:
            c.execute(delete(workers).where(workers.c.heartbeat_at < self._now - silent_for))
