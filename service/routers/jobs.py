"""Jobs and their results: submit, list, read, cancel; result, distribution, samples."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from lwl.spec import SpecError, parse_job_spec
from lwl.params import MAX_SEED
from service import problems
from service.core.routing import DEVICE_OF_QUEUE, QUEUE_CPU, queue_for
from service.core.store import (TERMINAL, IdempotencyConflict, JobRecord, JobStatus, PointOutcome, Store,
                                WorkerRecord)
from service.deps import EnqueueDep, MeasuresDep, OwnerDep, SettingsDep, StoreDep, own_job, parse_json, read_body
from service.jsonresponse import FastJSONResponse
from service.problems import Problem
from service.schemas import (AcceptedJobSpec, DistributionDocument, JobCreated, JobHistory, JobList, JobResult,
                             JobView, Samples, TrainingSet)

NPY = "application/x-npy"
NPZ = "application/x-npz"  # a numpy .npz archive (np.load reads it)
BINARY = {"schema": {"type": "string", "format": "binary"}}
STREAM_ABOVE = 8 * 1024 * 1024  # bytes of samples sent in one piece below this
# a bound on n that the schema can state (the one on n * d depends on the job): at d <= 20 the
# default LWL_MAX_SAMPLES admits every n up to it
MAX_SAMPLE_N = 1_000_000

router = APIRouter(responses=problems.STORE)  # every operation here reads or writes the store
CURSOR = r"^[0-9]{1,15}(\.[0-9]{1,17})?_[0-9a-f]{32}$"  # next_cursor: "<created_at>_<job id>"


class SampleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(ge=1, le=MAX_SAMPLE_N, description=f"number of samples, at most {MAX_SAMPLE_N:,}; n * d (the "
                   f"job's dimension) at most LWL_MAX_SAMPLES floats (default 20,000,000), 422 otherwise")
    seed: int = Field(default=0, ge=0, le=MAX_SEED,
                      description="default 0; same seed, same samples as lwl.measures.from_spec(doc).sample(n, seed)")

    @field_validator("n", "seed", mode="before")
    @classmethod
    def _json_integer(cls, v):
        """A JSON integer, as JSON Schema defines one (5 and 5.0), never a string or a boolean:
        "n": "5" is refused, not coerced."""
        if isinstance(v, (str, bytes, bool)):
            raise ValueError("must be a JSON integer")
        return v


EXAMPLE_JOB = {  # Friedman-1 on a two-regime Q; everything else from lwl's defaults
    "oracle": {"name": "friedman1"},
    "test_distributions": {"members": [
        {"gaussian": {"mean": [0, 0, 0, 0, 0], "cov": [[2 if i == j else 0 for j in range(5)] for i in range(5)]},
         "size": 300},
        {"gaussian": {"mean": [1, 0, 1, 0, 1], "cov": [[1 if i == j else 0 for j in range(5)] for i in range(5)]},
         "size": 300}], "validation_per_member": 100},
    "algorithm": {"name": "bilevel", "iterations": 4, "samples_per_iteration": 64},
    "evaluation": {"train_size": 64},
}


@router.post("/v1/jobs", status_code=202, response_model=JobCreated, tags=["jobs"],
             responses=problems.responses(400, 401, 409, 413, 415, 422, 503),
          openapi_extra={"requestBody": {"required": True, "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"},
                                   "examples": {"small": {"summary": "a bilevel job that runs in seconds",
                                                          "value": EXAMPLE_JOB}}}}}})
async def create_job(request: Request, response: Response, store: StoreDep, owner: OwnerDep,
                     settings: SettingsDep, enqueue: EnqueueDep,
                     idempotency_key: Annotated[str | None, Header(max_length=200, json_schema_extra={"minLength": 1})]
                     = None) -> dict:
    """Submit a job spec (the JSON ``lwl run`` takes). 202 with ``Location``. An empty
    ``Idempotency-Key`` is refused (400), not taken as a key."""
    if idempotency_key is not None and not idempotency_key.strip():
        raise Problem(400, "Empty Idempotency-Key", "send a non-empty key, or no Idempotency-Key header",
                      field="Idempotency-Key")
    raw = await read_body(request, settings.max_body_bytes)
    # validation, the store and the broker block: off the event loop, so that no other request
    # of this process waits behind them (issue 84)
    job = await run_in_threadpool(_create_job, raw, store, owner, settings, enqueue, idempotency_key)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return {"id": job.id, "status": job.status}


def _create_job(raw: bytes, store: Store, owner: str, settings, enqueue, idempotency_key: str | None) -> JobRecord:
    """Validate a submitted spec, store the job and send its first slice (the blocking part of
    ``POST /v1/jobs``)."""
    doc = parse_json(raw)
    try:
        spec = parse_job_spec(doc, strict=True)
    except SpecError as exc:
        raise problems.spec_problem(exc.errors) from None
    check_datasets(spec, store, owner)
    canonical = spec.model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
    live = store.list_workers(within=settings.stale_seconds)
    queue = queue_for(canonical, gpu_alive=any(w.device == "cuda" for w in live))
    try:
        job, created = store.create_job(owner, canonical, total_steps(spec), idempotency_key, digest, queue=queue,
                                        progress=initial_progress(spec))
    except IdempotencyConflict:
        raise Problem(409, "Idempotency key reused", "this Idempotency-Key was used with another body",
                      field="Idempotency-Key") from None
    if created:
        try:
            enqueue(job.id, 0)
        except Exception as exc:  # nothing half-made stays behind
            store.delete_job(job.id)
            raise Problem(503, "Queue unavailable", f"could not enqueue the job: {type(exc).__name__}; nothing was "
                          f"stored: retry after {problems.RETRY_AFTER_S} s",
                          headers={"Retry-After": str(problems.RETRY_AFTER_S)}) from None
    return job


@router.get("/v1/jobs", tags=["jobs"], response_model=JobList, responses=problems.responses(400, 401, 422))
def list_jobs(store: StoreDep, owner: OwnerDep, settings: SettingsDep,
              status: Annotated[JobStatus | None, Query()] = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 50,
              cursor: Annotated[str | None, Query(max_length=200, pattern=CURSOR)] = None) -> dict:
    """The owner's jobs, newest first; pass ``next_cursor`` back as ``cursor`` for more."""
    before = None
    if cursor:
        ts, _, jid = cursor.partition("_")
        try:
            before = (float(ts), jid)
        except ValueError:
            raise Problem(400, "Bad cursor", "use the next_cursor of a previous page", field="cursor") from None
    rows = store.list_jobs(owner, status, limit + 1, before)
    live = live_workers(store, settings) if any(r.status in (JobStatus.QUEUED, JobStatus.RUNNING) for r in rows) else None
    items = [job_view(r, live, settings) for r in rows[:limit]]
    nxt = f"{rows[limit - 1].created_at!r}_{rows[limit - 1].id}" if len(rows) > limit else None
    return {"items": items, "next_cursor": nxt}


