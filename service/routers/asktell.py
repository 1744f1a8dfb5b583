"""Ask/tell: the inputs an external-oracle job needs labelled, and the labels coming back."""

from __future__ import annotations

import io
from typing import Annotated

import numpy as np
import orjson
from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service import problems
from service.core.dispatch import redrive, send_or_leave
from service.core.store import JobRecord, JobStatus, PointOutcome, Told
from service.deps import (
    EnqueueDep,
    OwnerDep,
    SettingsDep,
    StoreDep,
    own_job,
    parse_json,
    read_body,
    read_npy_body,
)
from service.problems import Problem
from service.routers.jobs import BINARY, NPY
from service.schemas import BatchList, PendingBatch, Queries

router = APIRouter(responses=problems.STORE)  # every operation here reads or writes the store

#: a position in a batch (bounded so that no number reaches numpy as an overflow)
Position = Annotated[int, Field(ge=0, lt=2**31)]


class LabelsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    batch_id: str = Field(max_length=64)
    labels: list[float | list[float] | None] = Field(
        description="one label per point told, in the order of `indices` (default: every point of the batch, "
                    "in order); null exactly for the points listed in `failed`. An operator job's label is its "
                    "output field: a list of values per point (the job's label width)")
    indices: list[Position] | None = Field(
        default=None, description="positions in the batch (0-based) of the points told; omitted: every point, "
                                  "in order. Points not told stay pending (a partial batch)")
    failed: list[Position] = Field(
        default_factory=list,
        description="positions in the batch of the points whose measurement failed (their labels are null): "
                    "they count as labels spent and are never used as data")


class PointsOut(BaseModel):
    """What a tell left of its batch."""

    batch_id: str
    outcome: str = Field(description="accepted, or duplicate (every point told before, the same way)")
    pending_points: int = Field(description="points of this batch still without an outcome")
    failed_points: int = Field(description="points of this batch whose measurement failed")
    pending_batches: int
    status: str


def _indices(values, n: int, field: str) -> np.ndarray:
    """Positions in a batch of n points: in range and distinct, else 422 naming ``field.k``."""
    out = np.asarray(values, dtype=np.int64).reshape(-1)
    for k in np.flatnonzero((out < 0) | (out >= n))[:1]:
        raise Problem(422, "Index out of range", f"{field}.{k}: position {int(out[k])} is not in the batch's "
                      f"0..{n - 1}", field=f"{field}.{k}")
    uniq, first = np.unique(out, return_index=True)
    if len(uniq) != len(out):
        k = sorted(set(range(len(out))) - set(first.tolist()))[0]
        raise Problem(422, "Repeated index", f"{field}.{k}: position {int(out[k])} is listed twice",
                      field=f"{field}.{k}")
    return out


def json_labels(values: list, width: int) -> np.ndarray:
    """The JSON ``labels`` of a tell as an array: (k,) scalars, or (k, width) rows for a job whose
    label is a field (null: NaN, a whole NaN row); 422 naming the entry whose shape is wrong."""
    if width == 1:
        for j, v in enumerate(values):
            if isinstance(v, list):
                raise Problem(422, "Wrong shape of labels", f"labels.{j}: one scalar label per point, got a list",
                              field=f"labels.{j}")
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    for j, v in enumerate(values):
        if v is not None and (not isinstance(v, list) or len(v) != width):
            raise Problem(422, "Wrong shape of labels", f"labels.{j}: a field of {width} values per point (this job's "
                          f"label width), got {'a scalar' if not isinstance(v, list) else f'{len(v)} values'}",
                          field=f"labels.{j}")
    return np.asarray([np.full(width, np.nan) if v is None else v for v in values], dtype=np.float64).reshape(-1, width)


