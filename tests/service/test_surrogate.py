"""The trained surrogate as a product (service/routers/surrogate.py): GET /v1/jobs/{id}/model and
POST /v1/jobs/{id}/predict against an in-process app whose store holds a real budgeted result;
the numbers equal ``lwl.models.from_spec`` offline, the Client's and ``lwl predict``'s, and the
document loads into scikit-learn."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from lwl import run_job
from lwl.client import Client
from lwl.models import from_spec
from tests.service.conftest import small_job

HOST = {"host": "127.0.0.1:80"}
JSON = {**HOST, "content-type": "application/json"}
NPY = "application/x-npy"


def budgeted(model: dict | None) -> dict:
    spec = small_job()
    spec["budget"] = 150
    spec["algorithm"] = {"name": "bilevel"}
    spec["evaluation"] = {"enabled": False}
    if model is None:
        spec.pop("model")  # a budgeted job that names no model: gp
    else:
        spec["model"] = model
    return spec


@pytest.fixture(scope="module")
def results() -> dict:
    return {"gp": run_job(budgeted({"name": "gp", "restarts": 0, "max_fit_points": 100})),
            "krr": run_job(budgeted({"name": "krr", "lengthscale": 3.0}))}


def _job(client, store, result: dict | None, spec: dict | None = None) -> str:
    """A job whose result is ``result`` (None: left queued)."""
    r = client.post("/v1/jobs", content=json.dumps(spec or budgeted(None)), headers=JSON)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    if result is not None:
        lease = "lease-" + job
        assert store.acquire(job, 0, lease, "w1") is not None
        assert store.succeed(job, lease, result)
    return job


def _problem(r, status: int, field: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    doc = r.json()
    if field is not None:
        assert field in json.dumps(doc)
    return doc


def test_a_budgeted_job_without_a_model_named_trains_and_serves_a_gp(results):
    res = results["gp"]
    assert res["model"]["model"] == "gp" and len(res["model"]["outputs"][0]["lengthscale"]) == 5
    # what its fitted noise says: its share of E_Q y^2 on Q's validation labels (lwl.models.gp_diagnosis),
    # the first rows of the training set, as many of each of Q's (equally weighted) members
    n = res["plan"]["validation_labels"]
    y = np.asarray(res["training_set"]["labels"])[:n]
    (out,) = res["model_diagnosis"]["outputs"]
    assert out["noise_share"] == pytest.approx(res["model"]["outputs"][0]["noise"] / np.mean(y ** 2))
    assert out["err_floor"] == pytest.approx(np.sqrt(out["noise_share"]))
    assert any("unresolved" in w for w in res["warnings"]) == (out["err_floor"] >= 0.01)
    # its Err on Q estimated from its own labels: the served model's leave-one-out residuals at those points
    served = from_spec({**res["model"], "training_set": res["training_set"]})
    r = served.loo_residuals(np.arange(n))
    assert out["loo_err"] == pytest.approx(np.sqrt(np.mean(r ** 2) / np.mean(y ** 2)), rel=1e-9)
    assert 0 < out["loo_err"] < 1
    assert any("explains little" in w for w in res["warnings"]) == (out["loo_err"] >= 0.25)
    assert results["krr"]["model_diagnosis"] is None  # a KRR fits no noise


@pytest.mark.parametrize("kind", ["gp", "krr"])
def test_model_and_predict_give_the_offline_numbers(api, results, kind):
    client, store = api
    job = _job(client, store, results[kind])
    doc = client.get(f"/v1/jobs/{job}/model", headers=HOST)
    assert doc.status_code == 200, doc.text
    doc = doc.json()
    assert doc["kind"] == "lwl.model" and doc["version"] == 1 and doc["model"] == kind
    assert len(doc["training_set"]["labels"]) == results[kind]["labels_used"]
    x = np.random.default_rng(1).normal(size=(7, 5))
    mean, std = from_spec(doc).predict(x, return_std=True)
    r = client.post(f"/v1/jobs/{job}/predict", content=json.dumps({"inputs": x.tolist()}), headers=JSON)
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(r.json()["mean"], mean)
    np.testing.assert_array_equal(r.json()["std"], std)
    assert np.all(std > 0) and np.all(np.isfinite(mean))
    buf = io.BytesIO()
    np.save(buf, x)
    r = client.post(f"/v1/jobs/{job}/predict", content=buf.getvalue(),
                    headers={**HOST, "content-type": NPY, "accept": NPY})
    assert r.status_code == 200 and r.headers["content-type"] == NPY
    np.testing.assert_array_equal(np.load(io.BytesIO(r.content)), np.stack([mean, std], 1))
    # the Client, over the same routes
    c = Client.__new__(Client)
    c.http = client
    client.headers.update(HOST)
    m2, s2 = c.predict(job, x)
    np.testing.assert_array_equal(m2, mean)
    np.testing.assert_array_equal(s2, std)
    assert c.model(job) == doc


def test_predict_takes_inputs_beyond_the_small_body_limit(api, results):
    """A lab predicts at thousands of points: 8,000 inputs of dimension 5 are 320 kB of .npy, past
    the 64 KiB limit of routes that take a small document (it answered 413 before)."""
    client, store = api
    job = _job(client, store, results["gp"])
    x = np.random.default_rng(2).normal(size=(8000, 5))
    buf = io.BytesIO()
    np.save(buf, x)
    assert len(buf.getvalue()) > 64 * 1024
    r = client.post(f"/v1/jobs/{job}/predict", content=buf.getvalue(), headers={**HOST, "content-type": NPY, "accept": NPY})
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(np.load(io.BytesIO(r.content))[:, 0], from_spec(results["gp"]["model"] | {
        "training_set": {"inputs": results["gp"]["training_set"]["inputs"],
                         "labels": results["gp"]["training_set"]["labels"]}}).predict(x))


def test_the_served_gp_document_loads_into_sklearn_with_equal_predictions(api, results):
    pytest.importorskip("sklearn")
    from tests.lwl.models.test_gp import agreement_rtol, to_sklearn

    client, store = api
    job = _job(client, store, results["gp"])
    doc = client.get(f"/v1/jobs/{job}/model", headers=HOST).json()
    x = np.random.default_rng(2).normal(size=(9, 5))
    r = client.post(f"/v1/jobs/{job}/predict", content=json.dumps({"inputs": x.tolist()}), headers=JSON).json()
    reg, c = to_sklearn(doc)
    sk_mean, sk_std = reg.predict(x, return_std=True)
    rtol = agreement_rtol(doc)  # 1e-8, or what K_y's conditioning allows
    np.testing.assert_allclose(r["mean"], sk_mean + c, rtol=rtol)
    scale = np.sqrt(doc["outputs"][0]["output_scale"])  # the variance's round-off is relative to s^2
    # the recipe by hand (noise as alpha) gives the latent std; the served std is a new measurement's
    np.testing.assert_allclose(r["latent_std"], sk_std, rtol=rtol, atol=rtol * scale)
    fitted = from_spec(doc).to_sklearn()  # the document's own regressor: noise as a WhiteKernel
    sk_mean, sk_std = fitted.predict(x, return_std=True)
    np.testing.assert_allclose(r["mean"], sk_mean, rtol=rtol)
    np.testing.assert_allclose(r["std"], sk_std, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(np.square(r["std"]), np.square(r["latent_std"]) + doc["outputs"][0]["noise"], rtol=1e-9)


def test_no_model_yet_is_409_and_a_job_without_a_budget_has_none(api, results):
    client, store = api
    queued = _job(client, store, None)
    _problem(client.get(f"/v1/jobs/{queued}/model", headers=HOST), 409, "status")
    _problem(client.post(f"/v1/jobs/{queued}/predict", content=json.dumps({"inputs": [[0.0] * 5]}), headers=JSON),
             409, "status")
    unbudgeted = {k: v for k, v in results["krr"].items() if k not in ("model", "training_set")}
    job = _job(client, store, unbudgeted, spec=small_job(iterations=2))
    _problem(client.get(f"/v1/jobs/{job}/model", headers=HOST), 409, "budget")


def test_bad_inputs_are_422_naming_inputs(api, results):
    client, store = api
    job = _job(client, store, results["gp"])
    wrong_d = client.post(f"/v1/jobs/{job}/predict", content=json.dumps({"inputs": [[0.0, 1.0]]}), headers=JSON)
    assert "(m, 5)" in _problem(wrong_d, 422, "inputs")["detail"]
    _problem(client.post(f"/v1/jobs/{job}/predict", content=json.dumps({"inputs": [[0.0] * 5, [1.0]]}),
                         headers=JSON), 422, "inputs")
    _problem(client.post(f"/v1/jobs/{job}/predict", content=json.dumps({"points": [[0.0] * 5]}), headers=JSON),
             422, "inputs")
    buf = io.BytesIO()
    np.save(buf, np.zeros((3, 4)))
    _problem(client.post(f"/v1/jobs/{job}/predict", content=buf.getvalue(), headers={**HOST, "content-type": NPY}),
             422, "inputs")


def test_lwl_predict_writes_mean_and_std(api, results, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from service import cli
    from lwl.cli import app

    client, store = api
    job = _job(client, store, results["gp"])
    client.headers.update(HOST)

    def fake_client(url, api_key):
        c = Client.__new__(Client)
        c.http = client
        c.close = lambda: None
        return c

    monkeypatch.setattr(cli, "_client", fake_client)
    x = np.random.default_rng(3).normal(size=(4, 5))
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "p.npy"
    r = CliRunner().invoke(app, ["predict", job, str(tmp_path / "x.npy"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    mean, std = from_spec(client.get(f"/v1/jobs/{job}/model").json()).predict(x, return_std=True)
    np.testing.assert_array_equal(np.load(out), np.stack([mean, std], 1))


def test_an_eit_search_serves_its_amino_predicting_conductivities(api, eit_spec):
    """A budgeted interval search's model is its AMINO: the route serves its weights, and
    ``/predict`` takes rows of L frequencies and their Neumann data (the document's ``input_dim``,
    not the training points' width) and answers the conductivity fields of ``from_spec``."""
    client, store = api
    eit_spec["algorithm"].update(pairs=4, explore_min=1, round_size=16)
    eit_spec["budget"] = 120
    eit_spec["evaluation"] = {"baselines": [], "enabled": False}
    res = run_job(eit_spec)
    job = _job(client, store, res, spec=eit_spec)
    doc = client.get(f"/v1/jobs/{job}/model", headers=HOST).json()
    assert doc["model"] == "amino" and doc["input_dim"] == 4 * (1 + 4 * 9 - 4)
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    rows = np.concatenate([X[:5, 4:], Y[:5]], axis=1)
    r = client.post(f"/v1/jobs/{job}/predict", content=json.dumps({"inputs": rows.tolist()}), headers=JSON)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outputs"] == 81 and body["std"] is None
    np.testing.assert_array_equal(body["mean"], from_spec(doc).predict(rows))
    wrong = client.post(f"/v1/jobs/{job}/predict", content=json.dumps({"inputs": X[:2].tolist()}), headers=JSON)
    assert f"(m, {doc['input_dim']})" in _problem(wrong, 422, "inputs")["detail"]
