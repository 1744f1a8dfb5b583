"""Comparing numbers made on this machine with references written on another one.

BLAS (OpenBLAS for numpy, MKL/oneDNN for torch) picks its kernels, and so its summation order,
per CPU and per thread count: the same code, spec and seed give the same numbers bit for bit on
one machine, and numbers that differ in the last digits on another CPU. A few adaptive steps
later (a step accepted or halved, a Cholesky factor) those differences have grown by a few
orders of magnitude, never to anything a user would read.

So a test keeps ``==`` where both sides are computed in the same process (a resumed run against
an uninterrupted one, the same seed twice), and compares against a file written elsewhere (the
legacy checkpoints, committed results) with :func:`assert_close` at :data:`CROSS_MACHINE_RTOL`.
Everything that is not a float stays exact: keys, types, integers (label counts, iterations),
booleans, array dtypes and shapes, and the words of a string. The numbers printed inside a
string (a rule such as ``"z 4.80 >= 2"``) are compared at the same tolerance or one unit of
their last printed digit, whichever is larger.

The suite proves it holds on another CPU without one: ``scripts/test-other-blas.sh`` reruns it
with OpenBLAS forced to another core type, MKL to another code path and other thread counts.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

#: Relative tolerance for a number computed here against one written on another CPU. The
#: largest relative difference measured between this machine's default BLAS and the
#: ``scripts/test-other-blas.sh`` configuration over the legacy checkpoints' resumed runs was
#: about 1e-10 (float64 round-off of 1e-16 grown over up to 18 adaptive iterations); 1e-6
#: leaves four orders of magnitude of room and still fails on any change a user could see.
CROSS_MACHINE_RTOL = 1e-6
#: Absolute floor for numbers that should be zero (an off-diagonal of a Cholesky factor).
CROSS_MACHINE_ATOL = 1e-12
#: The same for a state that holds a network trained in float32 (AMA's and particle AMA's
#: DeepONet, and what is computed from it). Two or three AMA iterations on another BLAS moved
#: the weights by up to 1e-4 relative and particle coefficients by 3e-5 (measured with
#: scripts/test-other-blas.sh); 1e-2 leaves that room and still tells one iterate's weights
#: from another's or a transposed matrix.
TRAINED_RTOL = 1e-2
TRAINED_ATOL = 1e-6

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def assert_close(actual: Any, expected: Any, rtol: float = CROSS_MACHINE_RTOL,
                 atol: float = CROSS_MACHINE_ATOL, path: str = "") -> None:
    """Assert ``actual`` equals ``expected`` with floats (Python floats, float arrays and the
    numbers inside strings) compared at ``rtol``/``atol`` and everything else exactly.
    Containers are walked (dicts by key, lists and tuples by position); ``path`` names the
    first difference."""
    where = path or "value"
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {type(actual).__name__} is not a dict"
        assert set(actual) == set(expected), f"{where}: keys differ: {sorted(set(actual) ^ set(expected))}"
        for key in expected:
            assert_close(actual[key], expected[key], rtol, atol, f"{path}.{key}" if path else str(key))
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)), f"{where}: {type(actual).__name__} is not a sequence"
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, rtol, atol, f"{where}[{i}]")
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{where}: {type(actual).__name__} is not an array"
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
            f"{where}: {actual.dtype}{actual.shape} != {expected.dtype}{expected.shape}"
        if np.issubdtype(expected.dtype, np.floating) or np.issubdtype(expected.dtype, np.complexfloating):
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=where)
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert isinstance(actual, float), f"{where}: {actual!r} is not a float"
        assert _floats_close(actual, expected, rtol, atol), f"{where}: {actual!r} != {expected!r} (rtol {rtol:g})"
    elif isinstance(expected, str):
        assert isinstance(actual, str), f"{where}: {actual!r} is not a string"
        _assert_strings_close(actual, expected, rtol, atol, where)
    else:
        assert type(actual) is type(expected) and actual == expected, f"{where}: {actual!r} != {expected!r}"


def _floats_close(a: float, e: float, rtol: float, atol: float) -> bool:
    if math.isnan(e) or math.isinf(e):
        return a == e or (math.isnan(a) and math.isnan(e))
    return abs(a - e) <= atol + rtol * abs(e)


def _assert_strings_close(actual: str, expected: str, rtol: float, atol: float, where: str) -> None:
    """The words exact; each printed number within ``rtol`` or one unit of its last digit."""
    assert _NUMBER.sub("#", actual) == _NUMBER.sub("#", expected), f"{where}: {actual!r} != {expected!r}"
    for a, e in zip(_NUMBER.findall(actual), _NUMBER.findall(expected)):
        if a == e:
            continue
        decimals = len(e.split(".")[1].split("e")[0].split("E")[0]) if "." in e else 0
        unit = 10.0 ** -decimals * (10.0 ** int(e.lower().split("e")[1]) if "e" in e.lower() else 1.0)
        fa, fe = float(a), float(e)
        assert abs(fa - fe) <= max(atol + rtol * abs(fe), unit * (1 + 1e-9)), \
            f"{where}: {a} != {e} in {actual!r}"


def max_relative_difference(actual: Any, expected: Any) -> float:
    """The largest relative difference between the floats of two equal-shaped structures
    (how far a rerun on another BLAS drifted; used to state :data:`CROSS_MACHINE_RTOL`)."""
    worst = 0.0
    if isinstance(expected, dict):
        for key in expected:
            if key in actual:
                worst = max(worst, max_relative_difference(actual[key], expected[key]))
    elif isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        for a, e in zip(actual, expected):
            worst = max(worst, max_relative_difference(a, e))
    elif isinstance(expected, np.ndarray) and np.issubdtype(expected.dtype, np.floating):
        if actual.shape == expected.shape and expected.size:
            scale = np.maximum(np.abs(expected), CROSS_MACHINE_ATOL / CROSS_MACHINE_RTOL)
            diff = np.abs(actual - expected) / scale
            worst = float(np.nanmax(diff)) if np.isfinite(diff).any() else 0.0
    elif isinstance(expected, float) and isinstance(actual, float) and math.isfinite(expected):
        worst = abs(actual - expected) / max(abs(expected), CROSS_MACHINE_ATOL / CROSS_MACHINE_RTOL)
    return worst
