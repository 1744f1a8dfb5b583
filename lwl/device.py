"""Torch device and dtype selection shared by models and algorithms."""

from __future__ import annotations

import torch

DTYPE = torch.float64  # kernel solves are ill-conditioned at small nuggets: always float64


def resolve_device(device: str = "auto") -> torch.device:
    """Map ``"auto" | "cpu" | "cuda" | "cuda:N"`` to a torch device.

    ``auto`` picks CUDA when ``torch.cuda.is_available()``; asking for CUDA on a machine
    without it is an error rather than a silent fallback.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return torch.device(device)
