"""Cosine annealing (Loshchilov & Hutter), used for the step sizes t_k and nuggets sigma_k^2."""

from __future__ import annotations

import math


def cosine(start: float, end: float, k: int, total: int) -> float:
    """end + (start - end) (1 + cos(pi k / total)) / 2 for k = 0..total-1 (start at k = 0)."""
    if total <= 1:
        return start
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * k / total))
