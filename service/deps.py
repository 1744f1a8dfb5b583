"""What the routers depend on: the store, the settings, the owner of a request, the queue, the
sampler cache, and the request-body readers. Routers take these as typed dependencies
(``StoreDep``, ``OwnerDep``, ...); :func:`service.app.create_app` puts the objects on
``app.state``."""

from __future__ import annotations

import json
from typing import Annotated, Any, Callable

import numpy as np
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lwl.arrays import ArrayTooLarge, read_npy_bytes
from service.core.settings import Settings
from service.core.store import JobRecord, Store
from service.guard import UNAUTHORIZED, owner_for_key
from service.problems import Problem

def store_dep(request: Request) -> Store:
    return request.app.state.store


def settings_dep(request: Request) -> Settings:
    return request.app.state.settings


_bearer = HTTPBearer(auto_error=False, description="an API key of LWL_API_KEYS; a service started without "
                                                   "keys (loopback only) needs none")


def owner_dep(request: Request,
              credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)] = None) -> str:
    """The owner of the request: from ``Authorization: Bearer KEY`` when keys are configured."""
    keys = request.app.state.keys
    if not keys:
        return "local"
    owner = owner_for_key(keys, credentials.credentials.strip()) if credentials is not None else None
    if owner is None:  # service.guard refused it already; kept for apps built without the guard
        raise Problem(401, "Unauthorized", UNAUTHORIZED,
                      headers={"WWW-Authenticate": "Bearer"})
    return owner


def metrics_dep(request: Request,
                credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)] = None) -> None:
    """GET /metrics: open when LWL_METRICS_PUBLIC is true (the default, for a scraper on a private
    network), else any owner's bearer key."""
    if not request.app.state.settings.metrics_public:
        owner_dep(request, credentials)


StoreDep = Annotated[Store, Depends(store_dep)]
OwnerDep = Annotated[str, Depends(owner_dep)]
SettingsDep = Annotated[Settings, Depends(settings_dep)]


def enqueue_dep(request: Request) -> Callable[[str, int], None]:
    """Send one job slice (job id, generation) to the workers."""
    return request.app.state.enqueue


def measures_dep(request: Request) -> Callable[[str], Any]:
    """job id -> the succeeded job's distribution as a sampler (cached per app)."""
    return request.app.state.measure_for


EnqueueDep = Annotated[Callable[[str, int], None], Depends(enqueue_dep)]
MeasuresDep = Annotated[Callable[[str], Any], Depends(measures_dep)]


def own_job(store: Store, job_id: str, owner: str) -> JobRecord:
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


def read_npy_body(raw: bytes, limit: int, field: str) -> np.ndarray:
    """A request body of ``.npy`` bytes (an ``.npz`` is refused) as a numeric array, the problems
    naming ``field``: 413 for an array past ``limit`` bytes, 400 for unreadable bytes, 422 for a
    dtype that is not a number."""
    what = field.capitalize()
    try:
        array = read_npy_bytes(raw, limit)
    except ArrayTooLarge as exc:
        raise Problem(413, f"{what} too large", str(exc), field=field) from None
    except Exception as exc:
        raise Problem(400, f"Unreadable {field}", f"expected .npy bytes: {exc}", field=field) from None
    if array.dtype.kind not in "fiu":
        raise Problem(422, f"{what} must be numeric", f"dtype {array.dtype}", field=field)
    return array


MAX_JSON_DEPTH = 64  # a job spec nests about 6 levels deep


def parse_json(raw: bytes) -> Any:
    """JSON text to Python; NaN/Infinity literals parse here so that validation can refuse
    them with the field named. Documents nested deeper than MAX_JSON_DEPTH are refused with 400
    (the parser's own recursion limit would otherwise surface as a 500)."""
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Problem(400, "Malformed JSON", str(exc)) from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
        raise Problem(400, "Malformed JSON", f"a number the parser refuses: {exc}") from None
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
