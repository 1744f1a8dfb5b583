"""Real processes for the service tests: ``lwl serve``, ``lwl worker``, redis-server, PostgreSQL.

Servers bind to loopback on free ports under a temporary directory and are stopped at the end.
"""

from __future__ import annotations

import shutil

import pytest

from service.processes import (ENV_BASE, Proc, Server, free_port, start_postgres, start_redis,  # noqa: F401
                               start_worker, wait_until)
from service.stack import small_job  # noqa: F401  (the tests' job, shared with the benches)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    try:
        url, proc = start_redis(tmp_path_factory.mktemp("redis"))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url
    proc.stop()


@pytest.fixture(scope="session")
def postgres_url():
    try:
        url, proc, d = start_postgres()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url
    proc.stop()
    shutil.rmtree(d, ignore_errors=True)
