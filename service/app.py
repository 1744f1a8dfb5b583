"""The FastAPI application: validates, stores, enqueues, reads back. No algorithm code.

Routes are thin: parsing and validation come from :mod:`lwl.spec`, state from
:class:`service.store.Store`, work goes to the queue as one message per job slice.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from functools import lru_cache
from typing import Annotated, Any, Callable, Literal

import numpy as np
import orjson
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import ORJSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import lwl
from lwl.measures import from_spec
from lwl.spec import SpecError, parse_job_spec
from service import problems
from service.metrics import Metrics
from service.problems import Problem
from service.settings import Settings, get_settings
from service.store import STATUSES, IdempotencyConflict, Store

NPY = "application/x-npy"
STREAM_ABOVE = 8 * 1024 * 1024  # bytes of samples sent in one piece below this
INLINE_FLOATS = 1_000_000  # sampling requests up to this size run on the event loop


class SampleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # "n": "5" is refused, not coerced
    n: int = Field(ge=1, description="number of samples")
    seed: int = Field(ge=0, lt=2**63, description="same seed, same samples as lwl.measures.from_spec(doc).sample(n, seed)")


class LabelsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    batch_id: str = Field(max_length=64)
    labels: list[float] = Field(description="one label per input of the batch, in order")


class JobCreated(BaseModel):
    id: str
    status: str


# -- dependencies -------------------------------------------------------------------------------
def store_dep(request: Request) -> Store:
    return request.app.state.store


def settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def owner_dep(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    """The owner of the request: from ``Authorization: Bearer KEY`` when keys are configured."""
    keys = request.app.state.keys
    if not keys:
        return "local"
    scheme, _, token = (authorization or "").partition(" ")
    owner = keys.get(token.strip()) if scheme.lower() == "bearer" else None
    if owner is None:
        raise Problem(401, "Unauthorized", "send Authorization: Bearer <api key>",
                      headers={"WWW-Authenticate": "Bearer"})
    return owner


StoreDep = Annotated[Store, Depends(store_dep)]
OwnerDep = Annotated[str, Depends(owner_dep)]
SettingsDep = Annotated[Settings, Depends(settings_dep)]


def own_job(store: Store, job_id: str, owner: str) -> dict:
    job = store.get_job(job_id, owner)
    if job is None:  # another owner's job is indistinguishable from a missing one
        raise Problem(404, "Job not found", f"no job {job_id!r}", field="id")
    return job


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Problem(413, "Request body too large", f"the limit is {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(413, "Request body too large", f"the limit is {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


MAX_JSON_DEPTH = 64  # a job spec nests about 6 levels deep


def parse_json(raw: bytes) -> Any:
    """JSON text to Python; NaN/Infinity literals parse here so that validation can refuse
    them with the field named. Documents nested deeper than MAX_JSON_DEPTH are refused with 400
    (the parser's own recursion limit would otherwise surface as a 500)."""
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Problem(400, "Malformed JSON", str(exc)) from None
    except RecursionError:
        raise Problem(400, "JSON nested too deeply", f"at most {MAX_JSON_DEPTH} levels of arrays and objects") from None
    if json_depth(doc) > MAX_JSON_DEPTH:
        raise Problem(400, "JSON nested too deeply", f"at most {MAX_JSON_DEPTH} levels of arrays and objects")
    return doc


def json_depth(doc: Any) -> int:
    """Nesting depth of arrays and objects, without recursion."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node)
                         if isinstance(child, (list, dict)))
    return deepest


def job_view(job: dict) -> dict:
    out = {k: job.get(k) for k in ("id", "status", "created_at", "updated_at", "started_at", "finished_at",
                                    "progress", "error", "attempts", "worker")}
    progress = job.get("progress") or {}
    # a finished bilevel job: held-out Err against the baselines, and anything the user must know
    out["verdict"] = progress.get("verdict")
    out["warnings"] = progress.get("warnings", [])
    out["links"] = {rel: f"/v1/jobs/{job['id']}{suffix}" for rel, suffix in
                    (("self", ""), ("history", "/history"), ("distribution", "/distribution"),
                     ("result", "/result"), ("samples", "/samples"), ("cancel", "/cancel"))}
    return out


def check_datasets(spec, store: Store, owner: str) -> None:
    """Every dataset a spec names exists, belongs to the owner and has a usable shape."""
    tests = spec.test_distributions
    for k, m in enumerate(tests.members):
        if m.dataset is None:
            continue
        field = f"test_distributions.members.{k}.dataset"
        meta = store.get_dataset(m.dataset, owner)
        if meta is None:
            raise Problem(422, "Unknown dataset", f"no dataset {m.dataset!r}", field=field)
        shape = meta["shape"]
        if len(shape) != 2 or shape[1] != spec.dim:
            raise Problem(422, "Dataset has the wrong shape",
                          f"expected an (M, {spec.dim}) array, dataset has shape {tuple(shape)}", field=field)
        if shape[0] <= tests.validation_per_member:
            raise Problem(422, "Dataset too small", f"{shape[0]} rows leave none held out after "
                          f"validation_per_member={tests.validation_per_member}", field=field)


def load_array(raw: bytes) -> np.ndarray:
    """A dataset upload: .npy bytes, or .npz with exactly one array. Never unpickles."""
    try:
        data = np.load(io.BytesIO(raw), allow_pickle=False)
        if isinstance(data, np.lib.npyio.NpzFile):
            if len(data.files) != 1:
                raise ValueError(f"an .npz upload must hold exactly one array, found {len(data.files)}")
            data = data[data.files[0]]
        if not isinstance(data, np.ndarray):  # an .npz member that is not an .npy array
            raise ValueError("the archive member is not an .npy array")
    except Exception as exc:
        raise Problem(400, "Unreadable dataset", f"expected .npy or .npz bytes: {exc}") from None
    if data.dtype.kind not in "fiu":
        raise Problem(422, "Dataset must be numeric", f"dtype {data.dtype} is not a real number type")
    arr = np.asarray(data, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise Problem(422, "Dataset has the wrong shape", f"expected a non-empty (M, d) array, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise Problem(422, "Dataset has non-finite values", "NaN or infinite entries")
    return arr


def catalog() -> dict:
    import inspect

    from lwl.oracles.base import _REGISTRY
    from lwl.spec import (AMASpec, BilevelSpec, DeepONetSpec, EvaluationSpec, GaussianFamilySpec, JobSpec,
                          KLEFamilySpec, KRRSpec, MixtureFamilySpec, ParticleAMASpec, ParticlesFamilySpec)

    oracles = []
    for name, cls in sorted(_REGISTRY.items()):
        params = {p.name: (None if p.default is inspect.Parameter.empty else p.default)
                  for p in list(inspect.signature(cls.__init__).parameters.values())[1:]}
        oracles.append({"name": name, "min_dim": cls.min_dim, "params": params,
                        "doc": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""})
    return {
        "oracles": oracles,
        "families": [{"name": "gaussian", "schema": GaussianFamilySpec.model_json_schema()},
                     {"name": "mixture", "schema": MixtureFamilySpec.model_json_schema()},
                     {"name": "kle", "schema": KLEFamilySpec.model_json_schema()},
                     {"name": "particles", "schema": ParticlesFamilySpec.model_json_schema()}],
        "models": [{"name": "krr", "schema": KRRSpec.model_json_schema()},
                   {"name": "deeponet", "schema": DeepONetSpec.model_json_schema()}],
        "algorithms": [{"name": "bilevel", "schema": BilevelSpec.model_json_schema()},
                       {"name": "ama", "schema": AMASpec.model_json_schema()},
                       {"name": "particle_ama", "schema": ParticleAMASpec.model_json_schema()}],
        "evaluation": EvaluationSpec.model_json_schema(),
        "job_spec": JobSpec.model_json_schema(),
    }


# -- the application ----------------------------------------------------------------------------
def create_app(settings: Settings | None = None, store: Store | None = None,
               enqueue: Callable[[str, int], None] | None = None,
               broker_check: Callable[[], None] | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="lwl", version=lwl.__version__,
                  description="Training-data distribution design for scientific machine learning "
                              "(learning where to learn). Errors are application/problem+json.")
    app.state.settings = settings
    app.state.keys = settings.owners_by_key()
    if store is None or enqueue is None:
        from service.queue import make_celery, sender

        celery = make_celery(settings)
        enqueue = enqueue or sender(celery)

        def broker_check():  # noqa: F811
            with celery.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)

    app.state.store = store or Store(settings.resolved_database_url())
    app.state.enqueue = enqueue
    app.state.broker_check = broker_check
    metrics = Metrics(app.state.store)
    app.state.metrics = metrics
    problems.install(app)

    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict:
        """The process is alive."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"])
    def readyz(request: Request):
        """The job store and the broker are reachable."""
        checks = {}
        for name, check in (("store", app.state.store.ping), ("broker", app.state.broker_check)):
            try:
                if check is not None:
                    check()
                checks[name] = "ok"
            except Exception as exc:
                checks[name] = f"unreachable: {type(exc).__name__}"
        if any(v != "ok" for v in checks.values()):
            raise Problem(503, "Not ready", json.dumps(checks), checks=checks)
        return {"status": "ready", "checks": checks}

    @app.get("/metrics", tags=["ops"])
    def prometheus() -> Response:
        """Prometheus metrics: requests, job counts by state, iteration durations."""
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/v1/catalog", tags=["catalog"])
    def get_catalog(owner: OwnerDep) -> dict:
        """Oracles, families, models and algorithms with their parameter schemas."""
        return _catalog()

    @app.post("/v1/jobs", status_code=202, response_model=JobCreated, tags=["jobs"],
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}}}}})
    async def create_job(request: Request, response: Response, store: StoreDep, owner: OwnerDep,
                         idempotency_key: Annotated[str | None, Header(max_length=200)] = None) -> dict:
        """Submit a job spec (the JSON ``lwl run`` takes). 202 with ``Location``."""
        raw = await read_body(request, settings.max_body_bytes)
        doc = parse_json(raw)
        try:
            spec = parse_job_spec(doc)
        except SpecError as exc:
            raise problems.spec_problem(exc.errors) from None
        check_datasets(spec, store, owner)
        canonical = spec.model_dump(mode="json")
        digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
        try:
            job, created = store.create_job(owner, canonical, spec.algorithm.iterations, idempotency_key, digest)
        except IdempotencyConflict:
            raise Problem(409, "Idempotency key reused", "this Idempotency-Key was used with another body",
                          field="Idempotency-Key") from None
        if created:
            try:
                app.state.enqueue(job["id"], 0)
            except Exception as exc:  # nothing half-made stays behind
                store.delete_job(job["id"])
                raise Problem(503, "Queue unavailable", f"could not enqueue the job: {type(exc).__name__}") from None
        response.headers["Location"] = f"/v1/jobs/{job['id']}"
        return {"id": job["id"], "status": job["status"]}

    @app.get("/v1/jobs", tags=["jobs"])
    def list_jobs(store: StoreDep, owner: OwnerDep,
                  status: Annotated[Literal[STATUSES] | None, Query()] = None,  # type: ignore[valid-type]
                  limit: Annotated[int, Query(ge=1, le=500)] = 50,
                  cursor: Annotated[str | None, Query(max_length=200)] = None) -> dict:
        """The owner's jobs, newest first; pass ``next_cursor`` back as ``cursor`` for more."""
        before = None
        if cursor:
            ts, _, jid = cursor.partition("_")
            try:
                before = (float(ts), jid)
            except ValueError:
                raise Problem(400, "Bad cursor", "use the next_cursor of a previous page", field="cursor") from None
        rows = store.list_jobs(owner, status, limit + 1, before)
        items = [job_view(r) for r in rows[:limit]]
        nxt = f"{rows[limit - 1]['created_at']!r}_{rows[limit - 1]['id']}" if len(rows) > limit else None
        return {"items": items, "next_cursor": nxt}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], response_class=ORJSONResponse)
    async def get_job(job_id: str, store: StoreDep, owner: OwnerDep):
        """Status, progress (iteration/total, objective, validation error, elapsed) and error."""
        # async and serialised by orjson: the hot polling path skips the thread pool and
        # FastAPI's encoder; the indexed primary-key read takes well under a millisecond
        return ORJSONResponse(job_view(own_job(store, job_id, owner)))

    @app.get("/v1/jobs/{job_id}/history", tags=["jobs"])
    def get_history(job_id: str, store: StoreDep, owner: OwnerDep) -> dict:
        """Per-iteration records: objective, validation Err, step size, nugget, seconds."""
        own_job(store, job_id, owner)
        return {"id": job_id, "history": store.history(job_id)}

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, tags=["jobs"])
    def cancel_job(job_id: str, store: StoreDep, owner: OwnerDep) -> dict:
        """Stop the job between iterations (at once when still queued)."""
        job = own_job(store, job_id, owner)
        if job["status"] not in ("succeeded", "failed", "cancelled"):
            store.request_cancel(job_id)
        return job_view(store.get_job(job_id))

    def finished_result(job_id: str, store: Store, owner: str) -> dict:
        job = own_job(store, job_id, owner)
        if job["status"] != "succeeded":
            raise Problem(409, "Job has no result yet", f"the job is {job['status']}", status_text=job["status"])
        return store.result(job_id)

    @app.get("/v1/jobs/{job_id}/result", tags=["results"])
    def get_result(job_id: str, store: StoreDep, owner: OwnerDep) -> dict:
        """The whole result: distribution, history, evaluation, timings, spec."""
        return finished_result(job_id, store, owner)

    @app.get("/v1/jobs/{job_id}/distribution", tags=["results"])
    def get_distribution(job_id: str, store: StoreDep, owner: OwnerDep) -> dict:
        """The optimised distribution spec, the document ``lwl.measures.from_spec`` reads."""
        return finished_result(job_id, store, owner)["distribution"]

    @lru_cache(maxsize=256)
    def measure_for(job_id: str):  # results never change once a job succeeded
        return from_spec(app.state.store.result(job_id)["distribution"])

    @app.post("/v1/jobs/{job_id}/samples", tags=["results"],
              responses={200: {"content": {"application/json": {}, NPY: {}}}})
    async def post_samples(job_id: str, body: SampleRequest, request: Request, store: StoreDep, owner: OwnerDep):
        """``n`` samples of the optimised distribution from ``seed``: JSON, or ``.npy`` bytes
        with ``Accept: application/x-npy`` (streamed)."""
        job = own_job(store, job_id, owner)
        if job["status"] != "succeeded":
            raise Problem(409, "Job has no result yet", f"the job is {job['status']}")
        measure = measure_for(job_id)
        floats = body.n * measure.dim
        if floats > settings.max_samples:
            raise Problem(422, "Too many samples", f"n * d must be at most {settings.max_samples}", field="n")
        npy = NPY in request.headers.get("accept", "")
        # small draws (a few ms) run on the event loop; large ones in the thread pool
        if floats <= INLINE_FLOATS:
            return samples_response(job_id, measure, body, npy)
        return await run_in_threadpool(samples_response, job_id, measure, body, npy)

    @app.get("/v1/jobs/{job_id}/queries", tags=["ask/tell"],
             responses={200: {"content": {"application/json": {}, NPY: {}}}})
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

    @app.post("/v1/jobs/{job_id}/labels", tags=["ask/tell"],
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"$ref": "#/components/schemas/LabelsRequest"}},
                  NPY: {"schema": {"type": "string", "format": "binary"}}}}})
    async def post_labels(job_id: str, request: Request, store: StoreDep, owner: OwnerDep,
                          batch_id: Annotated[str | None, Query(max_length=64)] = None) -> dict:
        """Labels for one batch: JSON ``{"batch_id", "labels"}``, or ``.npy`` bytes with
        ``?batch_id=``. The job resumes on any worker once its round is complete. Posting the
        same labels again is harmless; partial batches, wrong shapes, non-finite values and
        stale or unknown batch ids are refused and change nothing."""
        job = own_job(store, job_id, owner)
        raw = await read_body(request, settings.max_body_bytes)
        if request.headers.get("content-type", "").startswith(NPY):
            if batch_id is None:
                raise Problem(422, "Missing batch id", "send ?batch_id= with .npy labels", field="batch_id")
            try:
                labels = np.load(io.BytesIO(raw), allow_pickle=False)
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
            app.state.enqueue(job_id, generation)
        return {"batch_id": batch_id, "outcome": outcome,
                "pending_batches": len(store.pending_batches(job_id)), "status": store.get_job(job_id)["status"]}

    @app.post("/v1/datasets", status_code=201, tags=["datasets"],
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
    async def upload_dataset(request: Request, response: Response, store: StoreDep, owner: OwnerDep) -> dict:
        """Upload an (M, d) array as ``.npy`` or single-array ``.npz`` bytes; a job spec then
        names it with ``{"dataset": id}``."""
        raw = await read_body(request, settings.max_dataset_bytes)
        meta = store.put_dataset(owner, load_array(raw))
        response.headers["Location"] = f"/v1/datasets/{meta['id']}"
        return _dataset_view(meta)

    @app.get("/v1/datasets/{dataset_id}", tags=["datasets"])
    def get_dataset(dataset_id: str, store: StoreDep, owner: OwnerDep) -> dict:
        meta = store.get_dataset(dataset_id, owner)
        if meta is None:
            raise Problem(404, "Dataset not found", f"no dataset {dataset_id!r}", field="id")
        return _dataset_view(meta)

    def openapi_with_job_spec() -> dict:
        """The generated schema, with the job spec (read from the raw body) as a component."""
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            from lwl.spec import JobSpec

            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            spec = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
            comps = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, sub in spec.pop("$defs", {}).items():
                comps.setdefault(name, sub)
            comps["JobSpec"] = spec
            comps["LabelsRequest"] = LabelsRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi_with_job_spec
    return app


@lru_cache(maxsize=1)
def _catalog() -> dict:
    return catalog()


class MetricsMiddleware:
    """Counts requests and latencies per route (plain ASGI: no per-request task overhead)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            self.metrics.observe(scope["method"], getattr(route, "path", "unmatched"), status[0],
                                 time.perf_counter() - t0)


def _dataset_view(meta: dict) -> dict:
    return {"id": meta["id"], "shape": meta["shape"], "dtype": meta["dtype"], "created_at": meta["created_at"]}


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
