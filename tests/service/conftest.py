"""Real processes for the service tests: ``lwl serve``, ``lwl worker``, redis-server, PostgreSQL.

Servers bind to loopback on free ports under a temporary directory and are stopped at the end.
"""

from __future__ import annotations

import shutil

import pytest

from service.processes import (ENV_BASE, Proc, Server, free_port, start_postgres, start_redis,  # noqa: F401
                               start_worker, wait_until)


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
