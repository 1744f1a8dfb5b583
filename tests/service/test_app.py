"""The application in-process (no server): no deprecation warning on start, and the API's edges
(cancel, results of ended jobs, the samples seed default, malformed JSON on every JSON route)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from fastapi.exceptions import FastAPIDeprecationWarning
from fastapi.testclient import (
    TestClient,  # imported outside the recording: it warns about httpx itself
)

from lwl.measures import from_spec
from lwl.measures.gaussian import Gaussian
from service.app import create_app
from service.core.settings import Settings
from service.core.store import Store
from tests.service.conftest import small_job

HOST = {"host": "127.0.0.1:80"}  # loopback mode: the guard wants the server's own address


def test_starting_the_app_and_polling_a_job_emit_no_deprecation_warning(tmp_path):
    """FastAPI 0.165 deprecated ORJSONResponse and warned on the first GET /v1/jobs/{id}."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        app = create_app(Settings(data_dir=tmp_path), store=Store(f"sqlite:///{tmp_path}/x.db"),
                         enqueue=lambda *_: None)
        app.openapi()
        with TestClient(app) as client:
            created = client.post("/v1/jobs", content=json.dumps(small_job(iterations=2)),
                                  headers={**HOST, "content-type": "application/json"})
            assert created.status_code == 202, created.text
            job = client.get(f"/v1/jobs/{created.json()['id']}", headers=HOST)
            assert job.status_code == 200 and job.headers["content-type"] == "application/json"
            assert job.json()["status"] == "queued"
    deprecations = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in seen
                    if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning, FastAPIDeprecationWarning))]
    assert deprecations == []


# --- API edges, against an in-process app and a store whose jobs the test moves by hand -------

PROBLEM = "application/problem+json"
JSON = {**HOST, "content-type": "application/json"}


def _submit(client) -> str:
    r = client.post("/v1/jobs", content=json.dumps(small_job(iterations=2)), headers=JSON)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _run(store, job_id) -> str:
    lease = "lease-" + job_id
    assert store.acquire(job_id, 0, lease, "w1") is not None
    return lease


