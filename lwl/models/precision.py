"""Matrix-product precision of the neural operators' float32 training (``model.precision``).

- ``float32``: IEEE single precision throughout (the default, and the only behaviour on a CPU).
- ``tf32``: on NVIDIA GPUs (Ampere and later), float32 matrix products and convolutions run on
  tensor cores with TF32 inputs (10-bit mantissa, float32 accumulation): measured on an H100 the
  paper-size AMINO step takes 32 ms against 205 ms in float32 (issue #36). CPUs have no TF32:
  the setting changes nothing there. bf16 autocast is not offered: AMINO's spectral layer needs a
  complex FFT that has no bfloat16 kernel.

:func:`matmul_precision` sets torch's two TF32 switches for the duration of a fit or a
prediction and restores them after, so one model's setting never leaks into another's.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

PRECISIONS = ("float32", "tf32")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of {', '.join(PRECISIONS)}")
    return precision


@contextmanager
def matmul_precision(precision: str, device: torch.device) -> Iterator[None]:
    """Within the block, CUDA float32 products and convolutions use TF32 iff ``precision`` is
    ``"tf32"``; a no-op on other devices."""
    check_precision(precision)
    if device.type != "cuda":
        yield
        return
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
