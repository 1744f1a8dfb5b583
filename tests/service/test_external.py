"""External oracles through the embedded service: ask/tell jobs and HTTP-callback oracles
against a small lab server on loopback."""

from __future__ import annotations

import io
import json
import time

import httpx
import numpy as np
import pytest

from lwl import run_job, webhooks
from lwl.client import Client
from lwl.oracles import make_oracle
from tests.service.conftest import LabHandler, LoopbackLab, Server, server_fixture, small_job, wait_until

pytestmark = pytest.mark.server

SECRET = webhooks.new_secret()
ENV = {"LWL_ORACLE_ALLOWED_HOSTS": "127.0.0.1,10.1.2.3", "LWL_ORACLE_ALLOWED_NETWORKS": "127.0.0.1/32",
       "LWL_WEBHOOK_SECRET": SECRET, "LWL_ORACLE_BACKOFF_S": "0.05"}
FRIEDMAN = make_oracle({"name": "friedman1"})


def asktell_spec(iterations=4):
    spec = small_job(iterations=iterations)
    spec["oracle"] = {"name": "external", "batch_size": 64}
    spec.pop("evaluation")  # ask/tell jobs report the design only
    return spec


def builtin_distribution(spec):
    s = json.loads(json.dumps(spec))
    s["oracle"] = {"name": "friedman1"}
    s["evaluation"] = {"enabled": False}
    return run_job(s)["distribution"]


server = server_fixture("external", ENV)


def test_asktell_job_equals_the_builtin_run_and_refuses_bad_labels(server):
    spec = asktell_spec()
    with Client(server.url) as c:
        job = c.submit(spec)
        wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        r = httpx.get(f"{server.url}/v1/jobs/{job}/queries")
        first = r.json()
        assert first["batch_id"] == "1.0" and first["n"] == 64 and first["pending_batches"] == 4  # 200 / 64
        x = np.asarray(first["inputs"])
        y = FRIEDMAN.label(x)
        url = f"{server.url}/v1/jobs/{job}/labels"

        def post(batch_id, labels):
            return httpx.post(url, json={"batch_id": batch_id, "labels": labels})

        def post_npy(labels):  # .npy labels without ?batch_id=: for the job's one pending batch
            buf = io.BytesIO()
            np.save(buf, np.asarray(labels, dtype=np.float64))
            return httpx.post(url, content=buf.getvalue(), headers={"Content-Type": "application/x-npy"})

        several = post_npy(y)
        assert several.status_code == 409 and several.json()["title"] == "Several batches pending"
        partial = post("1.0", y[:-1].tolist())
        assert partial.status_code == 422 and partial.json()["field"] == "labels"
        nan = httpx.post(url, content=json.dumps({"batch_id": "1.0", "labels": [float("nan")] * 64}),
                         headers={"Content-Type": "application/json"})
        assert nan.status_code == 422 and "1.0" in nan.json()["detail"]
        assert post("9.9", y.tolist()).status_code == 404
        assert c.job(job)["status"] == "awaiting_labels"  # nothing changed
        assert post("1.0", y.tolist()).json()["outcome"] == "accepted"
        assert post("1.0", y.tolist()).json()["outcome"] == "duplicate"  # harmless
        assert post("1.0", (y + 1).tolist()).status_code == 409
        for _ in range(2):  # label all but the round's last batch, which then needs no id
            q = httpx.get(f"{server.url}/v1/jobs/{job}/queries").json()
            assert post(q["batch_id"], FRIEDMAN.label(np.asarray(q["inputs"])).tolist()).json()["outcome"] == "accepted"
        last = httpx.get(f"{server.url}/v1/jobs/{job}/queries").json()
        assert last["pending_batches"] == 1
        told = post_npy(FRIEDMAN.label(np.asarray(last["inputs"])))
        assert told.status_code == 200 and told.json()["batch_id"] == last["batch_id"], told.text
        done = c.label_loop(job, FRIEDMAN.label, timeout=120)
        assert done["status"] == "succeeded" and done["progress"]["iteration"] == 4
        assert c.distribution(job) == builtin_distribution(spec)  # bit for bit
        assert post("1.1", y.tolist()).status_code == 409  # a finished round's batch