@router.get("/v1/jobs/{job_id}", tags=["jobs"], response_class=FastJSONResponse,
            responses={200: {"model": JobView}, **problems.responses(401, 404)})
def get_job(job_id: str, store: StoreDep, owner: OwnerDep, settings: SettingsDep):
    """Status, progress (iteration/total, objective, validation error, elapsed), error, and
    ``conditions`` while it waits for a worker (none alive for its device, or its worker's
    heartbeat stopped and it is being recovered)."""
    # a plain def (the thread pool): a read waits for SQLite's writer lock up to its busy
    # timeout, and must not hold up the event loop meanwhile (issue 84). orjson serialises it.
    job = own_job(store, job_id, owner)
    live = live_workers(store, settings) if job.status in (JobStatus.QUEUED, JobStatus.RUNNING) else None
    return FastJSONResponse(job_view(job, live, settings))


@router.get("/v1/jobs/{job_id}/history", tags=["jobs"], response_model=JobHistory,
            responses=problems.responses(401, 404, 422))
def get_history(job_id: str, store: StoreDep, owner: OwnerDep,
                after: Annotated[str | None, Query(pattern=r"^(-1|[0-9]{1,15})$",
                                                   description="an integer: only iterations after this one "
                                                               "(poll with the last iteration seen)")] = None) -> dict:
    """Per-iteration records: objective, validation Err, step size, nugget, seconds."""
    # a pattern, not an int: the int parser would take "+0.0" or "1e2", which the schema refuses
    own_job(store, job_id, owner)
    return {"id": job_id, "history": store.history(job_id, None if after is None else int(after))}


