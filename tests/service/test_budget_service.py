"""Budgeted jobs through the embedded service (issue #30): ask/tell in rounds that stop at the
budget, the training set served as .npz and JSON, a restart that loses no paid label, and a
too-small budget refused with 422 naming ``budget``."""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import pytest

from lwl import run_job
from lwl.client import Client
from lwl.models import from_spec
from lwl.oracles import make_oracle
from tests.service.conftest import Server, server_fixture, small_job, wait_until

pytestmark = pytest.mark.server

FRIEDMAN = make_oracle({"name": "friedman1"})
BUDGET = 300


def budget_spec(external: bool = True) -> dict:
    spec = small_job()
    spec["budget"] = BUDGET
    spec["algorithm"] = {"name": "bilevel"}
    if external:
        spec["oracle"] = {"name": "external", "batch_size": 64}
        spec.pop("evaluation")
    return spec


def builtin(spec: dict) -> dict:
    s = json.loads(json.dumps(spec))
    s["oracle"] = {"name": "friedman1"}
    s["evaluation"] = {"enabled": False}
    return run_job(s)


class Lab:
    """Labels with Friedman-1 and counts every input it was asked to measure."""

    def __init__(self):
        self.labelled, self.batches = 0, []

    def __call__(self, x):
        self.labelled += len(x)
        self.batches.append(len(x))
        return FRIEDMAN.label(x)


server = server_fixture("budget")


def test_asktell_job_stops_at_the_budget_and_serves_its_training_set(server):
    spec = budget_spec()
    lab = Lab()
    with Client(server.url) as c:
        job = c.submit(spec)
        assert c.job(job)["progress"]["total"] == 1 + 4  # the validation round and 4 design rounds of 64
        wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        done = c.label_loop(job, lab, timeout=180)
        assert done["status"] == "succeeded"
        result = c.result(job)
        assert lab.labelled == result["labels_used"] <= BUDGET
        local = builtin(spec)
        assert result["training_set"] == local["training_set"]  # the same design as lwl run, bit for bit
        p = done["progress"]
        assert p["budget"] == BUDGET and p["labels_used"] == result["labels_used"]
        assert p["round"] == p["iteration"] == result["rounds"] == result["plan"]["total_rounds"]
        X, y = c.training_set(job)
        left = len(result["left_out"]["labels"])  # paid labels the left-out check kept out of the served model
        assert X.shape == (result["labels_used"] - left, 5) and np.array_equal(y, FRIEDMAN.label(X))
        as_json = httpx.get(f"{server.url}/v1/jobs/{job}/training-set", headers={"Accept": "application/json"})
        doc = as_json.json()
        assert doc["n"] == len(y) and np.array_equal(np.asarray(doc["labels"]), y)
        assert np.array_equal(np.asarray(doc["inputs"]), X) and len(doc["left_out_labels"]) == left
        raw = httpx.get(f"{server.url}/v1/jobs/{job}/training-set")
        with np.load(io.BytesIO(raw.content), allow_pickle=False) as z:
            assert set(z.files) == {"inputs", "labels", "left_out_inputs", "left_out_labels"}
            assert z["left_out_inputs"].shape == (left, 5)