def _problem(r, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    doc = r.json()
    assert doc["status"] == status
    return doc


def test_cancelling_a_running_job_says_the_cancel_was_requested(api):
    client, store = api
    job = _submit(client)
    assert client.get(f"/v1/jobs/{job}", headers=HOST).json()["cancel_requested"] is False
    _run(store, job)
    r = client.post(f"/v1/jobs/{job}/cancel", headers=HOST)
    assert r.status_code == 202
    assert r.json()["status"] == "running" and r.json()["cancel_requested"] is True
    assert client.get(f"/v1/jobs/{job}", headers=HOST).json()["cancel_requested"] is True
    assert client.post(f"/v1/jobs/{job}/cancel", headers=HOST).status_code == 202  # asking twice is harmless


def test_cancelling_a_queued_job_cancels_it_and_an_ended_job_is_a_conflict(api):
    client, store = api
    queued = _submit(client)
    r = client.post(f"/v1/jobs/{queued}/cancel", headers=HOST)
    assert r.status_code == 202 and r.json()["status"] == "cancelled" and r.json()["cancel_requested"] is True
    doc = _problem(client.post(f"/v1/jobs/{queued}/cancel", headers=HOST), 409)
    assert doc["job_status"] == "cancelled" and "cancelled" in doc["detail"] and doc["field"] == "status"
    done = _submit(client)
    store.succeed(done, _run(store, done), {"distribution": Gaussian(np.zeros(5), cov=np.eye(5)).to_spec()})
    doc = _problem(client.post(f"/v1/jobs/{done}/cancel", headers=HOST), 409)
    assert doc["job_status"] == "succeeded" and "succeeded" in doc["detail"]
    assert client.get(f"/v1/jobs/{done}", headers=HOST).json()["status"] == "succeeded"


def test_a_cancelled_job_says_so_where_a_result_is_asked_for(api):
    client, store = api
    job = _submit(client)
    client.post(f"/v1/jobs/{job}/cancel", headers=HOST)
    for r in (client.post(f"/v1/jobs/{job}/samples", json={"n": 3}, headers=HOST),
              client.get(f"/v1/jobs/{job}/distribution", headers=HOST),
              client.get(f"/v1/jobs/{job}/result", headers=HOST)):
        doc = _problem(r, 409)
        assert doc["title"] == "Job cancelled" and doc["job_status"] == "cancelled", doc
        assert "no result yet" not in doc["title"] + doc["detail"]
    running = _submit(client)
    _run(store, running)
    doc = _problem(client.post(f"/v1/jobs/{running}/samples", json={"n": 3}, headers=HOST), 409)
    assert doc["title"] == "Job has no result yet" and doc["job_status"] == "running"


def test_samples_seed_defaults_to_0(api):
    client, store = api
    job = _submit(client)
    doc = Gaussian(np.arange(5.0), cov=2 * np.eye(5)).to_spec()
    store.succeed(job, _run(store, job), {"distribution": doc})
    r = client.post(f"/v1/jobs/{job}/samples", json={"n": 4}, headers=HOST)
    assert r.status_code == 200, r.text
    assert r.json()["seed"] == 0
    np.testing.assert_array_equal(np.asarray(r.json()["samples"]), from_spec(doc).sample(4, 0))
    schema = client.get("/openapi.json", headers=HOST).json()["components"]["schemas"]["SampleRequest"]
    assert schema["required"] == ["n"] and schema["properties"]["seed"]["default"] == 0


@pytest.mark.parametrize("body", ['{"n": ', "not json", "[" * 5000 + "]" * 5000])
@pytest.mark.parametrize("route", ["/v1/jobs", "/v1/jobs/{job}/samples", "/v1/jobs/{job}/labels"])
def test_malformed_json_is_400_on_every_json_route(api, route, body):
    client, _ = api
    job = _submit(client)
    doc = _problem(client.post(route.format(job=job), content=body, headers=JSON), 400)
    assert doc["title"] in ("Malformed JSON", "JSON nested too deeply"), doc


# --- issue #45: what the job view and the ops routes say ---------------------------------------

def test_a_new_budgeted_job_shows_its_budget_and_no_label_used_and_only_it_links_a_training_set(api):
    client, store = api
    spec = small_job()
    spec.update(budget=300, algorithm={"name": "bilevel"})
    r = client.post("/v1/jobs", content=json.dumps(spec), headers=JSON)
    budgeted = client.get(r.headers["location"], headers=HOST).json()
    assert budgeted["progress"] == {"iteration": 0, "total": 5, "labels_used": 0, "budget": 300,
                                    "labels_failed": 0, "round": 0}
    assert budgeted["links"]["training_set"] == f"/v1/jobs/{budgeted['id']}/training-set"
    plain = client.get(f"/v1/jobs/{_submit(client)}", headers=HOST).json()
    assert plain["progress"] == {"iteration": 0, "total": 2, "labels_used": 0}
    assert "training_set" not in plain["links"] and "budget" not in plain["progress"]
    listed = {j["id"]: j for j in client.get("/v1/jobs", headers=HOST).json()["items"]}
    assert listed[budgeted["id"]]["progress"]["budget"] == 300 and listed[plain["id"]]["progress"]["labels_used"] == 0


def test_a_finished_job_shows_the_labels_it_used(api):
    client, store = api
    job = _submit(client)
    store.succeed(job, _run(store, job), {"distribution": Gaussian(np.zeros(5), cov=np.eye(5)).to_spec(),
                                          "labels_used": 459_752})
    assert client.get(f"/v1/jobs/{job}", headers=HOST).json()["progress"]["labels_used"] == 459_752


def test_queries_and_labels_of_a_job_that_is_not_ask_tell_say_so(api):
    client, store = api
    job = _submit(client)  # friedman1 labels its own inputs
    for r in (client.get(f"/v1/jobs/{job}/queries", headers=HOST),
              client.post(f"/v1/jobs/{job}/labels", json={"batch_id": "1.0", "labels": [1.0]}, headers=HOST)):
        doc = _problem(r, 409)
        assert doc["title"] == "Not an ask/tell job" and doc["field"] == "oracle", doc
        assert "'friedman1'" in doc["detail"] and "external" in doc["detail"]


def test_readyz_waits_for_an_embedded_worker(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/x.db")
    app = create_app(Settings(data_dir=tmp_path), store=store, enqueue=lambda *_: None, embedded_workers=1)
    with TestClient(app) as client:
        doc = _problem(client.get("/readyz", headers=HOST), 503)
        assert doc["checks"]["workers"].startswith("no live worker yet") and doc["checks"]["store"] == "ok"
        store.register_worker("w1", "cpu", ["lwl.cpu"], {})
        r = client.get("/readyz", headers=HOST)
        assert r.status_code == 200 and r.json()["checks"]["workers"] == "ok" and r.json()["workers"]["cpu"] == 1
    api_only = create_app(Settings(data_dir=tmp_path), store=Store(f"sqlite:///{tmp_path}/y.db"),
                          enqueue=lambda *_: None)  # lwl serve --no-worker: workers are reported, not required
    with TestClient(api_only) as client:
        r = client.get("/readyz", headers=HOST)
        assert r.status_code == 200 and r.json()["workers"] == {"cpu": 0, "cuda": 0} and "workers" not in r.json()["checks"]
