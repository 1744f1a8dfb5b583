"""Per-point outcomes of a labelled batch: a failed measurement is an outcome, not an error.

A lab that labels a batch may come back without a label for some points (a sample broke, a run
diverged, a detector saturated). Inside lwl such a point carries the label NaN
(:data:`FAILED`): the oracle hands the batch's labels to the stepper with NaN rows where the
measurement failed, and the stepper leaves those rows out of everything it fits, scores or
returns, while counting them as labels spent (a failed measurement costs the lab as much as
a good one, so it counts against a ``budget``).

Only oracles that say so (``reports_failures = True``: the ask/tell oracle) may return NaN;
from any other oracle (a built-in function, a solver) a non-finite label is a bug, and
:func:`check_labels` refuses it so that it cannot pass silently as a "failure".
"""

from __future__ import annotations

import numpy as np

#: the label a failed point carries inside lwl
FAILED = float("nan")


def failed_rows(labels) -> np.ndarray:
    """Boolean mask (n,) of the rows of ``labels`` ((n,) or (n, ...)) whose measurement failed:
    a row with any non-finite value."""
    y = np.asarray(labels, dtype=np.float64)
    if y.ndim == 0:
        raise ValueError("labels: expected one label per input, got a scalar")
    return ~np.isfinite(y.reshape(len(y), -1)).all(axis=1)


def scalar_labels(labels) -> np.ndarray:
    """The labels of a batch as one number per input, (n,): the bilevel objective (paper eqn 3.1)
    and its KRR/GP model are of a scalar function. A batch of rows of several values per input
    (an oracle with several outputs) is refused with what to do, not flattened into n * m labels."""
    labels = np.asarray(labels, dtype=np.float64)
    width = int(np.prod(labels.shape[1:])) if labels.ndim > 1 else 1
    if width != 1:
        raise ValueError(f"labels: this job takes one number per input (its model fits a scalar function), got "
                         f"{labels.shape[0]} rows of {width} values; run one job per output, or an operator "
                         "algorithm (ama) for field-valued labels")
    return labels.reshape(-1)


def usable(inputs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``(inputs, labels)`` whose measurement came back: what a design may use as data."""
    ok = ~failed_rows(labels)
    return inputs[ok], np.asarray(labels)[ok]


def check_labels(labels, oracle) -> None:
    """Refuse non-finite labels from an oracle that does not report failures (``ValueError``
    naming ``labels``): there a NaN is a broken oracle, not a failed measurement."""
    if not getattr(oracle, "reports_failures", False) and failed_rows(labels).any():
        raise ValueError(f"labels: oracle {getattr(oracle, 'name', '?')!r} returned non-finite values "
                         "(only an ask/tell oracle reports failed points)")