def test_a_cancelled_asktell_job_serves_every_label_it_paid_for(server, tmp_path):
    """Issue #83: a budgeted ask/tell job cancelled in its second round serves, with its status, the
    labels of the round its checkpoint holds (inputs, labels) and those told so far of the round it
    was in (told_inputs, told_labels), as JSON, as .npz and through `lwl training-set`; before any
    label came back it answers 409 naming why."""
    from typer.testing import CliRunner

    from lwl.cli import app

    url = f"{server.url}/v1/jobs/{{}}/training-set"
    as_json = {"Accept": "application/json"}
    with Client(server.url) as c:
        job = c.submit(budget_spec())
        wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        early = httpx.get(url.format(job), headers=as_json)
        assert early.status_code == 409 and early.json()["field"] == "status"
        assert "no label of its first round has come back yet" in early.json()["detail"]
        validation = []
        while (batch := c.ask(job)) is not None:  # the validation round, told whole
            validation.append(batch[1])
            c.tell(job, batch[0], FRIEDMAN.label(batch[1]))
        wait_until(lambda: (c.job(job)["status"] == "awaiting_labels"
                            and c.job(job)["progress"]["iteration"] == 1), 60, 0.1, "the second round")
        batch_id, x = c.ask(job)  # the second round: 5 points of its first batch told, 1 failed, then cancelled
        c.tell(job, batch_id, [*FRIEDMAN.label(x[:5]), None], indices=range(6), failed=[5])
        assert c.cancel(job)["status"] == "cancelled"

    X_val = np.concatenate(validation)
    doc = httpx.get(url.format(job), headers=as_json)
    assert doc.status_code == 200 and doc.headers["LWL-Job-Status"] == "cancelled"
    body = doc.json()
    assert body["status"] == "cancelled" and body["rounds"] == 1 and body["n"] == len(X_val) and body["d"] == 5
    assert np.array_equal(np.asarray(body["inputs"]), X_val)
    assert np.array_equal(np.asarray(body["labels"]), FRIEDMAN.label(X_val))
    assert body["left_out_labels"] == [] and np.array_equal(np.asarray(body["told_inputs"]), x[:5])
    assert np.array_equal(np.asarray(body["told_labels"]), FRIEDMAN.label(x[:5]))  # not the failed point

    raw = httpx.get(url.format(job))
    assert raw.status_code == 200 and raw.headers["LWL-Job-Status"] == "cancelled"
    with np.load(io.BytesIO(raw.content), allow_pickle=False) as z:
        assert set(z.files) == {"inputs", "labels", "left_out_inputs", "left_out_labels", "told_inputs", "told_labels"}
        assert np.array_equal(z["inputs"], X_val) and np.array_equal(z["told_inputs"], x[:5])

    out = tmp_path / "cancelled.npz"
    shown = CliRunner().invoke(app, ["training-set", job, "--out", str(out), "--url", server.url],
                               env={"COLUMNS": "200", "NO_COLOR": "1", "LWL_URL": None, "LWL_API_KEY": None})
    assert shown.exit_code == 0, shown.output
    assert f"job {job} cancelled: it ended without a result" in shown.output
    assert f"{len(X_val)} labelled points (d = 5)" in shown.output and "5 labels told for the round it was in" in shown.output
    with np.load(out, allow_pickle=False) as z:
        assert np.array_equal(z["labels"], FRIEDMAN.label(X_val)) and len(z["told_labels"]) == 5


def test_a_job_without_budget_has_no_training_set_and_a_small_budget_is_refused(server):
    with Client(server.url) as c:
        job = c.submit(small_job(iterations=3))
        c.wait(job, progress=False, timeout=60)
        r = httpx.get(f"{server.url}/v1/jobs/{job}/training-set")
        assert r.status_code == 409 and r.json()["field"] == "budget"  # the job exists; its kind has none
    spec = budget_spec()
    spec["budget"] = 20
    r = httpx.post(f"{server.url}/v1/jobs", json=spec)
    assert r.status_code == 422
    problem = r.json()
    assert "budget" in json.dumps(problem) and "smallest budget it runs with is 32" in json.dumps(problem)


def test_a_restart_loses_no_paid_label(tmp_path):
    spec = budget_spec()
    lab = Lab()
    srv = Server(tmp_path / "d").start()
    try:
        with Client(srv.url) as c:
            job = c.submit(spec)
            for _ in range(3):  # three rounds labelled, the fourth asked
                wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
                while (batch := c.ask(job)) is not None:
                    c.tell(job, batch[0], lab(batch[1]))
            wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
    finally:
        srv.stop()
    srv = Server(tmp_path / "d", port=srv.port).start()
    try:
        with Client(srv.url) as c:
            assert c.job(job)["status"] == "awaiting_labels"
            c.label_loop(job, lab, timeout=180)
            result = c.result(job)
            # every label paid before the restart is in the training set, none was asked twice
            assert lab.labelled == result["labels_used"] <= BUDGET
            assert result["training_set"] == builtin(spec)["training_set"]
    finally:
        srv.stop()


def test_a_budgeted_job_naming_no_model_serves_its_fitted_gp(server):
    """Through lwl serve and its worker: a budgeted job without a model trains a gp, served at
    /model and /predict with the numbers of lwl.models.from_spec offline."""
    from lwl.models import from_spec

    spec = budget_spec(external=False)
    spec.pop("model")
    spec["evaluation"] = {"enabled": False}
    with Client(server.url) as c:
        job = c.submit(spec)
        # a wait limit, not a timing assertion: the gp's fits take minutes on a loaded 2-core machine
        assert c.wait(job, progress=False, timeout=900)["status"] == "succeeded"
        doc = c.model(job)
        assert doc["model"] == "gp" and len(doc["training_set"]["labels"]) == BUDGET
        x = np.random.default_rng(0).normal(size=(6, 5))
        mean, std = c.predict(job, x)
    m2, s2 = from_spec(doc).predict(x, return_std=True)
    np.testing.assert_array_equal(mean, m2)
    np.testing.assert_array_equal(std, s2)


DARCY = make_oracle({"name": "darcy"})


def darcy_spec(budget: int = 120) -> dict:
    """examples/darcy_ama.json through ask/tell with a small DeepONet."""
    from pathlib import Path

    spec = json.loads((Path(__file__).resolve().parents[2] / "examples" / "darcy_ama.json").read_text())
    spec["model"].update(iterations=20, branch=[32], trunk=[32], latent=16)
    spec["oracle"] = {"name": "external", "batch_size": 40}
    spec["budget"] = budget
    return spec


