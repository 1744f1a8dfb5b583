"""Run ``lwl serve``, ``lwl worker``, redis-server and PostgreSQL as real processes on loopback:
what the service's tests and the benches start (kept here so that a benchmark does not import
the tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

# torch takes the smaller of OMP_NUM_THREADS and MKL_NUM_THREADS: both 2, as the tests' own
# process (tests/conftest.py), so that a job run by a server or worker equals the library's
# run bit for bit (AMINO's reductions differ in the last digits between 1 and 2 threads)
ENV_BASE = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout: float = 60.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what} (last error: {last!r})")


class Proc:
    """A subprocess with its log in a file; stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, args: list[str], env: dict, log: Path):
        self.log_path = log
        self._log = open(log, "ab")
        self.p = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                  start_new_session=True)

    @property
    def pid(self) -> int:
        return self.p.pid

    def stop(self, timeout: float = 20.0) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


class Server:
    """``lwl serve`` (embedded worker unless ``no_worker``) on a free port."""

    def __init__(self, data_dir: Path, env: dict | None = None, no_worker: bool = False, port: int | None = None,
                 workers: int = 1, worker_threads: int | None = None, launcher: str = "lwl.cli"):
        self.data_dir, self.no_worker = data_dir, no_worker
        self.workers, self.worker_threads = workers, worker_threads
        self.launcher = launcher  # the module run with ``-m``: a test's own (tests/service/tell_killer.py)
        self.port = port or free_port()
        self.env = {**os.environ, **ENV_BASE, "LWL_DATA_DIR": str(data_dir), **(env or {})}
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: Proc | None = None

    def start(self) -> "Server":
        args = [sys.executable, "-m", self.launcher, "serve", "--port", str(self.port)]
        if self.no_worker:
            args.append("--no-worker")
        else:
            args += ["--workers", str(self.workers)]
            if self.worker_threads is not None:
                args += ["--threads", str(self.worker_threads)]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = Proc(args, self.env, self.data_dir / f"serve-{self.port}.log")
        try:
            wait_until(lambda: httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200, 60, 0.2, "readyz")
        except TimeoutError:
            raise RuntimeError(f"lwl serve did not come up:\n{self.proc.log()}") from None
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


def start_worker(data_dir: Path, env: dict, name: str) -> Proc:
    full = {**os.environ, **ENV_BASE, "LWL_DATA_DIR": str(data_dir), **env}
    return Proc([sys.executable, "-m", "lwl.cli", "worker", "--device", "cpu"], full, data_dir / f"{name}.log")


def start_redis(directory: Path, port: int | None = None, appendonly: bool = False) -> tuple[str, Proc]:
    """redis-server on a loopback port (a free one unless given: a restart reuses its port),
    without persistence unless ``appendonly``; returns (url, process)."""
    import shutil

    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    port = port or free_port()
    proc = Proc([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "yes" if appendonly else "no", "--dir", str(directory)],
                dict(os.environ), directory / "redis.log")
    import redis

    wait_until(lambda: redis.Redis(port=port).ping(), 20, 0.1, "redis")
    return f"redis://127.0.0.1:{port}/0", proc


def _pg_bin(name: str) -> str:
    import shutil

    for cand in (shutil.which(name), *sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)):
        if cand and Path(cand).exists():
            return str(cand)
    raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql; .ci/run does)")


class Postgres:
    """A throwaway PostgreSQL cluster on loopback (run as the postgres user when we are root),
    with database ``lwl``; it can be stopped the hard way and started again on the same port
    (the outage tests)."""

    def __init__(self):
        import shutil
        import tempfile

        # not under a private tmp dir: the server runs as postgres
        self.dir = Path(tempfile.mkdtemp(prefix="lwl-pg-"))
        self.data, self.sock = self.dir / "data", self.dir / "sock"
        self.sock.mkdir()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            shutil.chown(self.sock, "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]
        subprocess.run([*self.prefix, _pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "lwl",
                        "--no-sync"], check=True, capture_output=True)
        self.port = free_port()
        self.proc: Proc | None = None
        self.start()
        import psycopg

        with psycopg.connect(f"postgresql://lwl@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE lwl")
        self.url = f"postgresql+psycopg://lwl@127.0.0.1:{self.port}/lwl"

    def start(self) -> None:
        import psycopg

        self.proc = Proc([*self.prefix, _pg_bin("postgres"), "-D", str(self.data), "-p", str(self.port),
                          "-k", str(self.sock), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
                         dict(os.environ), self.dir / "pg.log")
        url = f"postgresql://lwl@127.0.0.1:{self.port}/postgres"
        wait_until(lambda: psycopg.connect(url, connect_timeout=2).close() or True, 60, 0.2, "postgres")

    def stop_immediately(self) -> None:
        """``pg_ctl stop -m immediate``: every connection cut, no checkpoint (a crash, as far as
        clients can tell); the next start recovers from the WAL."""
        subprocess.run([*self.prefix, _pg_bin("pg_ctl"), "stop", "-m", "immediate", "-D", str(self.data)],
                       check=True, capture_output=True)
        self.proc.p.wait(30)
        self.proc.stop()

    def stop(self) -> None:
        import shutil

        if self.proc is not None:
            self.proc.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_postgres() -> tuple[str, Proc, Path]:
    """A throwaway PostgreSQL cluster (:class:`Postgres`); returns (SQLAlchemy url of database
    lwl, process, cluster directory)."""
    pg = Postgres()
    return pg.url, pg.proc, pg.dir


class Backends:
    """redis-server and PostgreSQL for a distributed stack on loopback (the benches' and scripts'
    counterpart of the tests' session fixtures); ``env`` points lwl at them."""

    def __init__(self, directory: Path):
        self.redis_url, self._redis = start_redis(directory)
        self.database_url, self._pg, self._pg_dir = start_postgres()
        self.env = {"LWL_BROKER_URL": self.redis_url, "LWL_DATABASE_URL": self.database_url}

    def stop(self) -> None:
        import shutil

        self._pg.stop()
        self._redis.stop()
        shutil.rmtree(self._pg_dir, ignore_errors=True)
