"""lwl.npy: the .npy header and float64 body read without numpy, against numpy's own writer."""

import io
import zipfile

import numpy as np
import pytest

from lwl.npy import float64_values, npz_shapes, read_header


def npy(array, **kw) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("shape", [(0,), (5,), (7, 3), (2, 3, 4)])
def test_float64_values_are_numpys_own(shape):
    x = np.random.default_rng(0).standard_normal(shape)
    header, values = float64_values(npy(x))
    assert header.shape == shape and header.descr == "<f8" and not header.fortran_order
    assert np.array_equal(np.frombuffer(values.tobytes()), x.reshape(-1))  # bit for bit, NaN and inf too


def test_nan_and_inf_survive():
    x = np.array([1.0, np.nan, -np.inf])
    _, values = float64_values(npy(x))
    assert np.array_equal(np.asarray(values), x, equal_nan=True)


@pytest.mark.parametrize("array", [np.zeros(3, dtype=np.float32), np.zeros(3, dtype=np.int64),
                                   np.asfortranarray(np.zeros((3, 2))), np.zeros(3, dtype=">f8")])
def test_another_layout_is_left_to_numpy(array):
    assert float64_values(npy(array)) is None
    assert read_header(npy(array)).shape == array.shape


def test_format_versions_two_and_three_read():
    x = np.arange(6.0).reshape(2, 3)
    for version in [(2, 0), (3, 0)]:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, x, version=version)
        header, values = float64_values(buf.getvalue())
        assert header.shape == (2, 3) and list(values) == list(range(6))


@pytest.mark.parametrize("data, says", [(b"PK\x03\x04 a zip", "not a .npy"), (b"", "not a .npy"),
                                        (npy(np.zeros(4))[:-8], "cut short"),
                                        (b"\x93NUMPY\x01\x00\x05\x00{'a'}", "does not parse")])
def test_what_is_not_npy_is_named(data, says):
    with pytest.raises(ValueError, match=says):
        float64_values(data)


def test_npz_shapes_name_each_array():
    buf = io.BytesIO()
    np.savez(buf, inputs=np.zeros((4, 3)), labels=np.zeros(4), left_out_labels=np.zeros(0))
    assert npz_shapes(buf.getvalue()) == {"inputs": (4, 3), "labels": (4,), "left_out_labels": (0,)}
    with pytest.raises(zipfile.BadZipFile):
        npz_shapes(b"not a zip")