def test_an_operator_job_asks_for_fields_and_takes_solution_fields_as_rows(server, tmp_path):
    """A budgeted ama job through ask/tell (issue #47): the lab solves every input field and tells
    the solution fields (JSON rows or .npy); a wrong width is refused naming the label, a failed
    solve is told as null, counted and never data; the training set holds the fields."""
    url = server.url
    with Client(url) as c:
        job = c.submit(darcy_spec())
        wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        batch_id, x = c.ask(job)
        assert x.shape[1] == 256
        scalars = httpx.post(f"{url}/v1/jobs/{job}/labels", json={"batch_id": batch_id, "labels": [0.0] * len(x)})
        assert scalars.status_code == 422 and scalars.json()["field"] == "labels.0"
        narrow = httpx.post(f"{url}/v1/jobs/{job}/labels", json={"batch_id": batch_id, "labels": [[0.0] * 255]},
                            params={})
        assert narrow.status_code == 422
        fields = DARCY.label(x)
        # point 0 as a JSON row, point 1 failed (null), the rest as one more JSON tell
        c.tell(job, batch_id, fields[:1], indices=[0])
        c.tell(job, batch_id, [None], indices=[1], failed=[1])
        c.tell(job, batch_id, fields[2:], indices=list(range(2, len(x))))
        solved = len(x)
        while c.job(job)["status"] not in ("succeeded", "failed"):
            batch = c.ask(job)
            if batch is None:
                continue
            solved += len(batch[1])
            c.tell(job, batch[0], DARCY.label(batch[1]))  # .npy (n, 256)
        result = c.result(job)
        assert c.job(job)["status"] == "succeeded", result
        assert solved == result["labels_used"] == 120 and result["labels_failed"] == 1
        X, Y = c.training_set(job)
        assert X.shape == Y.shape == (119, 256) and np.allclose(Y, DARCY.label(X))
        # the trained DeepONet is served: its document rebuilds it offline with the route's numbers
        doc = c.model(job)
        assert doc["model"] == "deeponet" and doc["kernel"] is None
        fields, std = c.predict(job, X[:5])
        offline = from_spec(doc).predict(X[:5])
        assert std is None and fields.shape == (5, 256)
        # a float32 network: another batch size (2 rows against 5) takes other BLAS blocks, a few
        # float32 round-offs of the fields' scale apart
        atol = 1e-5 * float(np.abs(offline).max())
        np.testing.assert_allclose(fields, offline, rtol=1e-5, atol=atol)
        as_json = httpx.post(f"{url}/v1/jobs/{job}/predict", json={"inputs": X[:2].tolist()}).json()
        assert as_json["outputs"] == 256 and as_json["std"] is None
        np.testing.assert_allclose(as_json["mean"], offline[:2], rtol=1e-5, atol=atol)
    # lwl predict writes the predicted fields
    from typer.testing import CliRunner

    from lwl.cli import app

    np.save(tmp_path / "x.npy", X[:3])
    r = CliRunner().invoke(app, ["predict", job, str(tmp_path / "x.npy"), "--out", str(tmp_path / "p.npy"),
                                 "--url", url])
    assert r.exit_code == 0 and "3 predicted fields (256 values each)" in r.output, r.output
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), offline[:3], rtol=1e-5, atol=atol)


def test_a_particle_job_through_ask_tell_takes_density_fields_and_serves_its_deeponet(server):
    """A budgeted particle_ama job (issue #47) needs no adjoint: the lab solves the transport
    equation for every scattering field asked and tells the density fields (grid² values each);
    the solves it computed are labels_used = budget, and the served DeepONet predicts fields."""
    from tests.conformance.examples import particle_ama

    spec = particle_ama()
    rte = make_oracle(spec["oracle"])
    for m in spec["test_distributions"]["members"]:
        m["size"] = 30
    spec.update(oracle={"name": "external", "batch_size": 40}, budget=60)
    with Client(server.url) as c:
        job = c.submit(spec)
        solved = 0
        while c.job(job)["status"] not in ("succeeded", "failed"):
            batch = c.ask(job)
            if batch is None:
                continue
            assert batch[1].shape[1] == 81 and (batch[1] > 0).all()
            solved += len(batch[1])
            c.tell(job, batch[0], rte.label(batch[1]))
        result = c.result(job)
        assert c.job(job)["status"] == "succeeded", result
        assert solved == result["labels_used"] == 60
        X, Y = c.training_set(job)
        assert X.shape == Y.shape and len(X) + len(result["left_out"]["labels"]) == 60
        np.testing.assert_allclose(Y, rte.label(X), rtol=1e-10)
        fields, std = c.predict(job, X[:3])
        assert std is None and fields.shape == (3, 81)