# The stored documents (spec, result, distribution) go back as stored: their models document
# them, and are not applied, so a document an older release stored is served as it was, neither
# coerced (a "1" turned into 1) nor refused for a field it predates.
@router.get("/v1/jobs/{job_id}/spec", tags=["jobs"], response_class=FastJSONResponse,
            responses={200: {"model": AcceptedJobSpec}, **problems.responses(401, 404)})
def get_spec(job_id: str, store: StoreDep, owner: OwnerDep):
    """The job spec as accepted (the submitted document with lwl's defaults written in; a
    finished job's ``result.spec`` also holds the values derived from the data)."""
    own_job(store, job_id, owner)
    return FastJSONResponse(store.spec(job_id))


@router.post("/v1/jobs/{job_id}/cancel", status_code=202, tags=["jobs"], response_model=JobView,
             responses=problems.responses(401, 404, 409))
def cancel_job(job_id: str, store: StoreDep, owner: OwnerDep) -> dict:
    """Stop the job between iterations (at once when queued or awaiting labels): 202 with the
    job, ``cancel_requested: true`` (a running job shows ``running`` until its current step
    ends). A job that has ended (succeeded, failed, cancelled) cannot be cancelled: 409 naming
    its status."""
    own_job(store, job_id, owner)
    if not store.request_cancel(job_id):  # one conditional update: no race with the job's end
        status = store.get_job(job_id).status
        raise Problem(409, "Job has ended", f"the job is {status}; only a queued, running or "
                      f"awaiting_labels job can be cancelled", field="status", job_status=status)
    return job_view(store.get_job(job_id))


def no_result(job: JobRecord) -> Problem:
    """409 for a job without a result: still on its way, or ended without one (then say so)."""
    status = job.status
    if status in (JobStatus.CANCELLED, JobStatus.FAILED):
        return Problem(409, f"Job {status}", f"the job is {status}: it has no result and will have none",
                       field="status", job_status=status)
    return Problem(409, "Job has no result yet", f"the job is {status}; wait until it has succeeded "
                   f"(GET /v1/jobs/{job.id})", field="status", job_status=status)


def finished_result(job_id: str, store: Store, owner: str) -> dict:
    job = own_job(store, job_id, owner)
    if job.status != JobStatus.SUCCEEDED:
        raise no_result(job)
    return store.result(job_id)


@router.get("/v1/jobs/{job_id}/result", tags=["results"], response_class=FastJSONResponse,
            responses={200: {"model": JobResult}, **problems.responses(401, 404, 409)})
def get_result(job_id: str, store: StoreDep, owner: OwnerDep):
    """The whole result: distribution, history, evaluation, timings, spec."""
    return FastJSONResponse(finished_result(job_id, store, owner))


@router.get("/v1/jobs/{job_id}/distribution", tags=["results"], response_class=FastJSONResponse,
            responses={200: {"model": DistributionDocument}, **problems.responses(401, 404, 409)})
def get_distribution(job_id: str, store: StoreDep, owner: OwnerDep):
    """The optimised distribution spec, the document ``lwl.measures.from_spec`` reads."""
    return FastJSONResponse(finished_result(job_id, store, owner)["distribution"])


JOB_STATUS_HEADER = "LWL-Job-Status"  # the .npz training set's job status (the JSON one has it as a field)


