"""The embedded default: ``lwl serve`` in a subprocess (SQLite store, local broker, one
worker process), driven over HTTP."""

from __future__ import annotations

import io
import json
import zipfile

import httpx
import numpy as np
import pytest

from lwl import run_job
from lwl.client import ApiError, Client
from lwl.measures import from_spec
from tests.service.conftest import Server, client_fixture, server_fixture, small_job, wait_until

pytestmark = pytest.mark.server

ALICE, BOB = "key-alice", "key-bob"
PROBLEM = "application/problem+json"


server = server_fixture("embedded", {"LWL_API_KEYS": f"alice:{ALICE},bob:{BOB}", "LWL_MAX_BODY_BYTES": str(2_000_000)})
alice = client_fixture(ALICE)
bob = client_fixture(BOB)


def test_bilevel_job_succeeds_and_matches_the_library(alice):
    spec = small_job()
    job_id = alice.submit(spec)
    done = alice.wait(job_id, progress=False, timeout=120)
    assert done["status"] == "succeeded"
    assert done["progress"]["iteration"] == done["progress"]["total"] == 30
    local = run_job(spec)
    dist = alice.distribution(job_id)
    assert dist == local["distribution"]  # the service runs the same code path as lwl run
    result = alice.result(job_id)
    assert result["evaluation"] == local["evaluation"]
    # the job's GET carries the verdict and warnings of the result
    assert done["verdict"] == result["verdict"] == local["verdict"]
    assert done["verdict"]["best_baseline"] in ("normal", "mixture")
    assert done["warnings"] == result["warnings"]
    assert result["selected"]["iteration"] in [c["iteration"] for c in result["checks"]]
    hist = alice.history(job_id)
    assert [h["iteration"] for h in hist] == list(range(30))
    assert [h["objective"] for h in hist] == [h["objective"] for h in local["history"]]
    # samples: JSON and .npy, bit for bit what the library draws
    want = from_spec(dist).sample(1000, 7)
    assert np.array_equal(alice.samples(job_id, 1000, 7, npy=True), want)
    assert np.array_equal(alice.samples(job_id, 1000, 7, npy=False), want)


def test_ama_job_succeeds_and_matches_the_library(alice, ama_spec):
    job_id = alice.submit(ama_spec)
    done = alice.wait(job_id, progress=False, timeout=300)
    assert done["status"] == "succeeded", done
    assert done["progress"]["iteration"] == done["progress"]["total"] == 3
    local = run_job(ama_spec)
    assert alice.distribution(job_id) == local["distribution"]
    result = alice.result(job_id)
    assert result["evaluation"] == local["evaluation"]
    assert [h["objective"] for h in alice.history(job_id)] == [h["objective"] for h in local["history"]]
    want = from_spec(local["distribution"]).sample(50, 3)
    assert np.array_equal(alice.samples(job_id, 50, 3, npy=True), want)
    # ask/tell cannot drive AMA: refused at submission, naming the field
    with pytest.raises(ApiError) as exc:
        alice.submit({**ama_spec, "oracle": {"name": "external", "batch_size": 10}})
    assert exc.value.status == 422 and "oracle.name" in json.dumps(exc.value.problem)


def test_particle_ama_job_succeeds_and_matches_the_library(alice, particle_spec):
    job_id = alice.submit(particle_spec)
    done = alice.wait(job_id, progress=False, timeout=300)
    assert done["status"] == "succeeded", done
    local = run_job(particle_spec)
    assert alice.distribution(job_id) == local["distribution"]
    assert alice.distribution(job_id)["family"] == "particles"
    assert alice.result(job_id)["evaluation"] == local["evaluation"]
    assert np.array_equal(alice.samples(job_id, 20, 3, npy=True), from_spec(local["distribution"]).sample(20, 3))
    # a particles job needs an oracle with an adjoint: refused at submission, naming the field
    with pytest.raises(ApiError) as exc:
        alice.submit({**particle_spec, "oracle": {"name": "darcy"}})
    assert exc.value.status == 422 and "oracle" in json.dumps(exc.value.problem)


