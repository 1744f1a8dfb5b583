"""Give freed heap memory back to the operating system.

Particle AMA builds and drops thousands of sparse factorisations (SuperLU's C allocations, about
12 MB per 51^2 x 12 RTE solver) between numpy and torch buffers in several threads. glibc keeps
the freed pages in its arenas: a paper-size RTE run grew by about 10 GB an hour while holding one
set of 120 solvers. ``malloc_trim(0)`` after each set is dropped keeps the resident size flat
(measured at 31^2, N = 60: 1.7 GB after 4 iterations without, 0.65 GB with).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return None


def release_freed_memory() -> bool:
    """Return free heap pages to the OS where the C library can (glibc); True if it did."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
