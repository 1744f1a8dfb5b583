"""Cosine annealing (Loshchilov & Hutter), used for the step sizes t_k and nuggets sigma_k^2."""

from __future__ import annotations

import math
from typing import Protocol


def cosine(start: float, end: float, k: int, total: int) -> float:
    """end + (start - end) (1 + cos(pi k / total)) / 2 for k = 0..total-1 (start at k = 0)."""
    if total <= 1:
        return start
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * k / total))


class Annealed(Protocol):
    """The spec fields the bilevel schedules read (:class:`lwl.design.bilevel.BilevelSpec`)."""

    optimizer: str
    iterations: int
    step: float
    final_step: float
    learning_rate: float
    final_learning_rate: float
    nugget: float
    final_nugget: float


def bilevel_schedules(algo: Annealed, k: int) -> tuple[float, float]:
    """(step size, nugget sigma_k^2) of bilevel iteration k (paper Alg. 3), both cosine from
    their first to their final value over ``iterations``: the paper's learning rate t_k for
    ``optimizer: "paper"``, Adam's step in Q standard deviations for ``"adaptive"``."""
    T = algo.iterations
    if algo.optimizer == "adaptive":
        step = cosine(algo.step, algo.final_step, k, T)
    else:
        step = cosine(algo.learning_rate, algo.final_learning_rate, k, T)
    return step, cosine(algo.nugget, algo.final_nugget, k, T)