def test_eit_interval_job_succeeds_and_matches_the_library(alice, eit_spec):
    job_id = alice.submit(eit_spec)
    done = alice.wait(job_id, progress=False, timeout=300)
    assert done["status"] == "succeeded", done
    assert done["progress"]["iteration"] == done["progress"]["total"] == 5  # 3 grid points + 2 midpoints
    local = run_job(eit_spec)
    assert alice.distribution(job_id) == local["distribution"]
    assert alice.result(job_id)["evaluation"] == local["evaluation"]
    assert [h["validation_error"] for h in alice.history(job_id)] == [h["validation_error"] for h in local["history"]]
    # samples of the designed omega law, bit for bit the library's
    assert np.array_equal(alice.samples(job_id, 20, 3, npy=True), from_spec(local["distribution"]).sample(20, 3))
    # Q's frequencies from an uploaded dataset: (M, 1) rows are the design's coordinate, not the oracle's rows
    omegas = np.random.default_rng(2).uniform(np.pi / 2, 7 * np.pi, (60, 1))
    from_data = json.loads(json.dumps(eit_spec))
    from_data["test_distributions"]["members"] = [{"dataset": alice.upload_dataset(omegas)}]
    assert alice.wait(alice.submit(from_data), progress=False, timeout=300)["status"] == "succeeded"
    from_data["test_distributions"]["members"] = [{"dataset": alice.upload_dataset(np.hstack([omegas, omegas]))}]
    with pytest.raises(ApiError) as exc:
        alice.submit(from_data)
    assert exc.value.status == 422 and "members.0.dataset" in json.dumps(exc.value.problem)
    with pytest.raises(ApiError) as exc:  # the interval family is moved by interval_search only
        alice.submit({**eit_spec, "algorithm": {"name": "bilevel"}, "model": {"name": "krr"}})
    assert exc.value.status == 422 and "interval_search" in json.dumps(exc.value.problem)


def test_submit_answers_202_with_location_and_idempotency(server, alice):
    body = json.dumps(small_job(iterations=3))
    h = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json", "Idempotency-Key": "k1"}
    r1 = httpx.post(f"{server.url}/v1/jobs", content=body, headers=h)
    assert r1.status_code == 202 and r1.json()["status"] == "queued"
    assert r1.headers["location"] == f"/v1/jobs/{r1.json()['id']}"
    r2 = httpx.post(f"{server.url}/v1/jobs", content=body, headers=h)
    assert r2.status_code == 202 and r2.json()["id"] == r1.json()["id"]
    r3 = httpx.post(f"{server.url}/v1/jobs", content=json.dumps(small_job(iterations=4)), headers=h)
    assert r3.status_code == 409 and r3.headers["content-type"] == PROBLEM
    alice.wait(r1.json()["id"], progress=False, timeout=60)


def test_cancel_stops_a_running_job(alice):
    spec = small_job(iterations=100_000)
    spec["algorithm"].update(optimizer="paper", learning_rate=1e-3)  # the plain schedule never stops early
    job_id = alice.submit(spec)
    wait_until(lambda: alice.job(job_id)["progress"]["iteration"] > 3, 60, 0.1, "job running")
    alice.cancel(job_id)
    wait_until(lambda: alice.job(job_id)["status"] == "cancelled", 20, 0.1, "cancelled")
    it = alice.job(job_id)["progress"]["iteration"]
    assert it < 100_000
    with pytest.raises(ApiError) as exc:
        alice.distribution(job_id)
    assert exc.value.status == 409


def test_list_paging_and_status_filter(alice):
    ids = [alice.submit(small_job(iterations=2, seed=s)) for s in range(3)]
    for i in ids:
        alice.wait(i, progress=False, timeout=60)
    page = alice.http.get("/v1/jobs", params={"limit": 2}).json()
    assert len(page["items"]) == 2 and page["next_cursor"]
    everything = alice.jobs(limit=2)
    assert {j["id"] for j in everything} >= set(ids)
    assert len({j["id"] for j in everything}) == len(everything)  # pages do not overlap
    assert all(j["status"] == "succeeded" for j in alice.jobs(status="succeeded"))


def _problem(r, status, field=None):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM), r.headers
    doc = r.json()
    assert doc["status"] == status and doc["title"]
    if field is not None:
        assert doc.get("field", "").startswith(field) or any(
            e["field"].startswith(field) for e in doc.get("errors", [])), doc
    return doc


