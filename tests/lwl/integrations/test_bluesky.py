"""The Bluesky integration end to end (issue #31): a real RunEngine with ophyd.sim devices, one
simulated axis per input and a detector reading Friedman-1 of the axes' positions, labels a
budgeted ask/tell job on a real ``lwl serve``; a deterministic ~10% of the measurements fail
(half by raising in the detector's trigger, half by reading NaN) and are told as failed points."""

from __future__ import annotations

import json

import numpy as np
import pytest
from bluesky import RunEngine
from ophyd.sim import SynAxis, SynSignal

from lwl.client import Client
from lwl.integrations.bluesky import LwlAgent, lwl_plan
from lwl.oracles import make_oracle
from service.processes import Server, wait_until
from tests.conftest import ROOT
from tests.lwl.test_outcomes import fails

FRIEDMAN = make_oracle({"name": "friedman1"})
BUDGET = 120


class DetectorFault(RuntimeError):
    """The simulated detector's trigger failing (a beam dump, a lost connection)."""


def raises(x: np.ndarray) -> np.ndarray:
    """Of the failing points, those whose trigger raises (the others read NaN)."""
    return fails(x) & (np.floor(np.abs(x[:, 0]) * 1e5) % 2 == 0)


def devices(dim: int):
    axes = [SynAxis(name=f"x{i + 1}", value=0.1234) for i in range(dim)]  # a parking spot that reads

    def reading():
        x = np.array([[float(a.position) for a in axes]])
        if raises(x)[0]:
            raise DetectorFault(f"no signal at {x[0].tolist()}")
        return float("nan") if fails(x)[0] else float(FRIEDMAN.label(x)[0])

    return axes, SynSignal(func=reading, name="det")


def small_budget_spec() -> dict:
    """examples/friedman1_budget.json made small: 120 labels in batches of 32."""
    spec = json.loads((ROOT / "examples" / "friedman1_budget.json").read_text())
    spec["budget"] = BUDGET
    spec["oracle"]["batch_size"] = 32
    for m in spec["test_distributions"]["members"]:
        m["size"] = 500
    spec["test_distributions"]["validation_per_member"] = 100
    spec["device"] = "cpu"
    return spec


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("bluesky")).start()
    yield srv
    srv.stop()


@pytest.mark.server
def test_a_runengine_labels_a_budgeted_job_with_failed_measurements(server):
    axes, det = devices(5)
    RE = RunEngine({})
    docs: list[tuple[str, dict]] = []
    RE.subscribe(lambda name, doc: docs.append((name, doc)))
    with Client(server.url) as c:
        job = c.submit(small_budget_spec())
        wait_until(lambda: c.job(job)["status"] == "awaiting_labels", 60, 0.1, "awaiting_labels")
        agent = LwlAgent(c, job)
        RE(lwl_plan(agent, detectors=[det], motors=axes, label_key="det", poll=0.1))
        doc = c.job(job)
        assert doc["status"] == "succeeded", doc.get("error")
        result = c.result(job)
        X, y = c.training_set(job)
    failed = np.asarray(result["failed_inputs"])
    # every label of the budget was measured once and told; the failures as failed points
    assert agent.told == result["labels_used"] == BUDGET == len(y) + len(failed)
    assert agent.failed == result["labels_failed"] == len(failed) > 0
    assert np.all(fails(failed)) and raises(failed).any() and not raises(failed).all()  # both kinds of failure
    assert not np.any(fails(X))  # no failed point is data
    # the detector computed each label alone (one row), the check in one batch: equal to rounding
    np.testing.assert_allclose(y, FRIEDMAN.label(X), rtol=1e-12, atol=1e-12)
    # one Bluesky run for the job; an event per measurement that read (the raised ones read nothing)
    starts = [d for n, d in docs if n == "start"]
    assert len(starts) == 1 and starts[0]["lwl_job"] == job
    events = [d for n, d in docs if n == "event"]
    assert len(events) == BUDGET - int(raises(failed).sum())
    assert [d for n, d in docs if n == "stop"][0]["exit_status"] == "success"
    read = np.array([[e["data"][f"x{i + 1}"] for i in range(5)] for e in events])
    # the training inputs are where the axes went (each within rounding of one event's readback)
    gap = np.abs(X[:, None, :] - read[None, :, :]).max(axis=2).min(axis=1)
    assert gap.max() < 1e-9, gap.max()


class FakeClient:
    """A client double: one batch of 4 points, two of them pending; records every tell."""

    def __init__(self):
        from lwl.client import Queries

        self.q = Queries("2.1", np.arange(8.0).reshape(4, 2), np.array([1, 3]), np.array([0]), 1)
        self.tells: list[tuple] = []

    def queries(self, job):
        return self.q

    def tell(self, job, batch_id, labels, *, indices=None, failed=None):
        self.tells.append((batch_id, list(indices), np.asarray(labels).tolist(), list(failed)))
        return {}

    def job(self, job):
        return {"status": "awaiting_labels"}


def test_the_agent_asks_pending_points_and_tells_outcomes_by_position():
    c = FakeClient()
    agent = LwlAgent(c, "job", tell_every=2)
    docs, points = agent.ask()
    assert [(d.batch_id, d.index) for d in docs] == [("2.1", 1), ("2.1", 3)]
    assert points.tolist() == [[2.0, 3.0], [6.0, 7.0]]
    with pytest.raises(KeyError, match="x"):
        agent.tell([0.0, 1.0], 1.0)  # position 0 was not asked for (it failed before)
    agent.tell(points[1], None)  # failed
    assert c.tells == []  # held back until tell_every outcomes
    agent.tell(points[0], 5.0)
    assert len(c.tells) == 1
    batch_id, indices, labels, failed = c.tells[0]
    assert batch_id == "2.1" and indices == [3, 1] and failed == [3] and labels[1] == 5.0 and np.isnan(labels[0])
    assert agent.told == 2 and agent.failed == 1
