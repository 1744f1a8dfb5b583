"""Schemathesis hooks for the contract test (``SCHEMATHESIS_HOOKS``): what a valid dataset
upload is. openapi.json says it in words (the bytes of a .npy file, or of an .npz archive with
one array, of a finite (M, d) array); a JSON schema cannot state a binary format, so these
strategies tell schemathesis how to write such bytes for each media type the route takes."""

from __future__ import annotations

import io

import numpy as np
import schemathesis
from hypothesis import strategies as st


@st.composite
def arrays(draw) -> np.ndarray:
    rows, cols = draw(st.integers(1, 40)), draw(st.integers(1, 6))
    dtype = draw(st.sampled_from(["float64", "float32", "int32"]))
    if dtype == "int32":
        values = st.integers(-(2 ** 31), 2 ** 31 - 1)
    else:
        values = st.floats(allow_nan=False, allow_infinity=False, width=64 if dtype == "float64" else 32)
    flat = draw(st.lists(values, min_size=rows * cols, max_size=rows * cols))
    return np.asarray(flat, dtype=dtype).reshape(rows, cols)


def _npy(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, x, allow_pickle=False)
    return buf.getvalue()


def _npz(x: np.ndarray, compressed: bool) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, x=x)
    return buf.getvalue()


npy = arrays().map(_npy)
npz = st.tuples(arrays(), st.booleans()).map(lambda t: _npz(*t))
schemathesis.openapi.media_type("application/x-npy", npy)
schemathesis.openapi.media_type("application/x-npz", npz)
schemathesis.openapi.media_type("application/octet-stream", st.one_of(npy, npz))
