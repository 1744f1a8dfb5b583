"""The base of every spec block's parameter model: strict pydantic models (unknown fields and
non-finite numbers refused) and the checks several blocks share. The lowest layer of the spec:
the blocks live beside their code (lwl.spec, lwl.oracles.spec, lwl.q_samples, lwl.domain,
lwl.initial_data, lwl.evaluation.spec, lwl.measures.kle, the families, models and algorithms)
and import this module."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

MAX_SEED = 2**53 - 1  # the largest integer every JSON parser reads exactly


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=False)


def check_spd(mean: list[float], cov: list[list[float]], what: str = "cov", blame_mean: bool = True) -> None:
    """``cov`` is a symmetric positive definite d x d matrix for the d entries of ``mean``.
    A square covariance of another size names the mean when ``blame_mean`` (a lone Gaussian:
    the mean is the odd one out as often as the covariance, and its length is the simpler fix
    to see), the covariance otherwise (a mixture's means were checked against each other)."""
    d = len(mean)
    if d == 0:
        raise ValueError("mean: must have at least one entry")
    try:
        c = np.asarray(cov, dtype=np.float64)
    except ValueError:  # ragged rows
        raise ValueError(f"{what}: rows must all have the same length") from None
    if blame_mean and c.ndim == 2 and c.shape[0] == c.shape[1] and c.shape[0] != d:
        raise ValueError(f"mean: {d} entries, but {what} is a {c.shape[0]}x{c.shape[0]} matrix")
    if c.shape != (d, d):
        raise ValueError(f"{what}: expected a {d}x{d} matrix to match mean, got shape {c.shape}")
    if not np.allclose(c, c.T, rtol=1e-10, atol=1e-12):
        raise ValueError(f"{what}: must be symmetric")
    try:
        np.linalg.cholesky(c)
    except np.linalg.LinAlgError:
        raise ValueError(f"{what}: must be positive definite") from None


def check_rectangular(rows: list[list[float]], what: str) -> int:
    if not rows:
        raise ValueError(f"{what}: must hold at least one row")
    widths = {len(r) for r in rows}
    if len(widths) != 1 or 0 in widths:
        raise ValueError(f"{what}: rows must all have the same, non-zero length (got lengths {sorted(widths)[:5]})")
    return widths.pop()