def told_points(batch_id: str, n: int, labels: np.ndarray, indices, failed, width: int = 1) -> Told:
    """Check one tell against its batch of ``n`` points: ``labels`` (NaN for null) of the points
    ``indices`` (None: all, in order), ``failed`` positions; ``width`` values per label (1: a
    scalar, else rows of a field). A label is null exactly when its point is listed in
    ``failed``; 422 naming the field otherwise."""
    if width == 1 and labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if width == 1 and labels.ndim != 1:
        raise Problem(422, "Wrong shape of labels", f"batch {batch_id}: one scalar label per point, got shape "
                      f"{tuple(labels.shape)}", field="labels", batch_id=batch_id)
    if width > 1 and (labels.ndim != 2 or labels.shape[1] != width):
        raise Problem(422, "Wrong shape of labels", f"batch {batch_id}: one field of {width} values per point "
                      f"(rows), got shape {tuple(labels.shape)}", field="labels", batch_id=batch_id)
    if indices is None:
        if len(labels) != n:
            raise Problem(422, "Wrong number of labels", f"batch {batch_id} needs {n} labels (one per input), "
                          f"got shape {tuple(labels.shape)}; tell a part of it with indices", field="labels",
                          batch_id=batch_id)
        idx = np.arange(n, dtype=np.int64)
    else:
        idx = _indices(indices, n, "indices")
        if len(idx) != len(labels):
            raise Problem(422, "Indices do not match labels", f"batch {batch_id}: {len(idx)} indices for "
                          f"{len(labels)} labels", field="indices", batch_id=batch_id)
    bad = _indices(failed, n, "failed")
    for k in np.flatnonzero(~np.isin(bad, idx))[:1]:
        raise Problem(422, "Failed point not told", f"failed.{k}: point {int(bad[k])} of batch {batch_id} is not "
                      "among the points told (indices)", field=f"failed.{k}", batch_id=batch_id)
    is_failed = np.isin(idx, bad)
    rows = labels.reshape(len(labels), -1)
    null = np.isnan(rows).all(1)  # a field is null as a whole
    for j in np.flatnonzero(np.isnan(rows).any(1) & ~null)[:1]:
        raise Problem(422, "Non-finite labels", f"labels.{j}: batch {batch_id}, point {int(idx[j])}: a field with "
                      "some values missing (a failed point is null as a whole and listed in failed)",
                      field=f"labels.{j}", batch_id=batch_id)
    for j in np.flatnonzero(null & ~is_failed)[:1]:
        raise Problem(422, "Null label", f"labels.{j}: batch {batch_id}, point {int(idx[j])} has no label "
                      "(null or NaN) but is not listed in failed", field=f"labels.{j}", batch_id=batch_id)
    for j in np.flatnonzero(is_failed & ~null)[:1]:
        k = int(np.flatnonzero(bad == idx[j])[0])
        raise Problem(422, "Failed point with a label", f"failed.{k}: batch {batch_id}, point {int(idx[j])} is "
                      "listed as failed but has a label (send null)", field=f"failed.{k}", batch_id=batch_id)
    for j in np.flatnonzero(np.isinf(rows).any(1))[:1]:
        raise Problem(422, "Non-finite labels", f"labels.{j}: batch {batch_id}: labels must be finite (a failed "
                      "point is null and listed in failed)", field=f"labels.{j}", batch_id=batch_id)
    return Told(indices=idx, labels=labels, failed=is_failed)


@router.get("/v1/jobs/{job_id}/queries", tags=["ask/tell"],
            responses={200: {"model": Queries, "content": {NPY: BINARY}}, **problems.responses(401, 404, 409)})
