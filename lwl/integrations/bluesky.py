"""Bluesky: a RunEngine labels an lwl ask/tell job with ophyd devices (``pip install 'lwl[lab]'``).

One input coordinate per positioner: for every point a job waits for, the plan moves the
positioners there, triggers and reads the detectors, takes the label from one data key and tells
it back; a measurement that raises (a failed status, a limit, a timeout) or reads a non-finite
value is told as a **failed** point (docs/lab-integration.md, "Per-point outcomes"), not retried.
It goes on until the job ends.

    from bluesky import RunEngine
    from lwl.client import Client
    from lwl.integrations.bluesky import LwlAgent, lwl_plan

    with Client(url, api_key) as lwl:
        agent = LwlAgent(lwl, job_id)
        RunEngine()(lwl_plan(agent, detectors=[det], motors=[x1, x2, x3, x4, x5], label_key="det"))

The split follows bluesky-adaptive's agent conventions: the **agent** (:class:`LwlAgent`) has
``ask(batch_size) -> (docs, points)`` and ``tell(x, y)``, and knows nothing of devices; the
**measurement plan** (:func:`measurement_plan`) measures one point; the **plan**
(:func:`lwl_plan`) runs the loop inside one Bluesky run whose start document names the job.
The agent talks to the service through a client passed in (:class:`lwl.client.Client` or
anything with its ``queries``, ``tell`` and ``job``), so this module imports no HTTP code.

Every outcome is told as soon as ``tell_every`` points are measured (default: each point), so a
crash of the RunEngine loses no measurement, and a restarted plan measures only what is still
pending (the service keeps partial batches).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
from bluesky import plan_stubs as bps
from bluesky import preprocessors as bpp
from bluesky.utils import RequestAbort, RequestStop, RunEngineInterrupted

TERMINAL = ("succeeded", "failed", "cancelled")
#: exceptions of the RunEngine's own control flow: never a failed measurement
CONTROL = (RequestAbort, RequestStop, RunEngineInterrupted)


class AskTellClient(Protocol):
    """What the agent needs of :class:`lwl.client.Client`."""

    def queries(self, job) -> Any: ...

    def tell(self, job, batch_id: str, labels, *, indices=None, failed=None) -> dict: ...

    def job(self, job) -> dict: ...


@dataclass(frozen=True)
class PointDoc:
    """Where a point asked for lives in the job: its batch and its position there."""

    batch_id: str
    index: int


@dataclass
class LwlAgent:
    """The lwl side of the loop, in bluesky-adaptive's shape: ``ask`` hands out pending points,
    ``tell`` takes one outcome (NaN or None: a failed measurement) and sends the outcomes to
    the job every ``tell_every`` points and at the end of each ask (``flush``)."""

    client: AskTellClient
    job_id: str
    tell_every: int = 1
    _asked: dict[bytes, list[PointDoc]] = field(default_factory=dict, repr=False)
    _outcomes: list[tuple[PointDoc, float]] = field(default_factory=list, repr=False)
    told: int = 0
    failed: int = 0

    def ask(self, batch_size: int | None = None) -> tuple[list[PointDoc], np.ndarray]:
        """Up to ``batch_size`` pending points of the job's next batch as ``(docs, points)``
        (points: (k, d) inputs); ``([], empty)`` when the job is not waiting for labels."""
        self.flush()
        q = self.client.queries(self.job_id)
        if q is None:
            return [], np.zeros((0, 0))
        todo = q.pending if batch_size is None else q.pending[:batch_size]
        docs = [PointDoc(q.batch_id, int(i)) for i in todo]
        points = np.asarray(q.inputs, dtype=np.float64)[todo]
        for doc, x in zip(docs, points):
            self._asked.setdefault(x.tobytes(), []).append(doc)
        return docs, points

    def tell(self, x, y) -> None:
        """The outcome of the point ``x`` as asked (the setpoints, not the readbacks): its label
        ``y``, or NaN / None when the measurement failed."""
        key = np.asarray(x, dtype=np.float64).tobytes()
        docs = self._asked.get(key)
        if not docs:
            raise KeyError(f"x: {np.asarray(x).tolist()} was not asked for (or told already)")
        doc = docs.pop(0)
        if not docs:
            del self._asked[key]
        value = float("nan") if y is None else float(y)
        self._outcomes.append((doc, value if math.isfinite(value) else float("nan")))
        if len(self._outcomes) >= self.tell_every:
            self.flush()

    def flush(self) -> None:
        """Send the outcomes held back, one partial tell per batch."""
        by_batch: dict[str, list[tuple[int, float]]] = {}
        for doc, y in self._outcomes:
            by_batch.setdefault(doc.batch_id, []).append((doc.index, y))
        for batch_id, items in by_batch.items():
            indices = [i for i, _ in items]
            labels = np.asarray([y for _, y in items], dtype=np.float64)
            bad = [i for i, y in items if math.isnan(y)]
            self.client.tell(self.job_id, batch_id, labels, indices=indices, failed=bad)
            self.told += len(items)
            self.failed += len(bad)
        self._outcomes.clear()

    def status(self) -> str:
        return self.client.job(self.job_id)["status"]

    def finished(self) -> bool:
        return self.status() in TERMINAL


def measurement_plan(point: np.ndarray, detectors: Sequence, motors: Sequence):
    """Move ``motors`` to ``point`` (one coordinate each), trigger and read ``motors`` and
    ``detectors`` into one event; returns the readings."""
    yield from bps.mv(*(v for m, x in zip(motors, point) for v in (m, float(x))))
    return (yield from bps.trigger_and_read([*detectors, *motors]))


def label_of(readings: dict, label_key: str) -> float:
    """The label in one event's readings: the value of ``label_key`` (NaN when not finite)."""
    value = float(np.asarray(readings[label_key]["value"], dtype=np.float64))
    return value if math.isfinite(value) else float("nan")


def lwl_plan(agent: LwlAgent, detectors: Sequence, motors: Sequence, *, label_key: str | None = None,
             batch_size: int | None = None, poll: float = 0.5, failures: tuple[type[BaseException], ...] = (Exception,),
             md: dict | None = None):
    """Label the agent's job until it ends, in one Bluesky run (``md`` plus the job id).

    Between the job's rounds (it is computing) the plan sleeps ``poll`` seconds. A
    measurement raising one of ``failures`` (default: any exception, except the RunEngine's
    pause / stop / abort) or reading a non-finite label is told as failed. ``label_key``:
    the data key of the label, by default the first detector's name."""
    key = label_key or detectors[0].name
    if len(motors) == 0:
        raise ValueError("motors: one positioner per input coordinate")

    @bpp.run_decorator(md={"lwl_job": agent.job_id, "plan_name": "lwl_plan", **(md or {})})
    def loop():
        while True:
            docs, points = agent.ask(batch_size)
            if not docs:
                if agent.finished():
                    return agent.status()
                yield from bps.sleep(poll)
                continue
            if points.shape[1] != len(motors):
                raise ValueError(f"motors: the job's inputs have {points.shape[1]} coordinates, "
                                 f"{len(motors)} positioners given")
            for x in points:
                try:
                    readings = yield from measurement_plan(x, detectors, motors)
                    y = label_of(readings, key)
                except CONTROL:
                    raise
                except failures:
                    y = float("nan")  # a failed measurement is an outcome, told as such
                agent.tell(x, y)
            agent.flush()

    return (yield from loop())
