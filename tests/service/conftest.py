"""Real processes for the service tests: ``lwl serve``, ``lwl worker``, redis-server, PostgreSQL.

Servers bind to loopback on free ports under a temporary directory and are stopped at the end.
"""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


def server_fixture(name: str, env: dict[str, str] | None = None):
    """A module-scoped fixture: ``lwl serve`` (:class:`Server`) under a temporary folder named
    ``name``, with ``env`` over the base environment, started before the module's first test and
    stopped after its last. In a test module: ``server = server_fixture("ui", {...})``."""

    @pytest.fixture(scope="module")
    def server(tmp_path_factory):
        srv = Server(tmp_path_factory.mktemp(name), env=env).start()
        yield srv
        srv.stop()

    return server


def client_fixture(api_key: str | None = None, scope: str = "function"):
    """A fixture: a :class:`lwl.client.Client` of the module's ``server`` fixture sending
    ``api_key``. In a test module: ``alice = client_fixture(ALICE)``."""

    @pytest.fixture(scope=scope)
    def client(server):
        from lwl.client import Client

        with Client(server.url, api_key=api_key) as c:
            yield c

    return client


@pytest.fixture
def api(tmp_path):
    """The application in-process (a ``TestClient``, no server, no worker: a slice message goes
    nowhere) on a fresh SQLite store whose jobs the test moves by hand: (client, store)."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.core.settings import Settings
    from service.core.store import Store

    store = Store(f"sqlite:///{tmp_path}/x.db")
    app = create_app(Settings(data_dir=tmp_path), store=store, enqueue=lambda *_: None)
    with TestClient(app) as client:
        yield client, store


class LabHandler(BaseHTTPRequestHandler):
    """A loopback lab's request handler: no access log on the test's output, the request's body
    read whole, and a JSON answer."""

    def log_message(self, *a):
        pass

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, doc) -> None:
        out = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class LoopbackLab:
    """An HTTP endpoint on loopback (a lab, a webhook receiver) served on a thread of its own:
    ``handler`` answers each request; ``url`` is ``http://host:port/label``; :meth:`close` stops it."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1"):
        self.httpd = ThreadingHTTPServer((host, 0), handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]
        self.url = f"http://{host}:{self.port}/label"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def unreachable_lab() -> str:
    """A lab URL on loopback where nothing listens."""
    return f"http://127.0.0.1:{free_port()}/label"


def http_job(url: str, timeout_s: float, attempts: int = 1, iterations: int = 2) -> dict:
    """:func:`small_job` labelled by the lab at ``url`` (the http oracle), without the evaluation."""
    spec = small_job(iterations=iterations)
    spec["oracle"] = {"name": "http", "url": url, "timeout_s": timeout_s, "attempts": attempts}
    spec["evaluation"] = {"enabled": False}
    return spec