def get_queries(job_id: str, request: Request, store: StoreDep, owner: OwnerDep,
                batch_id: Annotated[str | None, Query(max_length=64, description=(
                    "the pending batch to hand out (GET /batches lists them: one per instrument); default: "
                    "the first pending batch of the round"))] = None):
    """The next batch an ask/tell job needs labelled (or the pending batch ``batch_id``):
    ``batch_id``, ``inputs`` (every point of the batch, positions fixed), ``pending`` (positions
    still to be told) and ``failed`` (positions told as failed) in JSON; or the inputs as
    ``.npy`` (``Accept: application/x-npy``) with the id in the ``LWL-Batch-Id`` header and the
    number of pending points in ``LWL-Pending-Points``. A ``batch_id`` the job never had is a
    404, one already labelled or of an earlier round a 409."""
    job = require_asktell(store, own_job(store, job_id, owner))
    pending = store.pending_batches(job_id) if job.status == JobStatus.AWAITING_LABELS else []
    if batch_id is not None:
        chosen = [b for b in pending if b.batch_id == batch_id]
        if not chosen and store.batch(job_id, batch_id) is None:
            raise Problem(404, "Unknown batch", f"job {job_id} has no batch {batch_id!r}", field="batch_id")
        if not chosen:
            raise Problem(409, "Batch not pending", f"batch {batch_id} is labelled or not of the job's current "
                          f"round (the job is {job.status}): GET /v1/jobs/{job_id}/batches lists the pending ones",
                          field="batch_id", job_status=job.status)
        pending = chosen + [b for b in pending if b.batch_id != batch_id]
    if not pending:
        raise Problem(409, "No pending queries", f"the job is {job.status}", job_status=job.status)
    batch = pending[0]
    inputs = np.load(io.BytesIO(batch.inputs), allow_pickle=False)
    outcomes, _ = batch.point_state()
    waiting = np.flatnonzero(outcomes == PointOutcome.PENDING)
    failed = np.flatnonzero(outcomes == PointOutcome.FAILED)
    headers = {"LWL-Batch-Id": batch.batch_id, "LWL-Pending-Batches": str(len(pending)),
               "LWL-Pending-Points": str(len(waiting))}
    if NPY in request.headers.get("accept", ""):
        return Response(batch.inputs, media_type=NPY, headers=headers)
    payload = orjson.dumps({"batch_id": batch.batch_id, "n": int(inputs.shape[0]), "d": int(inputs.shape[1]),
                            "pending_batches": len(pending), "pending": waiting, "failed": failed,
                            "inputs": inputs},
                           option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(payload, media_type="application/json", headers=headers)


@router.get("/v1/jobs/{job_id}/batches", tags=["ask/tell"], response_model=BatchList,
            responses=problems.responses(401, 404, 409))
def get_batches(job_id: str, store: StoreDep, owner: OwnerDep) -> BatchList:
    """The batches of the job's current round still waiting for labels, with their sizes and
    points pending: a lab with several instruments gives each one a batch (``GET
    /queries?batch_id=``) and tells it on its own; the round resumes once every batch is told,
    however the tells interleave. Empty unless the job awaits labels."""
    job = require_asktell(store, own_job(store, job_id, owner))
    pending = store.pending_batches(job_id, inputs=False) if job.status == JobStatus.AWAITING_LABELS else []
    out = []
    for b in pending:
        outcomes, _ = b.point_state()
        out.append(PendingBatch(batch_id=b.batch_id, position=b.position, n=b.n,
                                pending_points=int(np.sum(outcomes == PointOutcome.PENDING)),
                                failed_points=int(np.sum(outcomes == PointOutcome.FAILED))))
    return BatchList(job_id=job_id, status=job.status, round=job.ask_step, batches=out)


@router.post("/v1/jobs/{job_id}/labels", tags=["ask/tell"], response_model=PointsOut,
             responses=problems.responses(400, 401, 404, 409, 413, 415, 422),
             openapi_extra={"requestBody": {"required": True, "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/LabelsRequest"}},
              NPY: {"schema": {"type": "string", "format": "binary"}}}}})
async def post_labels(job_id: str, request: Request, store: StoreDep, owner: OwnerDep, settings: SettingsDep,
                      enqueue: EnqueueDep,
                      batch_id: Annotated[str | None, Query(max_length=64, description=(
                          ".npy labels: the batch they label; default: the job's one pending batch "
                          "(409 when it has none or several)"))] = None,
                      indices: Annotated[list[Position] | None,
                                         Query(description="with .npy labels: positions told")] = None,
                      failed: Annotated[list[Position] | None, Query(description="with .npy labels: failed positions "
                                                                            "(NaN there)")] = None) -> dict:
    """Outcomes of points of one batch: JSON ``{"batch_id", "labels", "indices"?, "failed"?}``,
    or ``.npy`` bytes with ``?batch_id=`` (default: the job's only pending batch; and ``&indices=``, ``&failed=`` repeated; NaN at a
    failed point). A point's label is null exactly when it is listed in ``failed``; the points
    not told stay pending. The job resumes on any worker once every point of its round has an
    outcome. Telling a point again the same way is harmless (``duplicate``; a job left queued
    by a tell whose first answer was lost is sent to the workers again); another label for a told point,
    wrong shapes, infinite values and stale or unknown batch ids are refused and change
    nothing."""
    # every store call of a tell (up to 20 transactions, each waiting up to SQLite's busy
    # timeout) runs in the thread pool: no other request of this process waits behind it (issue 84)
    job = await run_in_threadpool(own_job, store, job_id, owner)
    raw = await read_body(request, settings.max_body_bytes)
    return await run_in_threadpool(_tell, job, raw, request.headers.get("content-type", ""), store, enqueue,
                                   settings, batch_id, indices, failed, request.app.state.after_tell_commit)


