"""Input domains through a real ``lwl serve``: refused domains and test samples name their
field; a job's ``/samples`` and its ask/tell batches lie inside the domain."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from lwl.client import Client
from lwl.domain import Domain
from lwl.measures import from_spec
from lwl.oracles import make_oracle
from tests.service.conftest import server_fixture, small_job

pytestmark = pytest.mark.server

PROBLEM = "application/problem+json"
D = 5
LOW, HIGH = [0.0, 0.0, 0.0, -0.5, 0.0], [1.0, 1.0, 1.5, 0.5, 1.0]
FRIEDMAN = make_oracle({"name": "friedman1"})


def domain_job(**over) -> dict:
    """small_job's Friedman-1 problem on a box that cuts its Gaussian members' tails: the members
    are given as samples inside the box, and the design (a Gaussian) must be restricted to it."""
    spec = small_job(iterations=8)
    rng = np.random.default_rng(0)
    a = rng.uniform(LOW, HIGH, (300, D))
    b = np.clip(rng.normal([0.7, 0.3, 1.0, 0.1, 0.6], 0.15, (300, D)), LOW, HIGH)
    spec["test_distributions"]["members"] = [{"samples": a.tolist()}, {"samples": b.tolist()}]
    spec["domain"] = {"low": LOW, "high": HIGH}
    spec["family"] = {"name": "gaussian", "mean": [0.5] * D, "cov": (0.25 * np.eye(D)).tolist()}  # ~88% outside
    spec.update(over)
    return spec


server = server_fixture("domain")


def _problem_field(r) -> str:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    doc = r.json()
    return doc.get("field") or doc["errors"][0]["field"]


def test_bad_domains_and_samples_outside_are_refused_naming_the_field(server):
    url = f"{server.url}/v1/jobs"
    spec = domain_job()
    spec["domain"] = {"low": LOW, "high": [1.0, 1.0, 1.5, -0.5, 1.0]}  # high = low on input 3
    assert _problem_field(httpx.post(url, json=spec)).startswith("domain.high")
    spec = domain_job()
    spec["test_distributions"]["members"][1]["samples"][4][0] = 1.2
    r = httpx.post(url, json=spec)
    assert _problem_field(r) == "test_distributions.members.1.samples" and "outside the domain" in r.text
    spec["domain"]["outside"] = "clip"  # explicitly clipped: accepted
    assert httpx.post(url, json=spec).status_code == 202
    with Client(server.url) as c:  # an uploaded dataset is checked before anything is queued
        rows = np.asarray(domain_job()["test_distributions"]["members"][0]["samples"])
        rows[10, 2] = -0.1
        spec = domain_job()
        spec["test_distributions"]["members"][0] = {"dataset": c.upload_dataset(rows)}
        assert _problem_field(httpx.post(url, json=spec)) == "test_distributions.members.0.dataset"


def test_samples_of_a_domain_job_lie_inside(server):
    box = Domain(LOW, HIGH)
    with Client(server.url) as c:
        job = c.submit(domain_job())
        done = c.wait(job, progress=False, timeout=180)
        assert done["status"] == "succeeded", done
        dist = c.distribution(job)
        assert dist["family"] == "truncated" and dist["domain"] == {"low": LOW, "high": HIGH}
        x = c.samples(job, 100_000, 4)
        assert x.shape == (100_000, D) and box.contains(x).all()
        assert np.array_equal(x, from_spec(dist).sample(100_000, 4))  # bit for bit the library's
        # the unrestricted Gaussian underneath would have put most of them outside
        assert not box.contains(from_spec(dist["base"]).sample(1000, 4)).all()
        assert c.job(job)["verdict"]["outcome"] in ("better", "tie", "worse")


def test_asktell_batches_of_a_domain_job_lie_inside(server):
    box = Domain(LOW, HIGH)
    asked = []

    def label(x):
        asked.append(np.asarray(x))
        return FRIEDMAN.label(x)

    spec = domain_job(oracle={"name": "external", "batch_size": 64})
    spec.pop("evaluation")
    with Client(server.url) as c:
        job = c.submit(spec)
        done = c.label_loop(job, label, timeout=180)
        assert done["status"] == "succeeded", done
    x = np.concatenate(asked)
    assert len(x) >= 200 + 8 * 60 and box.contains(x).all()
