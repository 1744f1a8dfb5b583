"""A distributed stack on loopback, for the checks that break it: its own redis-server
(restarted on the same port, with or without AOF), a throwaway PostgreSQL, ``lwl serve
--no-worker`` and ``lwl worker --device cpu`` processes, and a poller that reads the watched
jobs' views and counts the answers by HTTP status.

What tests/service/test_outages.py, bench/faults.py and bench/chaos.py start (kept beside
service/processes.py so that a bench does not import the tests), with the small bilevel job
they run.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

import httpx
import numpy as np

from service.processes import Postgres, Proc, Server, start_redis, start_worker, wait_until

#: a job's statuses that no slice will change
TERMINAL = ("succeeded", "failed", "cancelled")
#: the key of :meth:`LoopbackStack.server_errors` for a 503 that does not say when to come back
BAD_503 = "503 without Retry-After or problem+json"


def small_job(iterations: int = 30, seed: int = 0, samples: int = 60) -> dict:
    """A bilevel job that runs in about a second (at 30 iterations): KRR on Friedman-1, Q two
    Gaussians, a Gaussian family."""
    eye = np.eye(5)
    return {
        "oracle": {"name": "friedman1"},
        "test_distributions": {
            "members": [
                {"gaussian": {"mean": [0, 0, 0, 0, 0], "cov": (2 * eye).tolist()}, "size": 300},
                {"gaussian": {"mean": [1, 0, 1, 0, 1], "cov": eye.tolist()}, "size": 300},
            ],
            "validation_per_member": 100,
        },
        "family": {"name": "gaussian", "mean": [0.5] * 5},
        "model": {"name": "krr", "lengthscale": 3.0},
        "algorithm": {"name": "bilevel", "iterations": iterations, "samples_per_iteration": samples},
        "evaluation": {"train_size": 100, "baselines": ["normal", "mixture"]},
        "seed": seed,
        "device": "cpu",
    }


class LoopbackStack:
    """Redis and PostgreSQL of one check, the API and ``workers`` workers under ``directory``
    (worker ``i`` with ``worker_env[i]`` on top of the stack's environment), and, unless
    ``poll_s`` is None, a poller that reads every watched job's view every ``poll_s`` seconds:
    each answer is counted by status in ``statuses`` and each 200's view kept in ``views``
    (monotonic time, view)."""

    def __init__(self, directory: Path, workers: int = 1, env: Mapping[str, str] | None = None,
                 appendonly: bool = False, worker_env: Mapping[int, Mapping[str, str]] | None = None,
                 poll_s: float | None = 0.2):
        self.dir = directory
        self.redis_dir = directory / "redis"
        self.redis_dir.mkdir(parents=True)
        self.appendonly = appendonly
        self.redis_url, self.redis = start_redis(self.redis_dir, appendonly=appendonly)
        self.redis_port = int(self.redis_url.rsplit(":", 1)[1].split("/")[0])
        self.pg = Postgres()
        self.env = {"LWL_BROKER_URL": self.redis_url, "LWL_DATABASE_URL": self.pg.url, **(env or {})}
        self.api = Server(directory, env=self.env, no_worker=True).start()
        self.workers = [start_worker(directory, {**self.env, **(worker_env or {}).get(i, {})}, f"worker{i}")
                        for i in range(workers)]
        self.statuses: dict[int, int] = {}
        self.bad_503 = 0  # 503s also counted in statuses, whose answer lacks Retry-After or problem+json
        self.views: dict[str, list[tuple[float, dict]]] = {}
        self.watched: list[str] = []
        self._stop = threading.Event()
        if poll_s is not None:
            threading.Thread(target=self._poll, args=(poll_s,), daemon=True).start()

    @property
    def url(self) -> str:
        return self.api.url

    @cached_property
    def store(self):
        """The job store, read directly (the checks' view behind the API)."""
        from service.core.store import Store

        return Store(self.pg.url)

    # -- the answers ---------------------------------------------------------------------------
    def count(self, r: httpx.Response) -> None:
        self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
        if r.status_code == 503 and not (r.headers.get("retry-after")
                                         and r.headers.get("content-type") == "application/problem+json"):
            self.bad_503 += 1

    def _poll(self, interval: float) -> None:
        with httpx.Client(timeout=10) as http:
            while not self._stop.wait(interval):
                for job_id in list(self.watched):
                    try:
                        r = http.get(f"{self.url}/v1/jobs/{job_id}")
                    except httpx.TransportError:  # the API is down (killed on purpose)
                        continue
                    self.count(r)
                    if r.status_code == 200:
                        self.views.setdefault(job_id, []).append((time.monotonic(), r.json()))

    def server_errors(self) -> dict[int | str, int]:
        """Answers 5xx other than 503, and 503s that do not say when to come back (a 503 with
        Retry-After says: come back; a 500 is a bug)."""
        out: dict[int | str, int] = {s: n for s, n in self.statuses.items() if s >= 500 and s != 503}
        return {**out, BAD_503: self.bad_503} if self.bad_503 else out

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, spec: dict) -> str:
        """POST the job (its answer counted) and watch it."""
        r = httpx.post(f"{self.url}/v1/jobs", json=spec, timeout=30)
        self.count(r)
        r.raise_for_status()
        self.watched.append(r.json()["id"])
        return r.json()["id"]

    def job(self, job_id: str) -> dict:
        """The job's view, waited for while the API does not answer."""
        return wait_until(lambda: httpx.get(f"{self.url}/v1/jobs/{job_id}", timeout=10).json(), 60, 0.25, "job view")

    def wait_all(self, ids: list[str] | None = None, timeout: float = 900, interval: float = 0.5) -> list[dict]:
        """Wait until every job of ``ids`` (the watched ones by default) has ended; their views."""
        ids = self.watched if ids is None else ids
        wait_until(lambda: all(self.job(j)["status"] in TERMINAL for j in ids), timeout, interval, "jobs to end")
        return [self.job(j) for j in ids]

    # -- the processes -------------------------------------------------------------------------
    def replace_worker(self, index: int, name: str) -> Proc:
        """A fresh worker in place of worker ``index`` (an orchestrator's restart)."""
        self.workers[index] = start_worker(self.dir, self.env, name)
        return self.workers[index]

    def kill_redis(self, sig: int = signal.SIGKILL) -> None:
        os.killpg(self.redis.pid, sig)
        self.redis.p.wait(30)
        self.redis.stop()

    def restart_redis(self, appendonly: bool | None = None) -> None:
        """redis-server again on its port (AOF as at the start unless ``appendonly`` says)."""
        _, self.redis = start_redis(self.redis_dir, port=self.redis_port,
                                    appendonly=self.appendonly if appendonly is None else appendonly)

    def waiting(self, queue: str = "lwl.cpu") -> int:
        """Messages waiting in the broker's ``queue``."""
        import redis

        return redis.Redis(port=self.redis_port).llen(queue)

    def stop(self) -> None:
        self._stop.set()
        for w in self.workers:
            w.stop()
        self.api.stop()
        self.redis.stop()
        if "store" in self.__dict__:
            self.store.engine.dispose()
        self.pg.stop()
