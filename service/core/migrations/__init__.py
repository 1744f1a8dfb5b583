"""The job store's schema migrations (Alembic): :func:`upgrade` brings a store of any earlier
lwl to the schema of :mod:`service.core.store.tables`; each change of a table there comes with a
revision in ``versions/`` (``tests/service/core/test_migrations.py`` fails on a table that differs
from what the revisions build).

A new revision: ``alembic -c service/core/migrations/alembic.ini revision -m "what changed"``,
then write its ``upgrade``/``downgrade`` with ``op`` (see ``versions/0001_baseline.py``)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

HERE = Path(__file__).resolve().parent
ADVISORY_LOCK = 0x6C776C  # "lwl": one migrating process at a time on PostgreSQL
# Alembic's migration context is global to a process: one migration at a time in it
_IN_PROCESS = threading.Lock()

log = logging.getLogger("lwl.migrations")


def config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    return cfg


def head() -> str:
    return ScriptDirectory.from_config(config()).get_current_head()


def current(engine: Engine) -> str | None:
    with engine.connect() as c:
        return MigrationContext.configure(c).get_current_revision()


def upgrade(engine: Engine, legacy_tables=()) -> None:
    """Bring the store behind ``engine`` to the head revision. A store made before migrations
    existed (its tables there, no alembic_version) first gets the nullable columns of
    ``legacy_tables`` (the store module's tables) added since it was made; the revisions then
    keep the tables that exist (as after a first start cut short: SQLite commits each CREATE
    TABLE on its own) and make the rest. Processes that start together (the API and
    its workers) may all call this: PostgreSQL serialises them on an advisory lock; on SQLite a
    process that loses the race sees the revision the winner wrote."""
    for attempt in range(5):
        try:
            with _IN_PROCESS, engine.begin() as c:
                if c.dialect.name == "postgresql":
                    c.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK})
                cfg = config()
                cfg.attributes["connection"] = c
                if MigrationContext.configure(c).get_current_revision() is None:
                    # a store made before migrations (or a first start cut short): its tables
                    # gain the columns added since; the revisions keep the tables that exist
                    present = set(inspect(c).get_table_names())
                    _legacy_columns(c, [t for t in legacy_tables if t.name in present])
                command.upgrade(cfg, "head")
            return
        except Exception:  # another process created the tables first: look again
            if attempt == 4:
                raise
            log.info("store migration raced another process; retrying")
            time.sleep(0.2 * (attempt + 1))


def _legacy_columns(c, tables) -> None:
    """The pre-Alembic upgrade path (lwl before migrations): add the nullable columns of
    ``tables`` that an older store lacks; existing rows keep NULL there."""
    have_tables = inspect(c)
    for table in tables:
        have = {col["name"] for col in have_tables.get_columns(table.name)}
        for col in table.c:
            if col.name not in have and col.nullable:
                c.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {col.name} {col.type.compile(c.dialect)}"))