@router.get("/v1/jobs/{job_id}/training-set", tags=["results"],
            responses={200: {"model": TrainingSet, "content": {NPZ: BINARY},
                             "headers": {JOB_STATUS_HEADER: {
                                 "description": "the job's status (queued, running, awaiting_labels, succeeded, "
                                                "failed, cancelled): only a succeeded job's points are final",
                                 "schema": {"type": "string"}}}},
                       **problems.responses(401, 404, 409)})
def get_training_set(job_id: str, request: Request, store: StoreDep, owner: OwnerDep):
    """The labelled points of a budgeted job, whatever its status: an ``.npz`` archive with arrays
    ``inputs`` (n, d) and ``labels`` (n,), or JSON with ``Accept: application/json`` (with
    ``status``, the job's; the archive's is in the ``LWL-Job-Status`` header). A succeeded job's
    are the labels its served model trains on, with ``left_out_inputs`` (m, d) and
    ``left_out_labels`` (m,), the paid labels the left-out check kept out of it: together every
    label it paid for. A job without a result (failed, cancelled, or on its way) serves the labels
    its last checkpoint holds (every round it finished), and an ask/tell job's also ``told_inputs``
    and ``told_labels``, the labels told so far for the round it was in (the oracle's rows as asked;
    not in ``inputs``). 409 for a job without a budget, and for one with no labelled point yet."""
    job = own_job(store, job_id, owner)
    status = job.status
    from lwl.design.budget.ledger import training_arrays

    if status == JobStatus.SUCCEEDED:
        result = store.result(job_id)
        if result.get("training_set") is None:
            raise no_training_set()
        arrays, rounds = training_arrays(result), result.get("rounds")
    else:
        arrays, rounds = labelled_so_far(store, job)
    headers = {JOB_STATUS_HEADER: str(status)}
    if "application/json" in request.headers.get("accept", ""):
        inputs = arrays["inputs"]
        payload = orjson.dumps({"status": str(status), "rounds": rounds, "n": int(len(arrays["labels"])),
                                "d": int(inputs.shape[1]), **arrays}, option=orjson.OPT_SERIALIZE_NUMPY)
        return Response(payload, media_type="application/json", headers=headers)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return Response(buf.getvalue(), media_type=NPZ,
                    headers={**headers, "Content-Disposition": f'attachment; filename="{job_id}-training-set.npz"'})


def no_training_set() -> Problem:
    # the job exists; its kind has no training set: a conflict with the job's state, not a missing
    # resource (schemathesis's stateful check ST302 holds 404 to that)
    return Problem(409, "No training set", "only a job with a budget returns its labelled training set",
                   field="budget")


