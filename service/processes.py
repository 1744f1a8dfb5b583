"""Run ``lwl serve`` and ``lwl worker`` as real processes on loopback: what the service's
tests and ``bench/api.py`` start (kept here so that a benchmark does not import the tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ENV_BASE = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"}


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

    def __init__(self, data_dir: Path, env: dict | None = None, no_worker: bool = False, port: int | None = None):
        self.data_dir, self.no_worker = data_dir, no_worker
        self.port = port or free_port()
        self.env = {**os.environ, **ENV_BASE, "LWL_DATA_DIR": str(data_dir), **(env or {})}
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: Proc | None = None

    def start(self) -> "Server":
        args = [sys.executable, "-m", "lwl.cli", "serve", "--port", str(self.port)]
        if self.no_worker:
            args.append("--no-worker")
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