def test_paused_job_survives_api_and_worker_restart(tmp_path):
    spec = asktell_spec(iterations=3)
    srv = Server(tmp_path / "d", env=ENV).start()
    try:
        with Client(srv.url) as c:
            job = c.submit(spec)
            wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
    finally:
        srv.stop()
    srv = Server(tmp_path / "d", env=ENV, port=srv.port).start()
    try:
        with Client(srv.url) as c:
            assert c.job(job)["status"] == "awaiting_labels"
            c.label_loop(job, FRIEDMAN.label, timeout=120)
            assert c.distribution(job) == builtin_distribution(spec)
    finally:
        srv.stop()


class Lab(LoopbackLab):
    """A lab endpoint on loopback: answers with Friedman-1 labels after scripted failures."""

    def __init__(self, script: list[str]):
        self.script, self.calls, self.bad_signatures = list(script), 0, 0
        lab = self

        class Handler(LabHandler):
            def do_POST(self):
                body = self.body()
                try:
                    webhooks.verify(SECRET, dict(self.headers), body)
                except ValueError:
                    lab.bad_signatures += 1
                lab.calls += 1
                action = lab.script.pop(0) if lab.script else "ok"
                if action in ("500", "503"):
                    self.send_response(int(action))
                    self.end_headers()
                    return
                if action == "sleep":
                    time.sleep(1.5)  # past the oracle's timeout_s
                x = np.asarray(json.loads(body)["inputs"])
                y = FRIEDMAN.label(x)
                if action == "nan":
                    y[3] = np.nan
                self.send_json({"labels": y.tolist()})

        super().__init__(Handler)


def http_spec(url, iterations=3):
    spec = small_job(iterations=iterations)
    spec["oracle"] = {"name": "http", "url": url, "batch_size": 128, "timeout_s": 0.5, "attempts": 6}
    spec["evaluation"] = {"enabled": False}
    return spec


def test_http_callback_retries_failures_and_timeouts(server):
    lab = Lab(["500", "503", "sleep"])
    try:
        spec = http_spec(lab.url)
        with Client(server.url) as c:
            done = c.wait(c.submit(spec), progress=False, timeout=120)
            assert done["status"] == "succeeded"
            assert c.distribution(done["id"]) == builtin_distribution(spec)
        assert lab.calls >= 3 + 2 + 3  # 3 failures, 2 validation batches, one per iteration
        assert lab.bad_signatures == 0
    finally:
        lab.close()


def test_lab_sending_nan_fails_the_job_naming_the_batch(server):
    lab = Lab(["nan"])
    try:
        with Client(server.url) as c:
            job = c.submit(http_spec(lab.url))
            wait_until(lambda: c.job(job)["status"] == "failed", 60, 0.1, "failed")
            err = c.job(job)["error"]
        assert err["status"] == 502 and "non-finite" in err["detail"]
        assert err["batch_id"] and err["batch_id"] in err["detail"]
    finally:
        lab.close()


def test_private_and_unlisted_urls_are_refused(server):
    for url, why in [("http://10.1.2.3/label", "10.1.2.3"), ("http://169.254.169.254/latest", "LWL_ORACLE_ALLOWED_HOSTS"),
                     ("http://example.org/label", "LWL_ORACLE_ALLOWED_HOSTS"), ("ftp://127.0.0.1/x", "http")]:
        r = httpx.post(f"{server.url}/v1/jobs", json=http_spec(url))
        assert r.status_code == 422, (url, r.text)
        assert r.json()["field"] == "oracle.url" and why in r.json()["detail"]


def test_webhook_announces_new_rounds_signed(server):
    received = []

    class Hook(LabHandler):
        def do_POST(self):
            body = self.body()
            webhooks.verify(SECRET, dict(self.headers), body)  # raises (-> 500) on a bad signature
            received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

    hook = LoopbackLab(Hook)
    try:
        spec = asktell_spec(iterations=1)
        spec["oracle"]["webhook_url"] = f"http://127.0.0.1:{hook.port}/lwl-events"
        with Client(server.url) as c:
            job = c.submit(spec)
            wait_until(lambda: len(received) >= 1, 60, 0.1, "first webhook")
            assert received[0]["type"] == "lwl.queries" and received[0]["job_id"] == job
            assert received[0]["batch_ids"] == ["1.0", "1.1", "1.2", "1.3"]
            c.label_loop(job, FRIEDMAN.label, timeout=120)
        # one announcement per round: the validation round, the checks of Q's moment-matched
        # Gaussian, of theta^0 and of the four broadened starts, the single iteration's round and
        # the check of its result
        assert [r["batch_ids"][0] for r in received] == [f"{k}.0" for k in range(1, 10)]
    finally:
        hook.close()