def test_bad_input_gets_problem_documents_and_stores_nothing(server, alice, bob):
    before = len(alice.jobs()) + len(bob.jobs())
    url = f"{server.url}/v1/jobs"
    h = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"}
    good = small_job(iterations=2)

    def post(doc_or_text, headers=h):
        text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
        return httpx.post(url, content=text, headers=headers)

    _problem(post('{"oracle": '), 400)  # malformed JSON
    _problem(post({**good, "surprise": 1}), 422, "surprise")
    _problem(post(json.dumps(good).replace('"lengthscale": 3.0', '"lengthscale": NaN')), 422, "model.lengthscale")
    _problem(post(json.dumps(good).replace('"lengthscale": 3.0', '"lengthscale": Infinity')), 422, "model.lengthscale")
    bad = json.loads(json.dumps(good))
    bad["family"]["cov"] = np.eye(4).tolist()
    _problem(post(bad), 422, "family")  # wrong shape
    bad = json.loads(json.dumps(good))
    bad["test_distributions"]["members"][0]["gaussian"]["cov"] = [[1, 2, 0, 0, 0], [2, 1, 0, 0, 0]] + np.eye(5)[2:].tolist()
    _problem(post(bad), 422, "test_distributions.members.0.gaussian.cov")  # not PSD
    _problem(post({**good, "test_distributions": {"members": [{"dataset": "nope"}] * 2}}), 422,
             "test_distributions.members.0.dataset")
    _problem(post("x" * 3_000_000), 413)  # over LWL_MAX_BODY_BYTES
    _problem(post(good, headers={"Content-Type": "application/json"}), 401)
    _problem(post(good, headers={**h, "Authorization": "Bearer wrong"}), 401)
    # another owner's ids look like missing ones
    mine = alice.submit(small_job(iterations=2))
    r = httpx.get(f"{server.url}/v1/jobs/{mine}", headers={"Authorization": f"Bearer {BOB}"})
    _problem(r, 404, "id")
    _problem(httpx.post(f"{server.url}/v1/jobs/{mine}/samples", json={"n": 3, "seed": 0},
                        headers={"Authorization": f"Bearer {BOB}"}), 404)
    ds = alice.upload_dataset(np.random.default_rng(0).standard_normal((300, 5)))
    bobs = json.loads(json.dumps(good))
    bobs["test_distributions"]["members"][0] = {"dataset": ds}
    _problem(httpx.post(url, content=json.dumps(bobs), headers={**h, "Authorization": f"Bearer {BOB}"}), 422,
             "test_distributions.members.0.dataset")
    # samples requests are validated too
    alice.wait(mine, progress=False, timeout=60)
    sh = {"Authorization": f"Bearer {ALICE}"}
    _problem(httpx.post(f"{server.url}/v1/jobs/{mine}/samples", json={"n": 0, "seed": 0}, headers=sh), 422, "n")
    _problem(httpx.post(f"{server.url}/v1/jobs/{mine}/samples", json={"n": 10**9, "seed": 0}, headers=sh), 422, "n")
    _problem(httpx.post(f"{server.url}/v1/jobs/{mine}/samples", json={"n": 5, "seed": -1}, headers=sh), 422, "seed")
    _problem(httpx.post(f"{server.url}/v1/jobs/{mine}/samples", json={"n": "5", "seed": 0}, headers=sh), 422, "n")
    # only the one valid job was stored; the worker is alive and still runs jobs
    assert len(alice.jobs()) + len(bob.jobs()) == before + 1
    assert alice.wait(alice.submit(small_job(iterations=2)), progress=False, timeout=60)["status"] == "succeeded"


def test_datasets_upload_and_use(alice, server):
    rng = np.random.default_rng(1)
    ds = alice.upload_dataset(rng.standard_normal((300, 5)) + 0.5)
    spec = small_job(iterations=3)
    spec["test_distributions"]["members"][0] = {"dataset": ds}
    done = alice.wait(alice.submit(spec), progress=False, timeout=60)
    assert done["status"] == "succeeded"
    h = {"Authorization": f"Bearer {ALICE}"}
    buf = io.BytesIO()
    np.savez(buf, x=np.ones((4, 2)))
    r = httpx.post(f"{server.url}/v1/datasets", content=buf.getvalue(), headers=h)
    assert r.status_code == 201 and r.json()["shape"] == [4, 2]
    # pickled object arrays are refused, never unpickled
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _problem(httpx.post(f"{server.url}/v1/datasets", content=buf.getvalue(), headers=h), 400)
    _problem(httpx.post(f"{server.url}/v1/datasets", content=b"not an array", headers=h), 400)
    buf = io.BytesIO()
    np.save(buf, np.array([[1.0, np.nan]]))
    _problem(httpx.post(f"{server.url}/v1/datasets", content=buf.getvalue(), headers=h), 422)
    # an .npz archive whose one member is a text file, not an array: 400, not a server error
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("notes.txt", "no array here")
    _problem(httpx.post(f"{server.url}/v1/datasets", content=buf.getvalue(), headers=h), 400)


