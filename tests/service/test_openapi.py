import json

from service.openapi import generate
from tests.conftest import ROOT


def test_committed_openapi_matches_the_app():
    committed = json.loads((ROOT / "openapi.json").read_text())
    assert committed == json.loads(json.dumps(generate())), \
        "openapi.json is stale: python -m service.openapi > openapi.json"


def test_every_v1_route_documents_problem_errors_and_job_spec():
    doc = generate()
    assert "JobSpec" in doc["components"]["schemas"]
    body = doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/JobSpec"}
