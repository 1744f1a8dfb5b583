"""Real processes for the service tests: ``lwl serve``, ``lwl worker``, redis-server, PostgreSQL.

Servers bind to loopback on free ports under a temporary directory and are stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from service.processes import ENV_BASE, Proc, Server, free_port, start_worker, wait_until  # noqa: F401


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    port = free_port()
    d = tmp_path_factory.mktemp("redis")
    proc = Proc([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(d)], dict(os.environ), d / "redis.log")
    import redis

    wait_until(lambda: redis.Redis(port=port).ping(), 20, 0.1, "redis")
    yield f"redis://127.0.0.1:{port}/0"
    proc.stop()


def _pg_bin(name: str) -> str:
    for cand in (shutil.which(name), *sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)):
        if cand and Path(cand).exists():
            return str(cand)
    pytest.fail(f"PostgreSQL's {name} is not installed (apt-get install postgresql; .ci/run does)")


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory):
    """A throwaway PostgreSQL cluster on loopback (run as the postgres user when we are root)."""
    import tempfile

    initdb, postgres = _pg_bin("initdb"), _pg_bin("postgres")
    # not under pytest's tmp dir: that one is private to root, and the server runs as postgres
    d = Path(tempfile.mkdtemp(prefix="lwl-pg-"))
    data, sock = d / "data", d / "sock"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(d, "postgres")
        shutil.chown(sock, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "lwl", "--no-sync"],
                   check=True, capture_output=True)
    port = free_port()
    proc = Proc([*prefix, postgres, "-D", str(data), "-p", str(port), "-k", str(sock),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"], dict(os.environ), d / "pg.log")
    import psycopg

    url = f"postgresql://lwl@127.0.0.1:{port}/postgres"
    wait_until(lambda: psycopg.connect(url, connect_timeout=2).close() or True, 30, 0.2, "postgres")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE lwl")
    yield f"postgresql+psycopg://lwl@127.0.0.1:{port}/lwl"
    proc.stop()
    shutil.rmtree(d, ignore_errors=True)


def small_job(iterations: int = 30, seed: int = 0) -> dict:
    """A bilevel job that runs in about a second."""
    return {
        "oracle": {"name": "friedman1"},
        "test_distributions": {
            "members": [
                {"gaussian": {"mean": [0, 0, 0, 0, 0], "cov": (2 * __import__("numpy").eye(5)).tolist()}, "size": 300},
                {"gaussian": {"mean": [1, 0, 1, 0, 1], "cov": __import__("numpy").eye(5).tolist()}, "size": 300},
            ],
            "validation_per_member": 100,
        },
        "family": {"name": "gaussian", "mean": [0.5] * 5},
        "model": {"name": "krr", "lengthscale": 3.0},
        "algorithm": {"name": "bilevel", "iterations": iterations, "samples_per_iteration": 60},
        "evaluation": {"train_size": 100, "baselines": ["normal", "mixture"]},
        "seed": seed,
        "device": "cpu",
    }
