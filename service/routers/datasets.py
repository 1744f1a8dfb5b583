"""Datasets: (M, d) arrays uploaded once and named by id in job specs."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from lwl.arrays import ArrayTooLarge, read_single_array
from service.core.store import DatasetRecord
from service.deps import OwnerDep, SettingsDep, StoreDep, read_body
from service import problems
from service.problems import Problem
from service.schemas import DatasetView

router = APIRouter(responses=problems.STORE)  # every operation here reads or writes the store
# what the contract names (service.guard takes any type a browser cannot send cross-site)
DATASET_TYPES = ("application/octet-stream", "application/x-npy", "application/x-npz")
ARRAY_BYTES = ("the bytes of a .npy file, or of an .npz archive holding one array: a non-empty (M, d) array of "
               "finite real numbers (np.save / np.savez; never pickled objects)")


@router.post("/v1/datasets", status_code=201, tags=["datasets"], response_model=DatasetView,
             responses=problems.responses(400, 401, 413, 415, 422),
             openapi_extra={"requestBody": {"required": True, "content": {
              media: {"schema": {"type": "string", "format": "binary", "description": ARRAY_BYTES}}
              for media in DATASET_TYPES}}})
async def upload_dataset(request: Request, response: Response, store: StoreDep, owner: OwnerDep,
                         settings: SettingsDep) -> dict:
    """Upload an (M, d) array as ``.npy`` or single-array ``.npz`` bytes (``Content-Type:
    application/octet-stream``, ``application/x-npy`` or ``application/x-npz``); a job spec
    then names it with ``{"dataset": id}``. The body and the uncompressed array (as float64) are each at most ``LWL_MAX_DATASET_BYTES`` (413)."""
    raw = await read_body(request, settings.max_dataset_bytes)
    # parsing and the insert block: in the thread pool, never on the event loop (issue 84)
    meta = await run_in_threadpool(lambda: store.put_dataset(owner, load_array(raw, settings.max_dataset_bytes)))
    response.headers["Location"] = f"/v1/datasets/{meta.id}"
    return _dataset_view(meta)

@router.get("/v1/datasets/{dataset_id}", tags=["datasets"], response_model=DatasetView,
            responses=problems.responses(401, 404))
def get_dataset(dataset_id: str, store: StoreDep, owner: OwnerDep) -> dict:
    meta = store.get_dataset(dataset_id, owner)
    if meta is None:
        raise Problem(404, "Dataset not found", f"no dataset {dataset_id!r}", field="id")
    return _dataset_view(meta)


def _dataset_view(meta: DatasetRecord) -> dict:
    return {"id": meta.id, "shape": meta.shape, "dtype": meta.dtype, "created_at": meta.created_at}


def load_array(raw: bytes, max_bytes: int) -> np.ndarray:
    """A dataset upload: .npy bytes, or .npz with exactly one array, bounded by the sizes the
    headers declare before anything is inflated or allocated. Never unpickles."""
    try:
        data = read_single_array(raw, max_bytes)
    except ArrayTooLarge as exc:
        raise Problem(413, "Dataset too large", f"{exc} (LWL_MAX_DATASET_BYTES)", limit=max_bytes) from None
    except Exception as exc:
        raise Problem(400, "Unreadable dataset", f"expected .npy or .npz bytes: {exc}") from None
    if data.dtype.kind not in "fiu":
        raise Problem(422, "Dataset must be numeric", f"dtype {data.dtype} is not a real number type")
    if data.size * 8 > max_bytes:  # stored as float64
        raise Problem(413, "Dataset too large", f"{data.size} entries take {data.size * 8} bytes as float64; "
                      f"the limit is {max_bytes} (LWL_MAX_DATASET_BYTES)", limit=max_bytes)
    arr = np.asarray(data, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise Problem(422, "Dataset has the wrong shape", f"expected a non-empty (M, d) array, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise Problem(422, "Dataset has non-finite values", "NaN or infinite entries")
    return arr
