"""The application in-process (no server): what starting it and its first requests emit."""

from __future__ import annotations

import json
import warnings

from fastapi.exceptions import FastAPIDeprecationWarning
from fastapi.testclient import TestClient  # imported outside the recording: it warns about httpx itself

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
