"""Stepper state <-> bytes, without pickle.

A state is a flat dict of numpy arrays and JSON values. ``pack`` writes an ``.npz`` archive
whose arrays are stored as-is and whose JSON values travel in one UTF-8 byte array;
``unpack`` reads it back with ``allow_pickle=False``, so a checkpoint from anywhere can be
loaded without executing code.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

_JSON_KEY = "__json__"


def pack(state: dict[str, Any]) -> bytes:
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    if _JSON_KEY in arrays:
        raise ValueError(f"state key {_JSON_KEY!r} is reserved")
    rest = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    buf = io.BytesIO()
    blob = np.frombuffer(json.dumps(rest, allow_nan=True).encode(), dtype=np.uint8)
    np.savez(buf, **arrays, **{_JSON_KEY: blob})
    return buf.getvalue()


def unpack(data: bytes) -> dict[str, Any]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        out: dict[str, Any] = {k: z[k] for k in z.files if k != _JSON_KEY}
        out.update(json.loads(z[_JSON_KEY].tobytes().decode()))
    return out
