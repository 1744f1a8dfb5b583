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


def read_single_array(source) -> np.ndarray:
    """The one array of ``.npy`` bytes / file, or of an ``.npz`` holding exactly one array,
    read without unpickling anything (uploads and ``{"dataset": "file.npy"}`` members).
    Raises ValueError saying what is wrong."""
    import io

    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(source))
    data = np.load(source, allow_pickle=False)
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            if len(data.files) != 1:
                raise ValueError(f"an .npz must hold exactly one array, found {len(data.files)}")
            data = data[data.files[0]]
    if not isinstance(data, np.ndarray):  # an .npz member that is not an .npy array
        raise ValueError("the archive member is not an .npy array")
    return data
