"""Per-point outcomes in ask/tell (issue #31): failed points and partial batches through the
embedded service. A failed point is null in ``labels`` and listed in ``failed``; a partial tell
leaves the other points pending; failed points count against a budget and are never data."""

from __future__ import annotations

import copy
import json

import httpx
import numpy as np
import pytest

from lwl import run_job
from lwl.client import Client
from lwl.oracles import make_oracle
from tests.lwl.test_outcomes import FlakyLab, fails
from tests.service.conftest import Server, server_fixture, small_job, wait_until

pytestmark = pytest.mark.server

FRIEDMAN = make_oracle({"name": "friedman1"})


def lab_labels(x: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The lab: Friedman-1, with a deterministic ~10% of points failed (NaN)."""
    y = FRIEDMAN.label(x)
    bad = np.flatnonzero(fails(x))
    y[bad] = np.nan
    return y, bad.tolist()


def asktell(iterations=2, budget=None) -> dict:
    spec = small_job(iterations=iterations)
    spec["oracle"] = {"name": "external", "batch_size": 64}
    spec.pop("evaluation")
    if budget is not None:
        spec["budget"] = budget
        spec["algorithm"] = {"name": "bilevel"}
    return spec


def in_process(spec: dict) -> dict:
    """The same job run by lwl itself with the same failing lab."""
    s = copy.deepcopy(spec)
    s["oracle"] = {"name": "friedman1"}
    s["evaluation"] = {"enabled": False}
    return run_job(s, oracle=FlakyLab())


def lab_verdict(result: dict, X: np.ndarray | None = None, y: np.ndarray | None = None) -> dict:
    """The verdict the lab (who holds the oracle here) draws from the finished job: the design
    against its baselines on Q's held-out samples, with lwl's own evaluation and verdict. An
    ask/tell job cannot run it itself (it would need labels for every baseline)."""
    from lwl.evaluation.equal_labels import equal_labels
    from lwl.evaluation.heldout import evaluate_design, verdict
    from lwl.measures import from_spec
    from lwl.q_samples import MetaTestSamples
    from lwl.spec import parse_job_spec

    spec = parse_job_spec(result["spec"])
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed)
    if X is not None:  # a budgeted job: its training set against the baselines at equal labels
        evaluation = equal_labels(spec, q, X, y, FRIEDMAN, draws=2, baselines=["mixture"], anchor=False)
    else:
        evaluation = evaluate_design(spec, q, from_spec(result["distribution"]), FRIEDMAN)
    return verdict(evaluation, result.get("warnings", []))


def label_all(c: Client, job: str, *, partial_first: bool, timeout: float = 180) -> int:
    """Tell every batch until the job ends; the first batch in two parts when ``partial_first``.
    Returns the number of failed points told."""
    told_failed = 0
    while True:
        q = c.queries(job)
        if q is None:
            doc = c.job(job)
            if doc["status"] in ("succeeded", "failed", "cancelled"):
                return told_failed
            wait_until(lambda: c.job(job)["status"] != "queued" and c.job(job)["status"] != "running",
                       timeout, 0.05, "a round or the end")
            continue
        y, bad = lab_labels(q.inputs)
        todo = q.pending
        if partial_first:  # half the batch now, the rest after asking again
            partial_first = False
            half = todo[: len(todo) // 2]
            told = [i for i in bad if i in set(half.tolist())]
            answer = c.tell(job, q.batch_id, y[half], indices=half, failed=told)
            told_failed += len(told)
            assert answer["outcome"] == "accepted" and answer["pending_points"] == len(todo) - len(half)
            again = c.queries(job)
            assert again.batch_id == q.batch_id and np.array_equal(again.pending, todo[len(todo) // 2:])
            assert again.failed.tolist() == told
            continue
        told = [i for i in bad if i in set(todo.tolist())]
        c.tell(job, q.batch_id, y[todo], indices=todo, failed=told)
        told_failed += len(told)


server = server_fixture("outcomes")


def test_tells_are_checked_point_by_point_and_a_partial_batch_stays_pending(server):
    with Client(server.url) as c:
        job = c.submit(asktell(iterations=1))
        wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        q = c.queries(job)
        assert q.batch_id == "1.0" and q.pending.tolist() == list(range(64)) and q.failed.tolist() == []
        y = FRIEDMAN.label(q.inputs).tolist()
        url = f"{server.url}/v1/jobs/{job}/labels"

        def post(**body):
            return httpx.post(url, content=json.dumps({"batch_id": "1.0", **body}),
                              headers={"Content-Type": "application/json"})

        def refused(r, field):
            assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json"), r.text
            assert r.json()["field"] == field, r.json()

        refused(post(labels=[None] + y[1:]), "labels.0")  # null but not listed in failed
        refused(post(labels=y, failed=[3]), "failed.0")  # listed as failed but has a label
        refused(post(labels=[None] + y[1:], failed=[0, 64]), "failed.1")  # out of range
        refused(post(labels=y[:2], indices=[0, 99]), "indices.1")
        refused(post(labels=y[:2], indices=[5, 5]), "indices.1")
        refused(post(labels=y[:3], indices=[0, 1]), "indices")
        refused(post(labels=y[:2], indices=[0, 1], failed=[7]), "failed.0")  # a failed point not told
        refused(post(labels=y[:-1]), "labels")  # a part without indices: ambiguous
        assert c.queries(job).pending.tolist() == list(range(64))  # nothing changed

        first = post(labels=[y[0], None, y[2]], indices=[0, 1, 2], failed=[1]).json()
        assert first["outcome"] == "accepted" and first["pending_points"] == 61 and first["failed_points"] == 1
        assert post(labels=[y[0], None], indices=[0, 1], failed=[1]).json()["outcome"] == "duplicate"
        assert post(labels=[y[0] + 1], indices=[0]).status_code == 409  # another label for a told point
        assert post(labels=[y[1]], indices=[1]).status_code == 409  # a failed point's outcome is final
        q = c.queries(job)
        assert q.pending.tolist() == list(range(3, 64)) and q.failed.tolist() == [1]
        assert c.job(job)["status"] == "awaiting_labels"
        # the rest as .npy with the failed positions in the query (NaN there)
        rest = np.asarray(y[3:])
        rest[10 - 3] = np.nan
        done = c.tell(job, "1.0", rest, indices=list(range(3, 64)), failed=[10])
        assert done["pending_points"] == 0 and done["failed_points"] == 2 and done["pending_batches"] == 3
        c.cancel(job)


def test_bilevel_asktell_with_failed_points_and_a_partial_batch_finishes(server):
    spec = asktell(iterations=2)
    with Client(server.url) as c:
        job = c.submit(spec)
        wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        told_failed = label_all(c, job, partial_first=True)
        doc = c.job(job)
        assert doc["status"] == "succeeded", doc.get("error")
        result = c.result(job)
    local = in_process(spec)
    assert told_failed > 0 and result["labels_failed"] == local["labels_failed"] == told_failed
    assert result["labels_used"] == local["labels_used"]
    assert result["selected"]["summary"] and result["distribution"] == local["distribution"]  # bit for bit
    v = lab_verdict(result)
    assert v["outcome"] in ("better", "tie", "worse") and v["best_baseline"] in ("normal", "mixture")
    # NaN used anywhere (the adjoint, a gradient, a check) would make these NaN
    assert all(np.isfinite(h["objective"]) for h in result["history"])
    assert all(np.isfinite(ch["err"]) for ch in result["checks"])


def test_budgeted_asktell_counts_failed_points_and_keeps_them_out_of_its_training_set(tmp_path):
    budget = 300
    spec = asktell(budget=budget)
    srv = Server(tmp_path / "d").start()
    try:
        with Client(srv.url) as c:
            job = c.submit(spec)
            wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
            q = c.queries(job)  # half of the first batch told, then the server restarts
            y, bad = lab_labels(q.inputs)
            half = q.pending[:32]
            c.tell(job, q.batch_id, y[half], indices=half, failed=[i for i in bad if i < 32])
    finally:
        srv.stop()
    srv = Server(tmp_path / "d", port=srv.port).start()
    try:
        with Client(srv.url) as c:
            q = c.queries(job)  # the paid labels survived: only the other half is pending
            assert q.batch_id == "1.0" and q.pending.tolist() == list(range(32, 64))
            label_all(c, job, partial_first=False)
            doc = c.job(job)
            assert doc["status"] == "succeeded", doc.get("error")
            result = c.result(job)
            X, yy = c.training_set(job)
    finally:
        srv.stop()
    local = in_process(spec)
    failed = np.asarray(result["failed_inputs"])
    assert len(failed) == result["labels_failed"] > 0
    assert result["labels_used"] == len(yy) + len(failed) == budget == doc["progress"]["labels_used"]
    assert doc["progress"]["labels_failed"] == len(failed)
    assert np.all(np.isfinite(yy)) and np.array_equal(yy, FRIEDMAN.label(X))
    assert np.all(fails(failed)) and not np.any(fails(X))  # every failed point, and only those, left out
    assert result["training_set"] == local["training_set"] and result["failed_inputs"] == local["failed_inputs"]
    v = lab_verdict(result, X, yy)
    assert v["outcome"] in ("better", "tie", "worse") and v["best_baseline"] == "mixture" and np.isfinite(v["err"])
    # and the job's own verdict, from the labels it paid for (no held-out label): in the result and the GET
    own = result["verdict"]
    assert own["kind"] == "validation" and own["outcome"] in ("better", "tie", "worse") and np.isfinite(own["err"])
    assert doc["verdict"] == own and own == local["verdict"]
