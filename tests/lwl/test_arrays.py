"""Bounded readers of uploaded arrays (lwl.arrays): sizes come from the .npy header and the
zip central directory, before anything is inflated or allocated."""

from __future__ import annotations

import io
import time
import zipfile

import numpy as np
import pytest

from lwl.arrays import MAX_NPZ_MEMBERS, ArrayTooLarge, read_npy_bytes, read_single_array

MB = 1 << 20


def npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def npy_header(shape, descr="<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def zip_bomb(shape=(10_000_000, 5)) -> bytes:
    """A deflated .npz whose one member is a header declaring ``shape`` (float64) and its zeros."""
    buf = io.BytesIO()
    size = int(np.prod(shape)) * 8
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z, z.open("x.npy", "w", force_zip64=True) as m:
        m.write(npy_header(shape))
        chunk = bytes(4 * MB)
        for _ in range(size // len(chunk)):
            m.write(chunk)
        m.write(bytes(size % len(chunk)))
    return buf.getvalue()


def test_arrays_round_trip():
    a = np.arange(12.0).reshape(3, 4)
    assert np.array_equal(read_single_array(npy(a), 1000), a)
    f = np.asfortranarray(a.astype(np.int16))
    buf = io.BytesIO()
    np.savez_compressed(buf, x=f)
    got = read_single_array(buf.getvalue(), 1000)
    assert np.array_equal(got, f) and got.dtype == np.int16
    assert read_single_array(npy(np.zeros((0, 3))), 0).shape == (0, 3)


def test_a_small_archive_declaring_a_huge_array_is_refused_before_inflating():
    bomb = zip_bomb()
    assert len(bomb) < MB  # 400 MB of zeros
    t0 = time.perf_counter()
    with pytest.raises(ArrayTooLarge) as err:
        read_single_array(bomb, 64 * MB)
    assert time.perf_counter() - t0 < 0.1 and err.value.declared >= 400_000_000


def test_declared_sizes_must_match_the_data():
    # a header declaring 400 MB with 80 bytes behind it: too large for the limit, else a mismatch
    with pytest.raises(ArrayTooLarge):
        read_npy_bytes(npy_header((10_000_000, 5)) + bytes(80), 64 * MB)
    with pytest.raises(ValueError, match="80 follow it"):
        read_npy_bytes(npy_header((10_000_000, 5)) + bytes(80))
    # an archive whose member's header disagrees with the member's uncompressed size
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", npy_header((100, 5)) + bytes(8 * 10))
    with pytest.raises(ValueError, match="holds 80"):
        read_single_array(buf.getvalue(), 64 * MB)


def test_archives_with_many_members_and_other_refusals():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k in range(MAX_NPZ_MEMBERS + 1):
            z.writestr(f"a{k}.npy", npy(np.zeros(1)))
    with pytest.raises(ValueError, match="exactly one array"):
        read_single_array(buf.getvalue(), MB)
    obj = io.BytesIO()
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="objects"):
        read_single_array(obj.getvalue())
    with pytest.raises(ValueError, match=".npy bytes or an .npz"):
        read_single_array(b"not an array")
    two = io.BytesIO()
    np.savez(two, a=np.zeros(2), b=np.zeros(2))
    with pytest.raises(ValueError, match="not .npy"):
        read_npy_bytes(two.getvalue())  # labels must be .npy: an .npz is refused, not half-read
