"""A worker's presence heartbeat through a store outage (worker.presence): one warning line when
the outage starts and one when it ends, not a traceback on every beat. A real PostgreSQL that is
stopped and started again."""

from __future__ import annotations

import logging
import time

import pytest

from service.core.store import Store
from service.processes import Postgres, wait_until
from worker.presence import start_presence


@pytest.mark.distributed
def test_a_store_outage_logs_one_line_when_it_starts_and_one_when_it_ends(caplog):
    pg = Postgres()
    stop = None
    try:
        store = Store(pg.url)
        caplog.set_level(logging.WARNING, logger="lwl.presence")
        interval = 0.1
        stop = start_presence(store, "w", "cpu", ["lwl.cpu"], {}, interval)
        wait_until(lambda: store.list_workers(within=60)[0].silent_seconds < 1, 30, 0.1, "a first beat")
        pg.stop_immediately()
        time.sleep(40 * interval)  # dozens of beats fail (each after a refused connection)
        pg.start()
        wait_until(lambda: any("written again" in r.getMessage() for r in caplog.records), 60, 0.1,
                   "the beat back after the outage")
        time.sleep(10 * interval)  # more beats, now written
        lines = [r for r in caplog.records if r.name == "lwl.presence"]
        assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]
        assert "not written" in lines[0].getMessage() and "written again" in lines[1].getMessage()
        assert all(r.exc_info is None for r in lines)  # no traceback
        assert store.list_workers(within=5)[0].name == "w"
    finally:
        if stop is not None:
            stop.set()
        pg.stop()
