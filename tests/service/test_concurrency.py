"""Issue 84, "honest under concurrency": no route calls the store on the event loop (a slow
transaction would hold up every other request of the process), and a contended or unreachable
store is a 503 with Retry-After, not a 500."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient

from lwl.measures.gaussian import Gaussian
from service.app import create_app
from service.core.settings import Settings
from service.core.store import Store
from tests.service.conftest import small_job

HOST = {"host": "127.0.0.1:80"}
JSON = {**HOST, "content-type": "application/json"}


class LoopWatchingStore:
    """A Store whose every method call records its name when it runs on a thread with a running
    asyncio event loop (the server's), i.e. not in the thread pool."""

    def __init__(self, store: Store):
        self._store = store
        self.on_loop: list[str] = []
        self.lock = threading.Lock()

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass  # a worker thread: fine
            else:
                with self.lock:
                    self.on_loop.append(name)
            return attr(*args, **kwargs)

        return call


def test_no_route_calls_the_store_on_the_event_loop(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/x.db")
    watched = LoopWatchingStore(store)
    app = create_app(Settings(data_dir=tmp_path), store=watched, enqueue=lambda *_: None)
    with TestClient(app) as client:
        r = client.post("/v1/jobs", content=json.dumps(small_job(iterations=2)), headers=JSON)
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        assert store.acquire(job, 0, "lease", "w1") is not None
        store.succeed(job, "lease", {"distribution": Gaussian(np.zeros(5), cov=np.eye(5)).to_spec()})
        spec = small_job(iterations=2)
        spec["oracle"] = {"name": "external"}
        r = client.post("/v1/jobs", content=json.dumps(spec), headers=JSON)
        assert r.status_code == 202, r.text
        asktell = r.json()["id"]
        bodies = {"/v1/jobs/{job_id}/samples": {"n": 3}, "/v1/jobs/{job_id}/predict": {"inputs": [[0.0] * 5]},
                  "/v1/jobs/{job_id}/labels": {"batch_id": "1.0", "labels": [1.0]}}
        seen = []
        routes = [(path, method.upper()) for path, ops in app.openapi()["paths"].items() for method in ops]
        routes += [(p, "GET") for p in ("/ui", "/ui/", "/ui/static/{name}", "/metrics")]  # outside the schema
        for route, method in routes:
            for job_id in (job, asktell):
                path = route.replace("{job_id}", job_id).replace("{dataset_id}", "0" * 32).replace("{name}", "app.js")
                if route == "/v1/datasets":
                    r = client.request(method, path, content=b"not npy",
                                       headers={**HOST, "content-type": "application/x-npy"})
                elif route == "/v1/jobs" and method == "POST":
                    r = client.request(method, path, content=json.dumps(small_job(iterations=2)), headers=JSON)
                else:
                    r = client.request(method, path, headers=JSON if method == "POST" else HOST,
                                       content=json.dumps(bodies.get(route, {})) if method == "POST" else None)
                seen.append((method, route, r.status_code))
                assert r.status_code < 500, (method, path, r.text)
        assert len({p for _, p, _ in seen}) >= 20, seen
    assert watched.on_loop == [], f"store calls on the event loop: {sorted(set(watched.on_loop))}"

