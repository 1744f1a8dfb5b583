"""Issue 84, "honest under concurrency": no route calls the store on the event loop (a slow
transaction would hold up every other request of the process), and a contended or unreachable
store is a 503 with Retry-After, not a 500."""

from __future__ import annotations

import asyncio
import json
import threading
import time

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


# --- 503 where 503 is meant ---------------------------------------------------------------------

PROBLEM = "application/problem+json"


def asktell_job(client, store, points: int = 8, batch_size: int | None = None) -> tuple[str, list[str]]:
    """An ask/tell job with one open round of ``points`` inputs (opened as a worker would)."""
    spec = small_job(iterations=2)
    spec["oracle"] = {"name": "external"}
    r = client.post("/v1/jobs", content=json.dumps(spec), headers=JSON)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    assert store.acquire(job, 0, "lease", "w1") is not None
    ids = store.open_round(job, "lease", "k1", np.random.default_rng(0).normal(size=(points, 5)), batch_size)
    return job, ids


def _503(r) -> dict:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == PROBLEM and int(r.headers["retry-after"]) >= 1
    return r.json()


def test_a_tell_that_concurrent_tells_keep_beating_is_a_503_with_retry_after(api, monkeypatch):
    client, store = api
    job, (batch,) = asktell_job(client, store)
    monkeypatch.setattr(store, "_tell_once", lambda *a: None)  # another tell won the batch every time
    doc = _503(client.post(f"/v1/jobs/{job}/labels", json={"batch_id": batch, "labels": [1.0] * 8}, headers=HOST))
    assert doc["title"] == "Batch busy" and doc["field"] == "batch_id" and doc["batch_id"] == batch
    monkeypatch.undo()
    r = client.post(f"/v1/jobs/{job}/labels", json={"batch_id": batch, "labels": [1.0] * 8}, headers=HOST)
    assert r.status_code == 200 and r.json()["outcome"] == "accepted"  # nothing of the 503's tell was stored


def test_an_unreachable_store_is_a_503_with_retry_after(api, monkeypatch):
    from sqlalchemy.exc import OperationalError

    from service.core.outage import StoreUnavailable

    client, store = api
    job, _ = asktell_job(client, store)
    for exc in (StoreUnavailable("store unreachable for 30 s"), OperationalError("SELECT", {}, Exception("down"))):
        def down(*a, exc=exc, **k):
            raise exc
        monkeypatch.setattr(store, "get_job", down)
        for r in (client.get(f"/v1/jobs/{job}", headers=HOST), client.get(f"/v1/jobs/{job}/queries", headers=HOST),
                  client.post(f"/v1/jobs/{job}/labels", json={"batch_id": "1.0", "labels": [1.0] * 8}, headers=HOST)):
            assert _503(r)["title"] == "Store unavailable"


def test_openapi_lists_503_with_retry_after_on_every_operation_that_touches_the_store(api):
    client, _ = api
    schema = client.get("/openapi.json", headers=HOST).json()
    storeless = {("get", "/healthz"), ("get", "/v1/catalog")}
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            if (method, path) in storeless:
                continue
            assert "503" in op["responses"], (method, path)
            assert "Retry-After" in op["responses"]["503"]["headers"], (method, path)


# --- fault injection only from tests ------------------------------------------------------------

