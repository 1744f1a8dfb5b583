"""The trained surrogate of a budgeted job, served: its model document and its predictions
(docs/service.md "The trained model"). The numbers are those of
``lwl.models.from_spec(GET /v1/jobs/{id}/model).predict(x, return_std=True)``: the route
rebuilds the model from the same document."""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

import numpy as np
import orjson
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lwl.models import from_spec, model_document
from service import problems
from service.deps import OwnerDep, SettingsDep, StoreDep, own_job, parse_json, read_body, read_npy_body
from service.jsonresponse import FastJSONResponse
from service.problems import Problem
from service.routers.jobs import NPY, finished_result
from service.schemas import OpenDocument

router = APIRouter(responses=problems.STORE)  # every operation here reads or writes the store
BINARY = {"schema": {"type": "string", "format": "binary"}}
CACHED_MODELS = 8  # models kept factored between requests, at most
# and at most this many bytes of them (a GP's Cholesky factor is n^2 floats: 0.5 GB at 8,000 labels, 3.2 GB at 20,000)
CACHED_MODEL_BYTES = 2 * 1024**3


class ModelDocument(OpenDocument):
    """A trained model: the document ``lwl.models.from_spec`` turns back into it. A ``gp``
    carries ``outputs`` (per output: ``lengthscale`` per input, ``output_scale``, ``noise``,
    ``mean``), a ``krr`` its ``lengthscale`` and ``sigma2``; both condition on the
    ``training_set``. A ``deeponet`` (an operator job's) carries ``branch`` and ``trunk`` widths,
    ``query_points`` and ``weights`` (base64 float32 per tensor, with shapes); its training set
    is there for reference. An ``amino`` (an EIT interval search's) carries its sizes, ``pairs`` L,
    ``input_dim`` (rows of L frequencies and their Neumann data) and ``weights``; it predicts the
    conductivity on the grid."""

    kind: str = Field(description='"lwl.model"')
    version: int = Field(description="version of the model document format")
    model: str = Field(description="gp | krr | deeponet | amino (GET /v1/catalog lists the models)")
    kernel: str | None = Field(default=None, description="the kernel of a gp or krr; null for a deeponet")
    training_set: dict = Field(description='{"inputs": (n, d), "labels": (n,) or (n, Q) fields}')


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: list[list[float]] = Field(min_length=1, description="(m, d) points, d the job's input dimension")


class Prediction(BaseModel):
    """The JSON variant of ``POST /v1/jobs/{id}/predict``."""
    n: int
    d: int
    outputs: int = Field(description="values per prediction: 1, or Q for a field (a deeponet's query points)")
    mean: list[float] | list[list[float]] = Field(description="(m,) posterior mean, or (m, Q) predicted fields")
    std: list[float] | None = Field(description="(m,) standard deviation of a new measurement at each input "
                                                "(the latent function's plus the fitted noise, as scikit-learn's "
                                                "with a WhiteKernel: the error bar a label taken there falls "
                                                "within; see the model document's ``std``); null for a model "
                                                "without one (deeponet)")
    latent_std: list[float] | None = Field(default=None, description="(m,) standard deviation of the latent "
                                                                     "function alone (without the noise); null "
                                                                     "for a model without one")


def job_model_document(job_id: str, store, owner: str) -> dict:
    """The model document of a succeeded job, or 409 naming why it has none."""
    result = finished_result(job_id, store, owner)
    doc = model_document(result)
    if doc is None and "training_set" in result:  # budgeted, with no model document (a fit that failed)
        name = ((result.get("spec") or {}).get("model") or {}).get("name")
        fallback = result.get("model_fallback") or {}
        why = (f": its fit failed ({fallback['error']}; the result's model_fallback)" if fallback.get("error")
               else f" ({fallback['reason']})" if fallback.get("reason") else "")
        raise Problem(409, "Model not served", f"this budgeted job serves no {name} model{why}; its labelled "
                      f"training set is (GET /v1/jobs/{job_id}/training-set)", field="model.name")
    if doc is None:
        raise Problem(409, "No model", "only a job with a budget returns a trained model (its training set and the "
                      "model trained on it)", field="budget")
    return doc


_cache: OrderedDict[str, tuple[object, int]] = OrderedDict()
_lock = Lock()


def model_bytes(model) -> int:
    """The bytes a loaded model holds in its tensors and arrays (a GP: its factors, its training set)."""
    import torch

    total = 0
    for value in vars(model).values():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, torch.Tensor):
                total += v.element_size() * v.nelement()
            elif isinstance(v, np.ndarray):
                total += v.nbytes
    return total


def _model(job_id: str, doc: dict):
    """The job's model, factored once and kept for the next requests (a result never changes):
    the least recently used are dropped past :data:`CACHED_MODELS` models or
    :data:`CACHED_MODEL_BYTES` bytes, the newest always kept (one model larger than that stays alone)."""
    with _lock:
        if job_id in _cache:
            _cache.move_to_end(job_id)
            return _cache[job_id][0]
    model = from_spec(doc)
    size = model_bytes(model)
    with _lock:
        _cache[job_id] = (model, size)
        # the newest is always kept (a model larger than the bound alone is not factored again per request)
        while len(_cache) > 1 and (len(_cache) > CACHED_MODELS or sum(b for _, b in _cache.values()) > CACHED_MODEL_BYTES):
            _cache.popitem(last=False)
    return model


