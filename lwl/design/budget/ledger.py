"""The ledger of a budgeted job: every label it paid for, in the order it came, with where each
point came from and which round bought it (:class:`LabelledPoints`), and the labelled validation
points at its head (:class:`LabelledValidation`). The returned training set is every row but those
the left-out check keeps out of the served model (``result["left_out"]``); :func:`training_arrays`
gives both as the archive the service and ``lwl run`` write, and :func:`checkpoint_arrays` the
labels a job that has no result (failed, cancelled, still running) holds in its last checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lwl.design.state import Flat

# source codes of points besides the candidates' indices (and the incumbent's code once it moved);
# POOLED: served draws an algorithm's pool rule chose (BudgetedDesign.select_from_pool), never used
# to score a law (they are not draws of it)
VALIDATION, CHALLENGER, MOVED, INITIAL, POOLED = -1, -2, -3, -4, -5
SOURCE_NAMES = {VALIDATION: "validation", CHALLENGER: "challenger", MOVED: "moved", INITIAL: "initial",
                POOLED: "pooled"}


@dataclass
class LabelledPoints:
    """Every label a budgeted job paid for, as rows in the order they came: Q's labelled
    validation points first (the first ``validation(state).n`` rows), then the initial data, then
    each design round's points. The returned training set is all of them, but the rows the
    left-out check takes out (``BudgetedDesign.served_rows``)."""

    X: np.ndarray          # (n, d) inputs
    y: np.ndarray          # (n,) labels, or (n, p) where a label is p values (an output field)
    source: np.ndarray     # (n,) int64: the candidate whose draw a point is, or VALIDATION, CHALLENGER, MOVED, INITIAL, POOLED
    round_of: np.ndarray   # (n,) int64: the round that bought it (0: the validation round)
    failed_X: np.ndarray   # (m, d) inputs whose label failed (NaN, lwl.outcomes): paid for, never data

    KEYS: ClassVar[tuple[str, ...]] = ("X", "y", "source", "round_of", "failed_X")  # their flat keys

    @classmethod
    def empty(cls, dim: int, width: int | None = None) -> LabelledPoints:
        """No points; labels of ``width`` values per input (None: one, y of shape (n,))."""
        return cls(X=np.zeros((0, dim)), y=np.zeros(0 if width is None else (0, width)), source=np.zeros(0, dtype=np.int64),
                   round_of=np.zeros(0, dtype=np.int64), failed_X=np.zeros((0, dim)))

    def added(self, X: np.ndarray, y: np.ndarray, source: np.ndarray, round_: int,
              failed_X: np.ndarray) -> LabelledPoints:
        """These points with round ``round_``'s labelled rows (X, y, source) and failed inputs appended."""
        return LabelledPoints(X=np.concatenate([self.X, X]), y=np.concatenate([self.y, y]),
                              source=np.concatenate([self.source, source]),
                              round_of=np.concatenate([self.round_of, np.full(len(y), round_)]),
                              failed_X=np.concatenate([self.failed_X, failed_X]))

    def of(self, source: int) -> np.ndarray:
        """Indices of the rows drawn from ``source`` (a candidate's index or a source code)."""
        return np.flatnonzero(self.source == source)

    def to_flat(self) -> Flat:
        return {k: getattr(self, k) for k in self.KEYS}

    @classmethod
    def from_flat(cls, flat: Flat) -> LabelledPoints:
        X = flat["X"]
        # failed_X: absent from checkpoints that predate failed labels
        return cls(X=X, y=flat["y"], source=flat["source"], round_of=flat["round_of"],
                   failed_X=flat.get("failed_X", np.zeros((0, X.shape[1]))))


@dataclass(frozen=True)
class LabelledValidation:
    """The validation points whose labels came back, as they lie at the head of a state's X, y:
    ``member`` of each (Q's member index), ``fold`` (two folds alternating within each member),
    ``weights`` w_k / M'_k (M'_k = ``counts[k]`` labelled points of member k)."""

    member: np.ndarray
    fold: np.ndarray
    weights: np.ndarray
    counts: np.ndarray

    @property
    def n(self) -> int:
        return len(self.member)

    @classmethod
    def of(cls, member: np.ndarray, weights: np.ndarray) -> "LabelledValidation":
        counts = np.bincount(member, minlength=len(weights))
        for k, c in enumerate(counts):
            if c < 2:  # two-fold scores need a point of each member in each fold
                raise ValueError(f"labels: {c} validation label(s) of test_distributions.members.{k} came back; "
                                 "the budgeted design needs at least 2 per member")
        position = np.concatenate([np.arange(c) for c in counts])
        return cls(member=member, fold=position % 2, weights=weights[member] / counts[member], counts=counts)


def training_arrays(result: dict) -> dict[str, np.ndarray]:
    """The arrays of a budgeted job's ``training-set`` archive from its result: ``inputs`` (n, d)
    and ``labels`` (n,) or (n, p) (the served model's training set), ``left_out_inputs`` (m, d)
    and ``left_out_labels`` (m,) or (m, p) (paid labels the left-out check kept out of it; m = 0
    where it kept every one). Together they are every label the job paid for that came back."""
    ts, left = result["training_set"], result.get("left_out") or {}
    inputs = np.asarray(ts["inputs"], dtype=np.float64)
    labels = np.asarray(ts["labels"], dtype=np.float64)
    out_x = np.asarray(left["inputs"] if left.get("inputs") is not None else [], dtype=np.float64)
    out_y = np.asarray(left["labels"] if left.get("labels") is not None else [], dtype=np.float64)
    # the dimension (and a field's width) from whichever part has rows
    d = inputs.shape[1] if inputs.ndim == 2 else out_x.shape[1] if out_x.ndim == 2 else 0
    width = labels.shape[1:] if len(labels) else out_y.shape[1:]
    inputs = inputs.reshape(len(labels), d) if len(labels) else np.zeros((0, d))
    labels = labels if len(labels) else np.zeros((0, *width))
    out_x = out_x.reshape(len(out_y), d) if len(out_y) else np.zeros((0, d))
    out_y = out_y if len(out_y) else np.zeros((0, *width))
    return {"inputs": inputs, "labels": labels, "left_out_inputs": out_x, "left_out_labels": out_y}


def checkpoint_arrays(flat: Flat) -> dict[str, np.ndarray] | None:
    """The arrays of a budgeted job's ``training-set`` archive from its last checkpoint (the flat
    dict of its state, :func:`lwl.design.state.unpack`), for a job without a result (it failed, was
    cancelled, or runs on): ``inputs`` and ``labels``, every label the rounds it finished paid for
    and took in (Q's validation points first, then the initial data, then each round's points, as
    in :class:`LabelledPoints`), and ``left_out_inputs`` and ``left_out_labels`` empty (the left-out
    check runs only at the end). None where ``flat`` is not a budgeted job's checkpoint."""
    if "X" not in flat or "y" not in flat:
        return None
    points = LabelledPoints.from_flat(flat)
    inputs = np.asarray(points.X, dtype=np.float64)
    labels = np.asarray(points.y, dtype=np.float64)
    return {"inputs": inputs, "labels": labels, "left_out_inputs": np.zeros((0, inputs.shape[1])),
            "left_out_labels": np.zeros((0, *labels.shape[1:]))}