def labelled_so_far(store: Store, job: JobRecord) -> tuple[dict[str, np.ndarray], int]:
    """(arrays, rounds taken in) of a budgeted job without a result: the points of its last
    checkpoint (written after every round: :func:`lwl.design.budget.ledger.checkpoint_arrays`),
    and for an ask/tell job ``told_inputs``, ``told_labels``: the points told so far of its current
    round while the checkpoint does not hold that round yet (its round ``ask_step`` is the
    checkpoint's ``iteration`` + 1 until the design takes it in). The checkpoint is lwl's own
    pickle-free format (:func:`lwl.design.state.unpack`). 409 when the job has no labelled point."""
    from lwl.design.budget.ledger import checkpoint_arrays
    from lwl.design.state import unpack

    spec = store.spec(job.id) or {}
    if spec.get("budget") is None:
        raise no_training_set()
    blob = store.get_job(job.id, full=True).checkpoint
    flat = unpack(blob) if blob is not None else {}
    arrays = checkpoint_arrays(flat) if flat else None
    rounds = int(flat.get("iteration", 0)) if flat else 0
    told_x, told_y = [], []
    if job.ask_step > rounds:  # an ask/tell round the checkpoint does not hold yet
        for batch in store.step_batches(job.id, job.ask_step):
            outcomes, labels = batch.point_state()
            keep = outcomes == PointOutcome.LABELLED
            if keep.any():
                told_x.append(np.load(io.BytesIO(batch.inputs), allow_pickle=False)[keep])
                told_y.append(np.asarray(labels, dtype=np.float64)[keep])
    if arrays is None and not told_x:
        if job.status in TERMINAL:
            detail = (f"the job is {job.status}: it ended before any label of its first round came back, so it "
                      f"has no labelled point (and will have none)")
        else:
            detail = (f"the job is {job.status} and no label of its first round has come back yet: its labelled "
                      f"points are served from the end of that round (an ask/tell job's as they are told)")
        raise Problem(409, "No labelled point", detail, field="status", job_status=job.status)
    if arrays is None:  # only told points yet (the first round's)
        d, width = told_x[0].shape[1], told_y[0].shape[1:]
        arrays = {"inputs": np.zeros((0, d)), "labels": np.zeros((0, *width)),
                  "left_out_inputs": np.zeros((0, d)), "left_out_labels": np.zeros((0, *width))}
    if (spec.get("oracle") or {}).get("name") == "external":  # an ask/tell job: told_* always, empty or not
        d = told_x[0].shape[1] if told_x else arrays["inputs"].shape[1]
        width = told_y[0].shape[1:] if told_y else arrays["labels"].shape[1:]
        arrays["told_inputs"] = np.concatenate(told_x) if told_x else np.zeros((0, d))
        arrays["told_labels"] = np.concatenate(told_y) if told_y else np.zeros((0, *width))
    return arrays, rounds


@router.post("/v1/jobs/{job_id}/samples", tags=["results"],
             responses={200: {"model": Samples, "content": {NPY: BINARY}},
                        **problems.responses(400, 401, 404, 409, 413, 415, 422)})
def post_samples(job_id: str, body: SampleRequest, request: Request, store: StoreDep, owner: OwnerDep,
                 settings: SettingsDep, measure_for: MeasuresDep):
    """``n`` samples of the optimised distribution from ``seed``: JSON, or ``.npy`` bytes
    with ``Accept: application/x-npy`` (streamed)."""
    job = own_job(store, job_id, owner)
    if job.status != JobStatus.SUCCEEDED:
        raise no_result(job)
    measure = measure_for(job_id)
    floats = body.n * measure.dim
    if floats > settings.max_samples:
        raise Problem(422, "Too many samples", f"n * d must be at most {settings.max_samples}", field="n")
    npy = NPY in request.headers.get("accept", "")
    # a plain def: the store reads and the draw run in the thread pool, never on the event loop
    return samples_response(job_id, measure, body, npy)


def total_steps(spec) -> int:
    """The progress total a new job shows: its iterations, or a budgeted job's rounds."""
    if spec.budget is None:
        return spec.algorithm.iterations
    from lwl.design.budget import plan_budget

    return plan_budget(spec).total_rounds


def initial_progress(spec) -> dict:
    """A new job's progress: nothing done, no label used; a budgeted job's budget and round from
    the start, as its later progress carries them."""
    out = {"iteration": 0, "total": total_steps(spec), "labels_used": 0}
    if spec.budget is not None:
        out.update(budget=spec.budget, labels_failed=0, round=0)
    return out


@dataclass(frozen=True)
class Liveness:
    """What a job's conditions are judged against: the live workers, and the store's clock
    when they were read (heartbeats are stamped on it, not on this host's clock)."""

    workers: list[WorkerRecord]
    now: float


def live_workers(store: Store, settings) -> Liveness:
    return Liveness(store.list_workers(within=settings.stale_seconds), store.now())


