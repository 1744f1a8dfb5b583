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


def test_errors_are_documented_as_problem_documents_with_bearer_security():
    doc = generate()
    assert doc["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["HTTPBearer"]["description"]}
    assert "ProblemDocument" in doc["components"]["schemas"] and "HTTPValidationError" not in doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            errors = {s: r for s, r in op["responses"].items() if s.startswith(("4", "5"))}
            for status, r in errors.items():
                assert list(r["content"]) == ["application/problem+json"], (method, path, status)
                assert r["content"]["application/problem+json"]["schema"] == {"$ref": "#/components/schemas/ProblemDocument"}
            if path.startswith("/v1/"):
                assert op["security"] == [{"HTTPBearer": []}] and "401" in errors, (method, path)
                assert not any(p["name"].lower() == "authorization" for p in op.get("parameters", []))
            if "{job_id}" in path or "{dataset_id}" in path:
                assert "404" in errors, (method, path)
    assert {"400", "409", "413", "422", "503"} <= set(doc["paths"]["/v1/jobs"]["post"]["responses"])
