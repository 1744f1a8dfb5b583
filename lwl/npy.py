"""The ``.npy`` format's header read without numpy (NEP 1, format versions 1 to 3).

The CLI's array commands (``lwl ask / tell / predict / training-set``) move ``.npy`` files that
are, as a rule, already what the service reads and writes: a little-endian float64 array in C
order. Such a file is passed on byte for byte, and an answer is written as it came, so that a
call from a lab's shell loop does not pay numpy's import (about 0.1 s of a 0.3 s call, issue 85);
anything else (another dtype, Fortran order, a pickle) falls back to numpy's own reader.
"""

from __future__ import annotations

import ast
import io
import struct
import sys
import zipfile
from array import array
from dataclasses import dataclass

MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header says: the dtype (``descr``), the order, the shape, and where the data begin."""

    descr: str
    fortran_order: bool
    shape: tuple[int, ...]
    offset: int

    @property
    def is_float64_c(self) -> bool:
        """Little-endian float64 in C order: the service's own layout."""
        return self.descr == "<f8" and not self.fortran_order


def read_header(data: bytes) -> NpyHeader:
    """The header of the ``.npy`` bytes ``data``; ValueError where they are not ``.npy``."""
    if len(data) < 10 or not data.startswith(MAGIC):
        raise ValueError("not a .npy file (its first bytes are not the format's magic string)")
    major = data[6]
    if major == 1:
        (size,), start = struct.unpack("<H", data[8:10]), 10
    elif major in (2, 3):
        (size,), start = struct.unpack("<I", data[8:12]), 12
    else:
        raise ValueError(f"a .npy format version this reader does not know ({major})")
    try:
        meta = ast.literal_eval(data[start:start + size].decode("latin1" if major < 3 else "utf8"))
        header = NpyHeader(str(meta["descr"]), bool(meta["fortran_order"]), tuple(int(n) for n in meta["shape"]),
                           start + size)
    except (ValueError, SyntaxError, KeyError, TypeError) as exc:
        raise ValueError(f"a .npy header that does not parse: {exc}") from None
    return header


def float64_values(data: bytes) -> tuple[NpyHeader, array] | None:
    """``(header, values)`` of a little-endian float64 C-order ``.npy`` (values flat, row by row),
    or None for any other layout (the caller falls back to numpy)."""
    header = read_header(data)
    if not header.is_float64_c or sys.byteorder != "little":
        return None
    count = 1
    for n in header.shape:
        count *= n
    values = array("d")
    values.frombytes(data[header.offset:header.offset + 8 * count])
    if len(values) != count:
        raise ValueError(f"a .npy file cut short: {len(values)} of {count} values")
    return header, values


def npz_shapes(data: bytes) -> dict[str, tuple[int, ...]]:
    """The shape of each array of the ``.npz`` bytes ``data`` (a zip of ``.npy`` members), by name."""
    shapes = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in z.namelist():
            with z.open(name) as member:
                head = member.read(65536 + 12)  # a header is at most 64 KiB (format 2 and 3 allow more: never seen)
            shapes[name.removesuffix(".npy")] = read_header(head).shape
    return shapes