@router.get("/v1/jobs/{job_id}/model", tags=["results"], response_class=FastJSONResponse,
            responses={200: {"model": ModelDocument}, **problems.responses(401, 404, 409)})
def get_model(job_id: str, store: StoreDep, owner: OwnerDep):
    """The trained model of a budgeted job as a versioned document: kernel, hyperparameters and
    the training set it conditions on. ``lwl.models.from_spec(doc).predict(x, return_std=True)``
    gives ``POST /predict``'s numbers anywhere."""
    return FastJSONResponse(job_model_document(job_id, store, owner))


@router.post("/v1/jobs/{job_id}/predict", tags=["results"],
             responses={200: {"model": Prediction, "content": {NPY: BINARY}},
                        **problems.responses(400, 401, 404, 409, 413, 415, 422)},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": {"$ref": "#/components/schemas/PredictRequest"}},
                 NPY: BINARY}}})
async def post_predict(job_id: str, request: Request, store: StoreDep, owner: OwnerDep, settings: SettingsDep):
    """Posterior mean and standard deviation of the job's trained model at ``inputs``: JSON
    ``{"inputs": [[...], ...]}`` or ``.npy`` bytes of an (m, d) array (``Content-Type:
    application/x-npy``). The answer is JSON ``{"n", "d", "outputs", "mean", "std"}``, or with
    ``Accept: application/x-npy`` an (m, 2) ``.npy`` array whose columns are mean and std. An
    operator job's DeepONet predicts fields: ``mean`` is (m, Q), ``std`` null, and the ``.npy``
    answer is the (m, Q) array of fields (header ``LWL-Std: none``)."""
    await run_in_threadpool(own_job, store, job_id, owner)  # the store, off the event loop (issue 84)
    raw = await read_body(request, settings.max_body_bytes)
    return await run_in_threadpool(_predict_response, job_id, raw, request.headers, store, owner, settings)


def _predict_response(job_id: str, raw: bytes, headers, store, owner: str, settings) -> Response:
    """The blocking part of ``POST /predict``: parse the inputs, read the job's model document
    from the store and predict (in the thread pool)."""
    if headers.get("content-type", "").startswith(NPY):
        x = read_npy_body(raw, settings.max_body_bytes, "inputs")
    else:
        try:
            x = PredictRequest.model_validate(parse_json(raw)).inputs
        except ValidationError as exc:
            errs = [(".".join(str(p) for p in e["loc"]) or "(body)", e["msg"]) for e in exc.errors()]
            raise problems.spec_problem(errs, "Invalid inputs") from None
        if len({len(row) for row in x}) > 1:
            raise Problem(422, "Ragged inputs", "every row of inputs must have the same length", field="inputs")
    x = np.asarray(x, dtype=np.float64)
    doc = job_model_document(job_id, store, owner)
    # a model whose inputs are not its training points' (an AMINO: frequencies and Neumann data) says its own
    d = int(doc.get("input_dim") or np.asarray(doc["training_set"]["inputs"]).shape[1])
    if x.ndim == 1 and d == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] != d:
        raise Problem(422, "Wrong input dimension", f"inputs must be an (m, {d}) array (the job's input dimension "
                      f"is {d}); got shape {list(x.shape)}", field="inputs")
    if not np.all(np.isfinite(x)):
        raise Problem(422, "Non-finite inputs", "inputs must be finite numbers", field="inputs")
    if x.size > settings.max_samples:
        raise Problem(422, "Too many inputs", f"m * d must be at most {settings.max_samples}", field="inputs")
    mean, std, latent = _predict(_model(job_id, doc), x)
    mean = np.asarray(mean, dtype=np.float64).reshape(len(x), -1)
    outputs = mean.shape[1]
    if std is not None:
        std = np.asarray(std, dtype=np.float64).reshape(len(x))
        latent = None if latent is None else np.asarray(latent, dtype=np.float64).reshape(len(x))
    if std is not None:  # a scalar model: (m,) means beside (m,) stds; a field model keeps (m, Q)
        mean = mean[:, 0]
    if NPY in headers.get("accept", ""):
        from service.routers.jobs import _npy_header

        out = np.ascontiguousarray(mean if std is None else np.stack([mean, std], 1))
        return Response(_npy_header(out) + out.tobytes(), media_type=NPY,
                        headers={"LWL-Std": "none" if std is None else "column"})
    return Response(orjson.dumps({"n": int(len(x)), "d": d, "outputs": int(outputs), "mean": mean, "std": std,
                                  "latent_std": latent}, option=orjson.OPT_SERIALIZE_NUMPY),
                    media_type="application/json")


def _predict(model, x: np.ndarray):
    """(mean, std, latent std) of a served model: a GP's std is a new measurement's and its latent
    std f's alone (one pass); another model's std is what its ``predict`` gives, with no latent
    std apart from it."""
    if hasattr(model, "predict_stds"):
        return model.predict_stds(x)
    mean, std = model.predict(x, return_std=True)
    return mean, std, None
