"""Ask/tell: the inputs an external-oracle job needs labelled, and the labels coming back."""

from __future__ import annotations

import io
from typing import Annotated

import numpy as np
import orjson
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lwl.arrays import ArrayTooLarge, read_npy_bytes

from service import problems
from service.deps import EnqueueDep, OwnerDep, SettingsDep, StoreDep, own_job, parse_json, read_body
from service.problems import Problem
from service.routers.jobs import NPY

router = APIRouter()


class LabelsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    batch_id: str = Field(max_length=64)
    labels: list[float] = Field(description="one label per input of the batch, in order")


@router.get("/v1/jobs/{job_id}/queries", tags=["ask/tell"],
            responses={200: {"content": {"application/json": {}, NPY: {}}}, **problems.responses(401, 404, 409)})
def get_queries(job_id: str, request: Request, store: StoreDep, owner: OwnerDep):
    """The next batch an ask/tell job needs labelled: ``batch_id`` and ``inputs`` (JSON),
    or the inputs as ``.npy`` (``Accept: application/x-npy``) with the id in the
    ``LWL-Batch-Id`` header."""
    job = own_job(store, job_id, owner)
    pending = store.pending_batches(job_id) if job["status"] == "awaiting_labels" else []
    if not pending:
        raise Problem(409, "No pending queries", f"the job is {job['status']}", job_status=job["status"])
    batch = pending[0]
    inputs = np.load(io.BytesIO(batch["inputs"]), allow_pickle=False)
    headers = {"LWL-Batch-Id": batch["batch_id"], "LWL-Pending-Batches": str(len(pending))}
    if NPY in request.headers.get("accept", ""):
        return Response(batch["inputs"], media_type=NPY, headers=headers)
    payload = orjson.dumps({"batch_id": batch["batch_id"], "n": int(inputs.shape[0]), "d": int(inputs.shape[1]),
                            "pending_batches": len(pending), "inputs": inputs},
                           option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(payload, media_type="application/json", headers=headers)

@router.post("/v1/jobs/{job_id}/labels", tags=["ask/tell"], responses=problems.responses(400, 401, 404, 409, 413, 415, 422),
             openapi_extra={"requestBody": {"required": True, "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/LabelsRequest"}},
              NPY: {"schema": {"type": "string", "format": "binary"}}}}})
async def post_labels(job_id: str, request: Request, store: StoreDep, owner: OwnerDep, settings: SettingsDep,
                      enqueue: EnqueueDep,
                      batch_id: Annotated[str | None, Query(max_length=64, description=(
                          ".npy labels: the batch they label; default: the job's one pending batch "
                          "(409 when it has none or several)"))] = None) -> dict:
    """Labels for one batch: JSON ``{"batch_id", "labels"}``, or ``.npy`` bytes with
    ``?batch_id=`` (or without it, for the job's only pending batch). The job resumes on any worker once its round is complete. Posting the
    same labels again is harmless; partial batches, wrong shapes, non-finite values and
    stale or unknown batch ids are refused and change nothing."""
    job = own_job(store, job_id, owner)
    raw = await read_body(request, settings.max_body_bytes)
    if request.headers.get("content-type", "").startswith(NPY):
        if batch_id is None:
            batch_id = only_pending_batch(store, job)
        try:
            labels = read_npy_bytes(raw, settings.max_body_bytes)  # .npy only: an .npz is refused here
        except ArrayTooLarge as exc:
            raise Problem(413, "Labels too large", str(exc), field="labels") from None
        except Exception as exc:
            raise Problem(400, "Unreadable labels", f"expected .npy bytes: {exc}", field="labels") from None
        if labels.dtype.kind not in "fiu":
            raise Problem(422, "Labels must be numeric", f"dtype {labels.dtype}", field="labels")
    else:
        doc = parse_json(raw)
        try:
            body = LabelsRequest.model_validate(doc)
        except ValidationError as exc:
            errs = [(".".join(str(p) for p in e["loc"]) or "(body)", e["msg"]) for e in exc.errors()]
            raise problems.spec_problem(errs, "Invalid labels") from None
        batch_id = body.batch_id
        labels = np.asarray(body.labels, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if not np.all(np.isfinite(labels)):
        raise Problem(422, "Non-finite labels", f"batch {batch_id}: labels must be finite (no NaN or infinity)",
                      field="labels", batch_id=batch_id)
    outcome, generation = store.tell(job_id, batch_id, labels)
    if outcome == "unknown":
        raise Problem(404, "Unknown batch", f"job {job_id} has no batch {batch_id!r}", field="batch_id")
    if outcome == "stale":
        raise Problem(409, "Stale batch", f"batch {batch_id} is not part of the job's current round "
                      f"(the job is {job['status']})", field="batch_id")
    if outcome == "conflict":
        raise Problem(409, "Batch already labelled", f"batch {batch_id} was told other labels", field="batch_id")
    if outcome == "shape":
        n = store.batch(job_id, batch_id)["n"]
        raise Problem(422, "Wrong number of labels", f"batch {batch_id} needs {n} labels (one per input), "
                      f"got shape {tuple(labels.shape)}", field="labels", batch_id=batch_id)
    if generation is not None:
        enqueue(job_id, generation)
    return {"batch_id": batch_id, "outcome": outcome,
            "pending_batches": len(store.pending_batches(job_id)), "status": store.get_job(job_id)["status"]}


def only_pending_batch(store, job: dict) -> str:
    """The batch .npy labels without ``?batch_id=`` are for: the job's one pending batch. A job
    with none or several pending is in the wrong state for that (409), not a wrong request."""
    pending = store.pending_batches(job["id"]) if job["status"] == "awaiting_labels" else []
    if not pending:
        raise Problem(409, "No pending queries", f"the job is {job['status']}", field="batch_id",
                      job_status=job["status"])
    if len(pending) > 1:
        raise Problem(409, "Several batches pending", f"{len(pending)} batches wait for labels: "
                      f"name one with ?batch_id=", field="batch_id", job_status=job["status"])
    return pending[0]["batch_id"]
