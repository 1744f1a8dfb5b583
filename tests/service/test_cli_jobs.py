"""A job from the shell against a real ``lwl serve``: ``lwl submit``, ``lwl status``, ``lwl wait``
and ``lwl training-set``, with the service's URL and key from options or from LWL_URL and
LWL_API_KEY (as ``lwl ask`` / ``lwl tell``), and errors that name the problem."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lwl.oracles import make_oracle
from tests.conftest import ROOT
from tests.service.conftest import (LabHandler, LoopbackLab, client_fixture, free_port, http_job, server_fixture,
                                    small_job, unreachable_lab, wait_until)

pytestmark = pytest.mark.server

KEY = "cli-key-0123456789abcdef"
FRIEDMAN = make_oracle({"name": "friedman1"})


# keys on, so every command must send one; a loopback lab oracle allowed, for a job that fails
server = server_fixture("cli-jobs", {"LWL_API_KEYS": f"lab:{KEY}", "LWL_ORACLE_ALLOWED_HOSTS": "127.0.0.1",
                                     "LWL_ORACLE_ALLOWED_NETWORKS": "127.0.0.1/32"})
client = client_fixture(KEY)


# the command line as `lwl` runs it, which then exits 99 if the command loaded torch or scipy: the
# job commands are a lab's shell loop, one process per call, and must stay light (issue 85)
LIGHT_LWL = """import atexit, os, runpy, sys
def light():
    heavy = [m for m in ("torch", "scipy", "numpy") if m in sys.modules]  # (numpy: arrays as .npy bytes, lwl.npy)
    if heavy:
        sys.stderr.write("loaded " + " and ".join(heavy) + "\\n")
        sys.stderr.flush()
        os._exit(99)
atexit.register(light)
sys.argv = ["lwl", *sys.argv[1:]]
runpy.run_module("lwl.cli", run_name="__main__")
"""


def lwl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed command line, as a lab's shell script runs it (and light: LIGHT_LWL)."""
    full = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    done = subprocess.run([sys.executable, "-c", LIGHT_LWL, *args], capture_output=True, text=True, env=full,
                          timeout=300)
    assert done.returncode != 99, f"lwl {args[0]} {done.stderr.strip().splitlines()[-1]}"
    return done


def invoke(server, *args: str, key: str | None = KEY, url: str | None = None):
    """The same commands in this process (faster), with --url and --api-key given as options."""
    from lwl.cli import app

    opts = ["--url", url or server.url] + (["--api-key", key] if key else [])
    env = {"COLUMNS": "200", "NO_COLOR": "1", "LWL_URL": None, "LWL_API_KEY": None}
    return CliRunner().invoke(app, [*args, *opts], env=env)


