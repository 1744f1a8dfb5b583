"""The embedded broker: kombu's SQLAlchemy transport, with queues created safely by several processes.

Kombu creates its tables, and a queue's row on first use, by a check and then a create, under a
lock that holds within one process only (``kombu.transport.sqlalchemy``). The API and the workers
are separate processes sharing one SQLite file. When two create a queue at once, one insert meets
the other's row and raises ``IntegrityError``, which kombu does not catch: the send failed (a 503
on ``POST /v1/jobs``) and the channel's session was left needing a rollback, so every later send
on it failed too. When two create the tables at once, one ``CREATE TABLE`` fails ("already
exists"). Here the loser of either race rolls back and uses what the winner made.
"""

from __future__ import annotations

from kombu.transport import sqlalchemy as kombu_sql
from sqlalchemy.exc import IntegrityError, OperationalError

TRANSPORT = f"{__name__}:Transport"
URL_PREFIXES = ("sqla+", "sqlalchemy+")


class Channel(kombu_sql.Channel):
    def _open(self):
        # Each loss means another process made one of kombu's tables between create_all's check and
        # its CREATE; nothing was cached, so the next try makes a new engine whose check sees it.
        for _ in range(len(kombu_sql.metadata.tables)):
            try:
                return super()._open()
            except OperationalError:
                pass
        return super()._open()

    def _get_or_create(self, queue):
        # kombu's own returns an unsaved row when its commit fails (a locked database), which the
        # next message's commit inserts again; here a failed commit is rolled back and the row read
        # (another process made it), or the send fails with the session clean
        found = self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).first()
        if found is not None:
            return found
        obj = self.queue_cls(queue)
        self.session.add(obj)
        try:
            self.session.commit()
        except (IntegrityError, OperationalError):
            self.session.rollback()
            return self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).one()
        return obj


class Transport(kombu_sql.Transport):
    Channel = Channel


def split_url(url: str) -> tuple[str, str | None]:
    """``(url, transport)`` for Celery: a kombu SQLAlchemy URL (``sqla+sqlite:///...``) becomes the
    bare database URL and this module's transport; any other URL is returned as it is."""
    for prefix in URL_PREFIXES:
        if url.startswith(prefix):
            return url.removeprefix(prefix), TRANSPORT
    return url, None