def test_degenerate_members_are_refused_before_anything_is_stored(alice, server):
    """A member whose samples have a rank-deficient covariance (identical rows) used to run the
    whole design and fail in the evaluation; now it is a 422 naming the member, nothing stored."""
    before = len(alice.jobs())
    h = {"Authorization": f"Bearer {ALICE}"}
    flat = np.tile(np.arange(5.0), (300, 1))  # 300 identical rows
    ds = alice.upload_dataset(flat)
    spec = small_job(iterations=2)
    spec["test_distributions"]["members"][1] = {"dataset": ds}
    p = _problem(httpx.post(f"{server.url}/v1/jobs", json=spec, headers=h), 422, "test_distributions.members.1.dataset")
    assert "rank 0" in p["detail"]
    spec["test_distributions"]["members"][1] = {"samples": flat[:200].tolist()}
    _problem(httpx.post(f"{server.url}/v1/jobs", json=spec, headers=h), 422, "test_distributions.members.1.samples")
    assert len(alice.jobs()) == before
    # a job whose members are all datasets needs no family block: the datasets fix d
    rng = np.random.default_rng(2)
    only = small_job(iterations=2)
    only.pop("family", None)
    only["test_distributions"]["members"] = [{"dataset": alice.upload_dataset(rng.standard_normal((300, 5)) + i)}
                                             for i in range(2)]
    assert alice.wait(alice.submit(only), progress=False, timeout=120)["status"] == "succeeded"
    wrong = json.loads(json.dumps(only))
    wrong["test_distributions"]["members"][1] = {"dataset": alice.upload_dataset(rng.standard_normal((300, 4)))}
    _problem(httpx.post(f"{server.url}/v1/jobs", json=wrong, headers=h), 422, "test_distributions.members.1.dataset")


def test_deeply_nested_json_is_refused_and_the_connection_lives(server):
    h = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"}
    with httpx.Client(base_url=server.url, headers=h) as c:  # one keep-alive connection
        for depth in (100, 100_000):
            r = c.post("/v1/jobs", content="[" * depth + "]" * depth)
            _problem(r, 400)
            assert "nested too deeply" in r.json()["title"]
            assert c.get("/v1/jobs").status_code == 200  # the next request on the same connection


def test_catalog_health_metrics(server, alice):
    cat = alice.catalog()
    assert {o["name"] for o in cat["oracles"]} >= {"sobol_g", "friedman1", "friedman2", "kernel_expansion"}
    assert cat["algorithms"][0]["name"] == "bilevel" and "properties" in cat["algorithms"][0]["schema"]
    assert {a["name"] for a in cat["algorithms"]} == {"bilevel", "ama", "particle_ama", "interval_search"}
    assert {f["name"] for f in cat["families"]} == {"auto", "gaussian", "mixture", "pool", "kle", "particles", "interval"}
    assert "eit" in {o["name"] for o in cat["oracles"]} and "amino" in {m["name"] for m in cat["models"]}
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/readyz").json()["checks"] == {"store": "ok", "broker": "ok", "workers": "ok"}
    text = httpx.get(f"{server.url}/metrics").text
    assert 'lwl_jobs{status="succeeded"}' in text
    assert "lwl_http_requests_total" in text and "lwl_iteration_seconds_total" in text


def test_restart_keeps_every_job_and_result(tmp_path):
    srv = Server(tmp_path / "data").start()
    try:
        with Client(srv.url) as c:
            ids = [c.submit(small_job(iterations=5, seed=s)) for s in range(2)]
            for i in ids:
                c.wait(i, progress=False, timeout=60)
            before = {i: c.result(i) for i in ids}
    finally:
        srv.stop()
    srv = Server(tmp_path / "data", port=srv.port).start()  # a fresh process on the same data
    try:
        with Client(srv.url) as c:
            assert {i: c.result(i) for i in ids} == before
            assert {j["id"] for j in c.jobs()} == set(ids)
    finally:
        srv.stop()


def test_job_specs_from_the_wire_are_strictly_typed(server):
    """ "iterations": "5" is refused with the field named, not coerced; 5 for a number is fine."""
    h = {"Authorization": f"Bearer {ALICE}"}
    spec = small_job(iterations=2)
    spec["algorithm"]["iterations"] = "5"
    _problem(httpx.post(f"{server.url}/v1/jobs", json=spec, headers=h), 422, "algorithm.iterations")
    spec = small_job(iterations=2)
    spec["evaluation"]["enabled"] = 1
    _problem(httpx.post(f"{server.url}/v1/jobs", json=spec, headers=h), 422, "evaluation.enabled")
    spec = small_job(iterations=2)
    spec["model"]["lengthscale"] = 3  # an integer where a number is expected
    assert httpx.post(f"{server.url}/v1/jobs", json=spec, headers=h).status_code == 202
