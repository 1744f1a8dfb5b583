"""How values sit in the store's columns: JSON text (progress and history records with NaN and
infinities as null) and ``.npy`` bytes of arrays, and the ids of new rows."""

from __future__ import annotations

import io
import json
import math
import uuid

import numpy as np


def _new_id() -> str:
    return uuid.uuid4().hex


def _json(value) -> str | None:
    return None if value is None else json.dumps(value, allow_nan=False)


def _finite_json(value) -> str:
    """JSON of a progress or history record, with NaN and infinities written as null (a step
    whose objective could not be computed records NaN; strict JSON has no such number)."""
    def clean(v):
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(value), allow_nan=False)


def _unjson(text):
    return None if text is None else json.loads(text)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def _unnpy(b: bytes) -> np.ndarray:
    return np.load(io.BytesIO(b), allow_pickle=False)