def test_no_api_code_reads_a_test_variable():
    """The API's fault injection comes from tests (create_app's after_tell_commit), never from an
    environment variable that could leak into a production process."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = [f"{p.relative_to(root)}" for d in ("service", "lwl") for p in (root / d).rglob("*.py")
             if "LWL_TEST_" in p.read_text()]
    assert found == []


def test_the_after_tell_commit_hook_runs_once_between_the_round_completing_commit_and_its_message(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/x.db")
    events = []
    app = create_app(Settings(data_dir=tmp_path), store=store, enqueue=lambda job, gen: events.append(("sent", gen)),
                     after_tell_commit=lambda: events.append(("hook", store.get_job(job).status)))
    with TestClient(app) as client:
        job, (batch,) = asktell_job(client, store, points=4)
        events.clear()  # the job's first message
        r = client.post(f"/v1/jobs/{job}/labels", json={"batch_id": batch, "labels": [1.0, 2.0], "indices": [0, 1]},
                        headers=HOST)
        assert r.status_code == 200 and events == []  # a partial tell completes no round
        r = client.post(f"/v1/jobs/{job}/labels", json={"batch_id": batch, "labels": [3.0, 4.0], "indices": [2, 3]},
                        headers=HOST)
        assert r.status_code == 200 and events == [("hook", "queued"), ("sent", 1)]


# --- several instruments share a round ----------------------------------------------------------

def test_batches_lists_the_pending_batches_and_queries_hands_out_the_one_named(api):
    client, store = api
    job, ids = asktell_job(client, store, points=8, batch_size=2)
    assert ids == ["1.0", "1.1", "1.2", "1.3"]
    r = client.post(f"/v1/jobs/{job}/labels", json={"batch_id": "1.1", "labels": [1.0, 2.0]}, headers=HOST)
    assert r.status_code == 200
    r = client.post(f"/v1/jobs/{job}/labels", json={"batch_id": "1.2", "labels": [None], "indices": [1],
                                                    "failed": [1]}, headers=HOST)
    assert r.status_code == 200
    doc = client.get(f"/v1/jobs/{job}/batches", headers=HOST).json()
    assert doc["status"] == "awaiting_labels" and doc["round"] == 1 and doc["job_id"] == job
    assert doc["batches"] == [
        {"batch_id": "1.0", "position": 0, "n": 2, "pending_points": 2, "failed_points": 0},
        {"batch_id": "1.2", "position": 2, "n": 2, "pending_points": 1, "failed_points": 1},
        {"batch_id": "1.3", "position": 3, "n": 2, "pending_points": 2, "failed_points": 0}]
    q = client.get(f"/v1/jobs/{job}/queries", params={"batch_id": "1.3"}, headers=HOST)
    assert q.status_code == 200 and q.json()["batch_id"] == "1.3" and q.json()["pending_batches"] == 3
    x = store.step_batches(job, 1)[3]
    np.testing.assert_array_equal(np.asarray(q.json()["inputs"]), np.load(__import__("io").BytesIO(x.inputs)))
    npy = client.get(f"/v1/jobs/{job}/queries", params={"batch_id": "1.2"},
                     headers={**HOST, "accept": "application/x-npy"})
    assert npy.headers["LWL-Batch-Id"] == "1.2" and npy.headers["LWL-Pending-Points"] == "1"
    assert client.get(f"/v1/jobs/{job}/queries", headers=HOST).json()["batch_id"] == "1.0"  # default: the first
    labelled = client.get(f"/v1/jobs/{job}/queries", params={"batch_id": "1.1"}, headers=HOST)
    assert labelled.status_code == 409 and labelled.json()["field"] == "batch_id"
    unknown = client.get(f"/v1/jobs/{job}/queries", params={"batch_id": "7.0"}, headers=HOST)
    assert unknown.status_code == 404 and unknown.json()["field"] == "batch_id"
    other = client.post("/v1/jobs", content=json.dumps(small_job(iterations=2)), headers=JSON).json()["id"]
    assert client.get(f"/v1/jobs/{other}/batches", headers=HOST).status_code == 409  # not an ask/tell job
    for batch in ("1.0", "1.2", "1.3"):  # the round told: the job is queued, nothing pending
        outcomes = {"1.0": [0, 1], "1.2": [0], "1.3": [0, 1]}[batch]
        r = client.post(f"/v1/jobs/{job}/labels", json={"batch_id": batch, "labels": [1.0] * len(outcomes),
                                                        "indices": outcomes}, headers=HOST)
        assert r.status_code == 200, r.text
    doc = client.get(f"/v1/jobs/{job}/batches", headers=HOST).json()
    assert doc["status"] == "queued" and doc["batches"] == []


@pytest.mark.server
def test_four_instruments_label_a_job_to_the_end_each_with_its_own_batch(tmp_path):
    """A job whose rounds are four batches (batch_size a quarter of a round; the rounds that
    label Q's members are larger): four clients, one per instrument, each asks for its own
    batches by id (position modulo 4) and tells them concurrently with the others. The job ends
    with the builtin oracle's distribution."""
    import collections

    import httpx

    from lwl.client import Client
    from service.processes import Server
    from tests.service.test_external import FRIEDMAN, builtin_distribution

    spec = small_job(iterations=3)
    spec["test_distributions"]["validation_per_member"] = 30  # round 1: 2 x 30 validation points
    spec["algorithm"]["samples_per_iteration"] = 60  # later rounds: 60 points
    spec["oracle"] = {"name": "external", "batch_size": 15}  # a quarter of those rounds
    spec.pop("evaluation")
    srv = Server(tmp_path / "data").start()
    try:
        with Client(srv.url) as c:
            job = c.submit(spec)
            told: list[list[str]] = [[] for _ in range(4)]
            errors: list[BaseException] = []

            def instrument(k: int):
                try:
                    with Client(srv.url) as mine:
                        deadline = time.monotonic() + 300
                        while time.monotonic() < deadline:
                            batches = [b for b in mine.batches(job) if b.position % 4 == k]
                            for b in batches:
                                asked = mine.ask(job, b.batch_id)
                                if asked is None:
                                    continue
                                answer = mine.tell(job, asked[0], FRIEDMAN.label(asked[1]))
                                assert answer["outcome"] in ("accepted", "duplicate"), answer
                                told[k].append(asked[0])
                            if not batches:
                                if mine.job(job)["status"] in ("succeeded", "failed", "cancelled"):
                                    return
                                time.sleep(0.05)
                        raise TimeoutError(f"instrument {k}: the job did not end")
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=instrument, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            doc = c.job(job)
            assert doc["status"] == "succeeded", doc
            every = [b for mine in told for b in mine]
            assert len(every) == len(set(every))  # each batch told once, by one instrument
            rounds = collections.Counter(b.split(".")[0] for b in every)  # batches per round
            quarters = [r for r, n in rounds.items() if n == 4]  # the design's rounds: 60 points, 4 batches
            assert len(quarters) >= 3, rounds
            for k in range(4):  # every instrument told its own batches only, and one of every round
                assert all(int(b.split(".")[1]) % 4 == k for b in told[k]), (k, told[k])
                assert {b.split(".")[0] for b in told[k]} == set(rounds), (k, told[k])
            assert c.result(job)["distribution"] == builtin_distribution(spec)
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
    finally:
        srv.stop()