def _tell(job: JobRecord, raw: bytes, content_type: str, store, enqueue, settings, batch_id: str | None,
          indices: list[int] | None, failed: list[int] | None, after_commit=None) -> dict:
    """The blocking part of ``POST /labels``: check the told points against their batch, store
    them and, when the tell completes the round, send the job to the workers."""
    job_id = job.id
    if content_type.startswith(NPY):
        labels = read_npy_body(raw, settings.max_body_bytes, "labels")  # .npy only: an .npz is refused here
        require_asktell(store, job)  # after the body, as for JSON: unreadable .npy bytes are a 400
        if batch_id is None:
            batch_id = only_pending_batch(store, job)
        failed = failed or []
    else:
        doc = parse_json(raw)
        try:
            body = LabelsRequest.model_validate(doc)
        except ValidationError as exc:
            errs = [(".".join(str(p) for p in e["loc"]) or "(body)", e["msg"]) for e in exc.errors()]
            raise problems.spec_problem(errs, "Invalid labels") from None
        require_asktell(store, job)  # after the body: malformed JSON is a 400 on every JSON route
        batch_id, indices, failed = body.batch_id, body.indices, body.failed
        labels = json_labels(body.labels, _label_width(store, job))
    labels = np.asarray(labels, dtype=np.float64)
    batch = store.batch(job_id, batch_id)
    if batch is None:
        raise Problem(404, "Unknown batch", f"job {job_id} has no batch {batch_id!r}", field="batch_id")
    told = told_points(batch_id, batch.n, labels, indices, failed, _label_width(store, job))
    outcome, generation = store.tell(job_id, batch_id, told)
    if outcome == "unknown":
        raise Problem(404, "Unknown batch", f"job {job_id} has no batch {batch_id!r}", field="batch_id")
    if outcome == "stale":
        raise Problem(409, "Stale batch", f"batch {batch_id} is not part of the job's current round "
                      f"(the job is {job.status})", field="batch_id")
    if outcome == "conflict":
        raise Problem(409, "Batch already labelled", f"batch {batch_id}: a point told here was told another "
                      "label or outcome before", field="batch_id")
    # the tell is committed: the job is queued in the store whatever happens to this message
    # (a broker that is down, this process killed here): the dispatcher sends it in time
    # (service.core.dispatch); a retried tell that finds it committed sends it again at once
    if generation is not None:
        if after_commit is not None:  # a test's fault injection (create_app's after_tell_commit)
            after_commit()
        send_or_leave(enqueue, job_id, generation)
    elif outcome == "duplicate":
        redrive(store, enqueue, job_id)
    outcomes, _ = store.batch(job_id, batch_id).point_state()
    return {"batch_id": batch_id, "outcome": outcome,
            "pending_points": int(np.sum(outcomes == PointOutcome.PENDING)),
            "failed_points": int(np.sum(outcomes == PointOutcome.FAILED)),
            "pending_batches": len(store.pending_batches(job_id)), "status": store.get_job(job_id).status}


def _label_width(store, job: JobRecord) -> int:
    """Values per label of this job (1; an operator job's output field: lwl.runner.label_width)."""
    from lwl.registry import ALGORITHMS
    from lwl.runner import label_width
    from lwl.spec import parse_job_spec

    doc = store.spec(job.id) or {}
    name = (doc.get("algorithm") or {}).get("name")
    if name not in ALGORITHMS or "label_width" not in ALGORITHMS.get(name).extra:
        return 1  # a scalar label: no spec to parse on every tell
    return label_width(parse_job_spec(doc))


def require_asktell(store, job: JobRecord) -> JobRecord:
    """``job``, when its oracle is external (ask/tell); 409 naming ``oracle`` for a job whose
    oracle labels its inputs itself: it never asks and is never told."""
    oracle = (job.kind or {}).get("oracle") or (store.spec(job.id).get("oracle") or {}).get("name")  # older rows
    if oracle != "external":
        raise Problem(409, "Not an ask/tell job", f"job {job.id} labels its inputs with the oracle {oracle!r}; only a "
                      f"job whose oracle is \"external\" asks for labels (GET /queries) and takes them (POST /labels)",
                      field="oracle", job_status=job.status)
    return job


def only_pending_batch(store, job: JobRecord) -> str:
    """The batch .npy labels without ``?batch_id=`` are for: the job's one pending batch. A job
    with none or several pending is in the wrong state for that (409), not a wrong request."""
    pending = store.pending_batches(job.id) if job.status == JobStatus.AWAITING_LABELS else []
    if not pending:
        raise Problem(409, "No pending queries", f"the job is {job.status}", field="batch_id",
                      job_status=job.status)
    if len(pending) > 1:
        raise Problem(409, "Several batches pending", f"{len(pending)} batches wait for labels: "
                      f"name one with ?batch_id=", field="batch_id", job_status=job.status)
    return pending[0].batch_id
