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