def test_a_budgeted_job_from_the_shell_submit_wait_training_set(server, client, tmp_path):
    spec = small_job()
    spec["budget"] = 300
    spec["algorithm"] = {"name": "bilevel"}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    env = {"LWL_URL": server.url, "LWL_API_KEY": KEY}  # the environment a lab's script sets once

    submitted = lwl("submit", str(path), "--idempotency-key", "campaign-1", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    assert client.job(job)["id"] == job  # stdout is the job id alone, for JOB=$(lwl submit ...)
    again = lwl("submit", str(path), "--idempotency-key", "campaign-1", env=env)
    assert again.stdout.strip() == job  # a resubmitted campaign is the same job
    narrow = lwl("submit", str(path), "--idempotency-key", "campaign-1", env={**env, "COLUMNS": "40"})
    assert f"`lwl wait {job}` shows its progress" in narrow.stderr  # the hint on one line, whatever the width

    waited = lwl("wait", job, "--poll", "0.2", env=env)
    assert waited.returncode == 0, waited.stderr
    assert "succeeded" in waited.stderr and "5/5" in waited.stderr  # the progress line: rounds done
    assert "verdict at equal labels (300)" in waited.stderr

    out = tmp_path / "campaign-1"  # written as named (np.savez alone would add .npz)
    fetched = lwl("training-set", job, "--out", str(out), env=env)
    assert fetched.returncode == 0, fetched.stderr
    with np.load(out, allow_pickle=False) as z:
        assert set(z.files) == {"inputs", "labels", "left_out_inputs", "left_out_labels"}
        X, y, out_y = z["inputs"], z["labels"], z["left_out_labels"]
    served_X, served_y = client.training_set(job)
    assert np.array_equal(X, served_X) and np.array_equal(y, served_y)
    # with the labels the left-out check kept out of the served model's training set: every label paid for
    assert X.shape == (client.result(job)["labels_used"] - len(out_y), 5) and np.array_equal(y, FRIEDMAN.label(X))
    assert f"{len(y)} labelled points (d = 5) written to {out}" in fetched.stderr

    shown = lwl("status", job, env=env)
    assert shown.returncode == 0, shown.stderr
    head, *rest = shown.stdout.splitlines()
    assert head.startswith(f"{job}  succeeded  iteration 5/5")
    assert "  algorithm bilevel, family gaussian, oracle friedman1" in rest
    assert any(line.startswith("  labels used ") and "of a budget of 300" in line for line in rest)
    doc = json.loads(invoke(server, "status", job, "--json").stdout)
    assert doc["status"] == "succeeded" and doc["progress"]["budget"] == 300
    np.save(tmp_path / "x.npy", X[:7])
    predicted = lwl("predict", job, str(tmp_path / "x.npy"), "--out", str(tmp_path / "p.npy"), env=env)
    assert predicted.returncode == 0, predicted.stderr
    assert np.load(tmp_path / "p.npy").shape == (7, 2)


def test_wait_gives_up_at_its_timeout_and_fails_on_a_cancelled_job(server, client):
    spec = small_job(iterations=100_000)
    # the paper's plain schedule never stops early: the job is still running when it is looked at
    spec["algorithm"].update(optimizer="paper", learning_rate=1e-3)
    job = client.submit(spec)
    wait_until(lambda: (client.job(job)["progress"] or {}).get("iteration", 0) >= 1, 60, 0.1, "first iteration")
    t0 = time.monotonic()
    timed_out = invoke(server, "wait", job, "--timeout", "1", "--poll", "0.2")
    assert timed_out.exit_code == 124, timed_out.output
    assert time.monotonic() - t0 < 15
    assert f"job {job} still running after 1 s (--timeout)" in timed_out.output
    shown = invoke(server, "status", job)
    assert shown.stdout.startswith(f"{job}  running  iteration ") and "/100000" in shown.stdout

    client.cancel(job)
    cancelled = invoke(server, "wait", job, "--poll", "0.2")
    assert cancelled.exit_code == 3 and f"job {job} cancelled" in cancelled.output, cancelled.output


def test_wait_fails_on_a_failed_job_and_prints_its_error(server, client):
    job = client.submit(http_job(unreachable_lab(), timeout_s=0.5, iterations=5))
    waited = invoke(server, "wait", job, "--poll", "0.2")
    assert waited.exit_code == 3, waited.output
    assert "error: Lab oracle failed" in waited.output and f"job {job} failed" in waited.output
    assert "error: Lab oracle failed" in invoke(server, "status", job).stdout


class FailingLab(LoopbackLab):
    """A lab on loopback that labels its first ``good`` calls with Friedman-1 (remembering the
    inputs) and answers 500 from then on."""

    def __init__(self, good: int):
        self.good, self.inputs = good, []
        lab = self

        class Handler(LabHandler):
            def do_POST(self):
                x = np.asarray(json.loads(self.body())["inputs"])
                if len(lab.inputs) >= lab.good:
                    self.send_response(500)
                    self.end_headers()
                    return
                lab.inputs.append(x)
                self.send_json({"labels": FRIEDMAN.label(x).tolist()})

        super().__init__(Handler)


def test_training_set_of_a_failed_job_downloads_the_labels_it_paid_for(server, client, tmp_path):
    """Issue #83: a budgeted job whose lab fails after labelling two rounds ends failed;
    `lwl training-set` still writes the labels it paid for (its last checkpoint's) and says the job
    failed, and the route answers them with the status, as JSON and .npz."""
    lab = FailingLab(good=2)  # the validation round and the first design round, then 500s
    try:
        spec = small_job()
        spec.update(budget=300, algorithm={"name": "bilevel"}, evaluation={"enabled": False})
        spec["oracle"] = {"name": "http", "url": lab.url, "batch_size": 128, "attempts": 1, "timeout_s": 5}
        job = client.submit(spec)
        wait_until(lambda: client.job(job)["status"] == "failed", 60, 0.1, "failed")
    finally:
        lab.close()
    from lwl.design.budget import plan_budget
    from lwl.spec import parse_job_spec

    assert client.job(job)["error"]["title"] == "Lab oracle failed"
    X = np.concatenate(lab.inputs)
    plan = plan_budget(parse_job_spec({**spec, "oracle": {"name": "friedman1"}}))  # the same plan
    assert plan.validation <= 128 and plan.rounds[0] <= 128  # a call each
    n = plan.validation + plan.rounds[0]
    assert X.shape == (n, 5)  # Q's validation points and the first design round's, paid for

    out = tmp_path / "failed.npz"
    fetched = invoke(server, "training-set", job, "--out", str(out))
    assert fetched.exit_code == 0, fetched.output
    assert f"{n} labelled points (d = 5) written to {out}" in fetched.output
    assert f"job {job} failed: it ended without a result" in fetched.output
    with np.load(out, allow_pickle=False) as z:
        assert set(z.files) == {"inputs", "labels", "left_out_inputs", "left_out_labels"}  # no ask/tell round
        assert np.array_equal(z["inputs"], X) and np.array_equal(z["labels"], FRIEDMAN.label(X))
    got = client.labelled_set(job)
    assert got.status == "failed" and np.array_equal(got.arrays["inputs"], X)
    shown = invoke(server, "status", job)  # the job says where its labels are
    assert f"its {n} paid labels are kept: lwl training-set {job}" in shown.stdout, shown.stdout
    doc = client.http.get(f"/v1/jobs/{job}/training-set", headers={"Accept": "application/json"})
    assert doc.headers["LWL-Job-Status"] == "failed"
    assert doc.json()["status"] == "failed" and doc.json()["rounds"] == 2 and doc.json()["n"] == n


def test_errors_name_the_problem(server, client, tmp_path):
    unknown = {cmd: invoke(server, cmd, "no-such-job") for cmd in ("status", "wait", "training-set")}
    for cmd, result in unknown.items():
        assert result.exit_code == 1 and "404 Job not found [id]: no job 'no-such-job'" in result.output, (cmd, result.output)

    keyless = invoke(server, "status", "no-such-job", key=None)
    assert keyless.exit_code == 1 and keyless.output.startswith("401 "), keyless.output

    nowhere = invoke(server, "status", "x", url=f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert nowhere.exit_code == 1 and "cannot reach the service at http://127.0.0.1:" in nowhere.output

    job = client.submit(small_job(iterations=3))
    client.wait(job, progress=False, timeout=120)
    no_set = invoke(server, "training-set", job, "--out", str(tmp_path / "never.npz"))
    assert no_set.exit_code == 1 and "409 No training set [budget]" in no_set.output, no_set.output
    assert not (tmp_path / "never.npz").exists()

    bad = small_job()
    bad["family"] = {"name": "gaussian", "mean": [0.5]}
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps(bad))
    refused = invoke(server, "submit", str(spec))
    assert refused.exit_code == 1 and "422 Invalid job spec [family.mean]" in refused.output, refused.output
    missing = invoke(server, "submit", str(tmp_path / "absent.json"))
    assert missing.exit_code == 2 and "cannot read the spec" in missing.output and "absent.json" in missing.output


MEASURE = '''\
import sys
import numpy as np
x = np.load(sys.argv[1])
y = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]  # Friedman-1
y[::10] = np.nan  # every tenth measurement fails
np.save(sys.argv[2], y)
'''


def campaign_script() -> str:
    doc = (ROOT / "docs" / "lab-integration.md").read_text()
    section = doc[doc.index("From a shell, a whole campaign"):]
    return re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)


