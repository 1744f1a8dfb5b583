"""The API contract: schemathesis against a real ``lwl serve`` with keys (every check, positive
data acceptance included, zero failures), the rules openapi.json states, and a client generated
from the committed openapi.json by openapi-python-client that submits a job, waits for it and
draws samples."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lwl.measures import from_spec
from service.routers.jobs import EXAMPLE_JOB
from tests.conftest import ROOT
from tests.service.conftest import Server, wait_until

pytestmark = pytest.mark.server

KEYS = "alice:k-alice,bob:k-bob"
CONFIG = Path(__file__).with_name("schemathesis.toml")
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")  # how to write a valid .npy/.npz upload
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("contract"), env={"LWL_API_KEYS": KEYS}).start()
    yield server
    server.stop()


def test_schemathesis_finds_no_failure(keyed):
    """All of schemathesis's checks, bounded to about 100 s (bench/contract.py runs longer)."""
    st = shutil.which("st", path=str(BIN))
    assert st, "schemathesis is part of the test extra"
    run = subprocess.run([st, "--config-file", str(CONFIG), "run", f"{keyed.url}/openapi.json",
                          "-H", "Authorization: Bearer k-alice", "--max-time", "100", "--seed", "20261126"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)})
    summary = run.stdout[run.stdout.rfind("SUMMARY"):]
    assert run.returncode == 0, run.stdout[-8000:]
    assert "Failures" not in summary and "Errors" not in summary, summary
    assert "passed" in summary


def test_positive_data_acceptance_is_on_for_every_operation():
    """No operation switches the check off; only POST /v1/jobs widens it, to 422 (the rules of
    a job spec that have no JSON-schema form)."""
    import tomllib

    config = tomllib.loads(CONFIG.read_text())
    assert config["checks"]["positive_data_acceptance"]["enabled"] is True
    for op in config.get("operations", []):
        check = op.get("checks", {}).get("positive_data_acceptance", {})
        assert check.get("enabled", True) is True, op
        if "expected-statuses" in check:
            assert op["include-name"] == "POST /v1/jobs" and "400" not in check["expected-statuses"], op


def _validator(component: str):
    import jsonschema_rs  # schemathesis's own validator

    doc = json.loads((ROOT / "openapi.json").read_text())
    return jsonschema_rs.validator_for({"$ref": f"#/components/schemas/{component}", "components": doc["components"]})


def test_openapi_states_what_the_validators_enforce():
    from lwl.q_samples import MemberSpec
    from service.routers.jobs import SampleRequest

    gaussian = {"mean": [0.0], "cov": [[1.0]]}
    members = [{}, {"gaussian": gaussian}, {"gaussian": gaussian, "size": 3}, {"dataset": "d", "samples": [[1.0]]},
               {"dataset": "d"}, {"samples": [[1.0], [2.0]]}, {"gaussian": gaussian, "size": 3, "kle": None},
               {"uniform": {"low": [0.0], "high": [1.0]}}]
    schema = _validator("MemberSpec")
    for m in members:
        try:
            MemberSpec.model_validate(m)
            accepted = True
        except ValueError:
            accepted = False
        assert schema.is_valid(m) == accepted, m
    requests = _validator("SampleRequest")
    assert requests.is_valid({"n": 1_000_000}) and not requests.is_valid({"n": 1_000_001})
    with pytest.raises(ValueError):
        SampleRequest.model_validate({"n": 1_000_001})
    doc = json.loads((ROOT / "openapi.json").read_text())
    upload = doc["paths"]["/v1/datasets"]["post"]["requestBody"]["content"]
    assert set(upload) == {"application/octet-stream", "application/x-npy", "application/x-npz"}
    key = next(p for p in doc["paths"]["/v1/jobs"]["post"]["parameters"] if p["name"] == "idempotency-key")
    assert key["schema"]["minLength"] == 1  # an empty key is refused (400)


def _generate(tmp_path: Path) -> Path:
    cfg = tmp_path / "client.yaml"
    cfg.write_text("post_hooks: []\nproject_name_override: lwl-api-client\npackage_name_override: lwl_api_client\n")
    out = tmp_path / "client"
    subprocess.run([shutil.which("openapi-python-client", path=str(BIN)), "generate", "--path",
                    str(ROOT / "openapi.json"), "--config", str(cfg), "--output-path", str(out)],
                   check=True, capture_output=True, text=True, timeout=120)
    return out


def test_a_generated_client_submits_waits_and_draws_samples(keyed, tmp_path):
    out = _generate(tmp_path)
    sys.path.insert(0, str(out))
    try:
        from lwl_api_client import AuthenticatedClient
        from lwl_api_client.api.jobs import create_job_v1_jobs_post as create
        from lwl_api_client.api.jobs import get_job_v1_jobs_job_id_get as get_job
        from lwl_api_client.api.results import get_distribution_v1_jobs_job_id_distribution_get as distribution
        from lwl_api_client.api.results import post_samples_v1_jobs_job_id_samples_post as samples
        from lwl_api_client.models import JobCreated, JobSpec, ProblemDocument, SampleRequest

        client = AuthenticatedClient(base_url=keyed.url, token="k-alice")
        created = create.sync(client=client, body=JobSpec.from_dict(EXAMPLE_JOB))
        assert isinstance(created, JobCreated), created
        wait_until(lambda: json.loads(get_job.sync_detailed(created.id, client=client).content)["status"]
                   == "succeeded", 180, 0.5, "the job")
        drawn = json.loads(samples.sync_detailed(created.id, client=client, body=SampleRequest(n=5, seed=3)).content)
        doc = json.loads(distribution.sync_detailed(created.id, client=client).content)
        np.testing.assert_array_equal(np.asarray(drawn["samples"]), from_spec(doc).sample(5, 3))  # same bits
        typed = samples.sync(created.id, client=client, body=SampleRequest(n=2, seed=3))  # the answer's model
        assert typed.n == 2 and typed["d"] == 5 and distribution.sync(created.id, client=client).family == doc["family"]
        refused = samples.sync(created.id, client=client, body=SampleRequest(n=0, seed=3))
        assert isinstance(refused, ProblemDocument) and refused.status == 422 and refused.field == "n"
        stranger = AuthenticatedClient(base_url=keyed.url, token="not-a-key")
        denied = create.sync(client=stranger, body=JobSpec.from_dict(EXAMPLE_JOB))
        assert isinstance(denied, ProblemDocument) and denied.status == 401
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith("lwl_api_client")]:
            del sys.modules[name]
