"""The law of the NtD and Darcy test parameters (paper eqn ``customdist``; SM NtD and Darcy).

The paper draws each test member's parameters from the density

    p(x) = (sin(x - pi/2) + 1) / Z = (1 - cos x) / Z   on the raw interval [lo, hi],

Z = [t - sin t]_lo^hi, and so does the authors' ``sample_from_custom_pdf`` (NtDExample.py,
NtDGPU.py, DarcyFlowGPU.py: the formula on a 10,001-point grid of [lo, hi], inverted by
interpolation). Its CDF is closed-form, F(x) = [t - sin t]_lo^x / Z. For NtD's omega on
[-2 pi, 2 pi] the density vanishes at 0 and peaks at +-pi; for Darcy's m on [0, 1] it rises from
0 (mean ~0.745).

Laws, by name (``LAWS``; the studies' ``q_law`` setting):

- ``paper``: that density, drawn exactly by rejection under its maximum on [lo, hi].
- ``unit``: what lwl drew before (results made before the paper's law was restored): the
  density 1 - cos(2 pi u) on the unit interval, rescaled to [lo, hi] (peaks mid-interval).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


def cdf(x, lo: float, hi: float):
    """F(x) of the paper's law on [lo, hi] (0 below lo, 1 above hi)."""
    x = np.clip(np.asarray(x, dtype=np.float64), lo, hi)
    antiderivative = lambda t: t - np.sin(t)  # noqa: E731
    return (antiderivative(x) - antiderivative(lo)) / (antiderivative(hi) - antiderivative(lo))


def _envelope(lo: float, hi: float) -> float:
    """max of 1 - cos x on [lo, hi]: 2 when the interval holds an odd multiple of pi, else the
    larger end value (1 - cos is monotone between consecutive multiples of pi)."""
    k = math.ceil((lo - math.pi) / (2 * math.pi))
    if (2 * k + 1) * math.pi <= hi:
        return 2.0
    return max(1.0 - math.cos(lo), 1.0 - math.cos(hi))


def draw_paper(rng: np.random.Generator, lo: float, hi: float) -> float:
    """One draw of the paper's law on [lo, hi], by rejection under its maximum."""
    top = _envelope(lo, hi)
    while True:
        x = lo + (hi - lo) * rng.uniform()
        if rng.uniform() * top <= 1.0 - math.cos(x):
            return x


def draw_unit(rng: np.random.Generator, lo: float, hi: float) -> float:
    """One draw of lwl's earlier law: 1 - cos(2 pi u) on [0, 1], rescaled to [lo, hi]."""
    while True:
        u = rng.uniform()
        if rng.uniform() * 2 <= 1 - math.cos(2 * math.pi * u):
            return lo + (hi - lo) * u


LAWS: dict[str, Callable[[np.random.Generator, float, float], float]] = {"paper": draw_paper, "unit": draw_unit}
DEFAULT_LAW = "paper"


def law(name: str) -> Callable[[np.random.Generator, float, float], float]:
    if name not in LAWS:
        raise ValueError(f"q_law: unknown law {name!r}; known: {', '.join(LAWS)}")
    return LAWS[name]