def test_the_documented_shell_campaign_runs_as_written(server, client, tmp_path):
    """docs/lab-integration.md's loop, with only the URL, key, spec, instrument and pause
    replaced: submit, ask/measure/tell until the job ends, wait's exit status, the training set."""
    spec = small_job()
    spec.update(budget=300, algorithm={"name": "bilevel", "round_size": 113},  # 3 rounds: Q validation, 2 design
                oracle={"name": "external", "batch_size": 256})
    spec.pop("evaluation")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "measure.py").write_text(MEASURE)
    script = campaign_script()
    assert "export LWL_URL=http://lwl.lab:8000 LWL_API_KEY=..." in script and "./measure " in script
    script = (script.replace("export LWL_URL=http://lwl.lab:8000 LWL_API_KEY=...",
                             f"export LWL_URL={server.url} LWL_API_KEY={KEY}")
              .replace("./measure ", f"{sys.executable} measure.py ").replace("sleep 30", "sleep 0.5"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "NO_COLOR": "1"}
    run = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    log = (tmp_path / "wait.log").read_text() if (tmp_path / "wait.log").exists() else ""
    assert run.returncode == 0, run.stdout + run.stderr + log
    assert "succeeded" in log
    job = client.jobs()[0]["id"]  # the newest job of this key's owner
    result = client.result(job)
    assert result["labels_used"] <= 300 and result["labels_failed"] > 0
    with np.load(tmp_path / "training_set.npz", allow_pickle=False) as z:
        X, y, out_y = z["inputs"], z["labels"], z["left_out_labels"]
    # every labelled point (those the left-out check kept out of the served model's apart) and no failed
    # one, each with the label the instrument measured
    assert len(y) + len(out_y) == result["labels_used"] - result["labels_failed"] and np.allclose(y, FRIEDMAN.label(X))


def test_ask_and_tell_name_what_they_refuse(server, client, tmp_path):
    spec = small_job(iterations=3)
    spec.update(oracle={"name": "external", "batch_size": 64})
    spec.pop("evaluation")
    job = client.submit(spec)
    try:
        wait_until(lambda: client.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        labels = tmp_path / "y.npy"
        np.save(labels, np.zeros(64))
        unknown = invoke(server, "tell", job, "9.9", str(labels))
        # the problem's field in brackets, not eaten as console markup
        assert unknown.exit_code == 1 and "404 Unknown batch [batch_id]: " in unknown.output, unknown.output
        env = {"LWL_URL": server.url, "LWL_API_KEY": KEY}
        asked = lwl("ask", job, "--out", str(tmp_path / "x.npy"), env=env)  # (light: LIGHT_LWL)
        assert asked.returncode == 0 and asked.stdout.strip() == "1.0"
        chosen = lwl("ask", job, "--batch", "1.2", "--out", str(tmp_path / "x2.npy"), env=env)  # one instrument's
        assert chosen.returncode == 0 and chosen.stdout.strip().splitlines()[-1] == "1.2", chosen.stderr
        assert np.load(tmp_path / "x2.npy").shape == (64, 5)
        foreign = invoke(server, "ask", job, "--batch", "7.0")
        assert foreign.exit_code == 1 and "404 Unknown batch [batch_id]" in foreign.output, foreign.output
        np.save(labels, np.zeros(10))  # the batch has 64 points
        short = lwl("tell", job, "1.0", str(labels), env=env)
        assert short.returncode == 1 and "[labels]" in short.stderr, short.stderr
        y = np.zeros(64)
        y[[3, 5]] = np.nan
        np.save(labels, y)
        told = invoke(server, "tell", job, "1.0", str(labels), "--nan-failed")  # the NaN rows told as failed
        assert told.exit_code == 0 and "batch 1.0: accepted, 2 failed" in told.output, told.output
        np.save(labels, np.ones(64, dtype=np.float32))  # another dtype: numpy converts it
        told = invoke(server, "tell", job, "1.2", str(labels))
        assert told.exit_code == 0 and "batch 1.2: accepted" in told.output, told.output
        nowhere = invoke(server, "ask", job, url=f"http://127.0.0.1:{free_port()}")
        assert nowhere.exit_code == 1 and "cannot reach the service" in nowhere.output
    finally:
        client.cancel(job)
