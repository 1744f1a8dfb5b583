"""Array-library dispatch: the numpy or torch module matching an input array.

Used where POT's backend (``ot.backend.get_backend``) lacks an operation (``sin``). Both
namespaces agree on the element-wise functions used here and on ``prod(x, 1)``.
"""

from __future__ import annotations

import numpy as np


def namespace(x):
    if type(x).__module__.startswith("torch"):
        import torch

        return torch
    return np


def asarray_like(a: np.ndarray, like):
    """``a`` as an array of the same library, dtype and device as ``like``."""
    if type(like).__module__.startswith("torch"):
        import torch

        return torch.as_tensor(a, dtype=like.dtype, device=like.device)
    return np.asarray(a, dtype=like.dtype)


class ArrayTooLarge(ValueError):
    """The array (or archive) declares more bytes than allowed; nothing was decompressed or
    allocated for it."""

    def __init__(self, declared: int, limit: int, what: str = "the array"):
        super().__init__(f"{what} declares {declared} bytes uncompressed; the limit is {limit}")
        self.declared, self.limit = declared, limit


NPY_MAGIC = b"\x93NUMPY"
MAX_NPZ_MEMBERS = 16  # the central directory is refused unread above this many entries
MAX_NPY_HEADER = 10_000  # numpy's own default bound on an .npy header


def _npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype of the .npy stream ``f`` (positioned at its start); reads
    only the header (at most :data:`MAX_NPY_HEADER` bytes)."""
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(f, max_header_size=MAX_NPY_HEADER)
    elif version == (2, 0):
        shape, fortran, dtype = fmt.read_array_header_2_0(f, max_header_size=MAX_NPY_HEADER)
    else:
        raise ValueError(f".npy format version {version[0]}.{version[1]} is not read here (1.0 and 2.0 are)")
    if dtype.hasobject:
        raise ValueError("arrays of Python objects are refused (they would need unpickling)")
    return shape, fortran, dtype


def _declared_bytes(shape, dtype: np.dtype) -> int:
    count = 1
    for s in shape:
        count *= int(s)  # Python ints: no overflow, however large the declared shape
    return count * dtype.itemsize


def _from_data(data, shape, fortran: bool, dtype: np.dtype) -> np.ndarray:
    count = _declared_bytes(shape, dtype) // dtype.itemsize if dtype.itemsize else 0
    arr = np.frombuffer(data, dtype=dtype, count=count) if count else np.zeros(0, dtype=dtype)
    return arr.reshape(shape, order="F" if fortran else "C").copy(order="K")


def read_npy_bytes(raw, max_bytes: int | None = None) -> np.ndarray:
    """The array of ``.npy`` bytes, read from its parsed header: :class:`ArrayTooLarge` when the
    header declares more than ``max_bytes`` of data (checked before anything is allocated),
    ValueError when the data that follows the header is not exactly that long, when the bytes
    are not .npy (an .npz, say), or when the dtype holds objects. Never unpickles."""
    import io

    raw = memoryview(raw).cast("B")
    if bytes(raw[:6]) != NPY_MAGIC:
        raise ValueError("not .npy bytes (they start with the magic \\x93NUMPY)")
    f = io.BytesIO(raw)
    shape, fortran, dtype = _npy_header(f)
    declared = _declared_bytes(shape, dtype)
    if max_bytes is not None and declared > max_bytes:
        raise ArrayTooLarge(declared, max_bytes)
    data = raw[f.tell():]
    if len(data) != declared:
        raise ValueError(f"the .npy header declares {declared} bytes of data ({shape}, {dtype}); "
                         f"{len(data)} follow it")
    return _from_data(data, shape, fortran, dtype)


def _zip_entries(raw: memoryview) -> int:
    """The entry count of a zip's end-of-central-directory record, read before zipfile parses
    the central directory (so that a directory of a million entries is never built)."""
    import struct

    tail = bytes(raw[max(0, len(raw) - 22 - 65535):])
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise ValueError("not a zip archive (no end of central directory)")
    _, _, _, _, total, _, _, _ = struct.unpack("<4s4H2LH", tail[at:at + 22])
    return total


class _Counting:
    """A reader that counts the bytes read through it (the length of an .npy header)."""

    def __init__(self, f):
        self.f, self.n = f, 0

    def read(self, size: int = -1) -> bytes:
        out = self.f.read(size)
        self.n += len(out)
        return out


def read_npz_single(raw, max_bytes: int | None = None) -> np.ndarray:
    """The one array of an ``.npz`` archive, bounded before decompressing: the archive may
    list at most :data:`MAX_NPZ_MEMBERS` entries; the sum of their uncompressed sizes
    (``ZipInfo.file_size``) and the member's declared array size must fit ``max_bytes``
    (:class:`ArrayTooLarge`); the declared array size plus its header must equal the
    member's ``file_size``; then exactly that many bytes are inflated."""
    import io
    import zipfile

    raw = memoryview(raw).cast("B")
    if _zip_entries(raw) > MAX_NPZ_MEMBERS:
        raise ValueError(f"an .npz must hold exactly one array; the archive lists more than {MAX_NPZ_MEMBERS} entries")
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"not a readable zip archive: {exc}") from None
    with zf:
        infos = zf.infolist()
        total = sum(i.file_size for i in infos)
        if max_bytes is not None and total > max_bytes + MAX_NPY_HEADER * len(infos):
            raise ArrayTooLarge(total, max_bytes, "the archive")
        if len(infos) != 1:
            raise ValueError(f"an .npz must hold exactly one array, found {len(infos)}")
        info = infos[0]
        try:
            with zf.open(info) as member:
                counted = _Counting(member)
                shape, fortran, dtype = _npy_header(counted)  # reads the header only
                declared = _declared_bytes(shape, dtype)
                if max_bytes is not None and declared > max_bytes:
                    raise ArrayTooLarge(declared, max_bytes)
                if counted.n + declared != info.file_size:
                    raise ValueError(f"the member's header declares {declared} bytes of data ({shape}, {dtype}); "
                                     f"the archive says the member holds {info.file_size - counted.n}")
                data = member.read(declared)  # inflates at most file_size bytes in all
                if len(data) != declared or member.read(1):
                    raise ValueError("the member's data is not as long as its header declares")
        except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError) as exc:
            raise ValueError(f"unreadable archive member: {exc}") from None
    return _from_data(data, shape, fortran, dtype)


def read_single_array(source, max_bytes: int | None = None) -> np.ndarray:
    """The one array of ``.npy`` bytes / file, or of an ``.npz`` holding exactly one array,
    read without unpickling anything (uploads and ``{"dataset": "file.npy"}`` members).
    Bytes are read through :func:`read_npy_bytes` / :func:`read_npz_single`, bounded by
    ``max_bytes`` of uncompressed array data before anything is inflated or allocated
    (:class:`ArrayTooLarge`). Raises ValueError saying what is wrong."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = memoryview(source).cast("B")
        if bytes(raw[:6]) == NPY_MAGIC:
            return read_npy_bytes(raw, max_bytes)
        if bytes(raw[:2]) == b"PK":
            return read_npz_single(raw, max_bytes)
        raise ValueError("expected .npy bytes or an .npz archive")
    data = np.load(source, allow_pickle=False)
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            if len(data.files) != 1:
                raise ValueError(f"an .npz must hold exactly one array, found {len(data.files)}")
            data = data[data.files[0]]
    if not isinstance(data, np.ndarray):  # an .npz member that is not an .npy array
        raise ValueError("the archive member is not an .npy array")
    return data