def conditions(job: JobRecord, live: Liveness, settings) -> list[dict]:
    """Why a job is not moving, in words: no live worker takes its queue, or its worker went
    silent and the reaper will resume it from its checkpoint."""
    out = []
    queue = job.queue or QUEUE_CPU
    if job.status == JobStatus.QUEUED and not any(queue in w.queues for w in live.workers):
        device = DEVICE_OF_QUEUE.get(queue, queue)
        out.append({"type": "NoLiveWorker", "queue": queue,
                    "message": f"no live worker takes queue {queue} ({'GPU' if device == 'cuda' else 'CPU'} "
                               f"jobs); the job waits until one starts (lwl worker --device {device})"})
    beat = job.heartbeat_at
    if job.status == JobStatus.RUNNING and beat is not None:
        silent = live.now - beat
        if silent > 2.5 * settings.heartbeat_seconds:
            out.append({"type": "WaitingForRecovery", "silent_seconds": round(silent, 1),
                        "attempts": job.attempts,
                        "message": f"its worker has not reported for {silent:.0f} s; the job resumes from its "
                                   f"last checkpoint on another worker once {settings.stale_seconds:g} s have "
                                   f"passed (slices started so far: {job.attempts})"})
    return out


def job_view(job: JobRecord, live: Liveness | None = None, settings=None) -> dict:
    """The job as the API shows it (:class:`service.schemas.JobView`), serialised by orjson
    on the polling path; ``conditions`` only with the live workers and the settings."""
    out = {k: getattr(job, k) for k in ("id", "status", "created_at", "updated_at", "started_at", "finished_at",
                                        "progress", "error", "attempts", "worker", "kind", "queue")}
    out["cancel_requested"] = job.cancel_requested
    out["conditions"] = conditions(job, live, settings) if live is not None and settings is not None else []
    progress = job.progress or {}
    # a finished bilevel job: held-out Err against the baselines, and anything the user must know
    out["verdict"] = progress.get("verdict")
    out["warnings"] = progress.get("warnings", [])
    links = [("self", ""), ("history", "/history"), ("spec", "/spec"), ("distribution", "/distribution"),
             ("result", "/result"), ("samples", "/samples"), ("cancel", "/cancel")]
    if "budget" in progress:  # only a budgeted job has a training set to link to
        links.append(("training_set", "/training-set"))
    out["links"] = {rel: f"/v1/jobs/{job.id}{suffix}" for rel, suffix in links}
    return out


def check_datasets(spec, store: Store, owner: str) -> None:
    """The library's dataset checks (:func:`lwl.q_samples.check_datasets`) against the owner's
    datasets, before anything is stored or queued, not after the design ran."""
    from lwl.q_samples import DatasetError
    from lwl.q_samples import check_datasets as check

    def shape_of(ref: str):
        meta = store.get_dataset(ref, owner)
        return None if meta is None else tuple(meta.shape)

    try:
        check(spec, shape_of, lambda ref: store.load_dataset(ref, owner))
    except DatasetError as exc:
        raise Problem(422, exc.title, exc.detail, field=exc.field) from None


def samples_response(job_id: str, measure, body: SampleRequest, npy: bool) -> Response:
    x = measure.sample(body.n, body.seed)
    if npy:
        headers = {"Content-Disposition": f'attachment; filename="{job_id}-{body.seed}.npy"'}
        if x.nbytes > STREAM_ABOVE:  # large arrays go out in chunks
            return StreamingResponse(_npy_chunks(x), media_type=NPY, headers=headers)
        return Response(_npy_header(x) + x.tobytes(), media_type=NPY, headers=headers)
    # orjson writes the float64 array directly (shortest round-trip repr, so the JSON numbers
    # parse back to the same bits); json.dumps of x.tolist() was 20x slower
    payload = orjson.dumps({"n": body.n, "d": measure.dim, "seed": body.seed, "samples": x},
                           option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(payload, media_type="application/json")


def _npy_header(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(x))
    return buf.getvalue()


def _npy_chunks(x: np.ndarray, chunk: int = 1 << 20):
    yield _npy_header(x)
    data = memoryview(np.ascontiguousarray(x)).cast("B")
    for i in range(0, len(data), chunk):
        yield bytes(data[i:i + chunk])
