"""The state of a budgeted job, whatever the algorithm (:mod:`lwl.design.budget`): where it is
(:class:`Phase`), its ledger of labelled points, the candidates still selected among, the
incumbent, the challenger and the rival. It checkpoints to the flat layout it always had."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

import numpy as np

from lwl.design.budget.ledger import LabelledPoints
from lwl.design.families import Params
from lwl.design.state import Flat, Kept, KeptLayout, StepperState

INCUMBENT_PREFIX, CHALLENGER_PREFIX = "inc_", "chal_"  # the flat keys of their parameters (inc_mean, chal_chol)
INCUMBENT = KeptLayout(params=INCUMBENT_PREFIX)  # the incumbent's Kept record: its parameters only


class Phase(StrEnum):
    """Where a budgeted job is: the validation round, the design rounds, finished."""

    VALIDATION = "label_validation"
    ROUND = "round"
    DONE = "done"


def float_params(params: Params) -> Params:
    """``params`` as float64 arrays (how a state holds a distribution's parameters)."""
    return {n: np.asarray(v, dtype=np.float64) for n, v in params.items()}


def _prefixed(flat: Flat, prefix: str) -> Params | None:
    """The parameters stored under ``prefix`` (inc_mean -> mean), or None when there are none."""
    out = {k[len(prefix):]: np.asarray(v) for k, v in flat.items() if k.startswith(prefix)}
    return out or None


@dataclass(kw_only=True)
class BudgetedState(StepperState):
    """The state of a budgeted job (:mod:`lwl.design.budget.design`); ``iteration`` counts the
    rounds done.

    The flat checkpoint layout is the one the dict state had: the points' arrays under X, y,
    source, round_of, failed_X; the incumbent's parameters under ``inc_<name>``, the
    challenger's under ``chal_<name>``; ``incumbent_name``, ``val_ok`` and the pending draws only once set."""

    UNTIL_SET = ("incumbent_name", "val_ok", "pending_X", "pending_source")

    phase: Phase = Phase.VALIDATION
    points: LabelledPoints
    alive: list[int]  # the candidates (indices into the design's candidates) selection still runs
    scores: dict[str, float] = field(default_factory=dict)  # each candidate's last two-fold validation Err, by name
    ell_of: dict[str, float] = field(default_factory=dict)  # the lengthscale each candidate's score chose, by name
    # who holds the lead: a candidate's index, MOVED (a family member the algorithm's steps reached,
    # its parameters in ``kept``), or None while selection goes on
    incumbent: int | None = None
    incumbent_name: str | None = None  # the candidate's name, or "moved (round r)"
    # the parameters of the incumbent when it is a member of the family (the record every algorithm
    # keeps its iterate in; only ``params`` is used here: the scores are in ``scores`` and the history,
    # and the checkpoint never held an err or iteration for it). After Q's mixture takes over in
    # the race it still holds those of the candidate it overtook (unused, checkpointed as before).
    kept: Kept | None = None
    # the distribution the algorithm's last steps moved to (BudgetedDesign.propose); it gets a quarter
    # of the next round while ``has_challenger`` (its parameters stay, unused, once its round is scored)
    challenger: Params | None = None
    has_challenger: bool = False
    rival: int | None = None  # Q's mixture's index while it races the incumbent, else None
    lengthscale: float  # the model's lengthscale: the incumbent's score's, at the end the final model's
    labels_failed: int = 0  # labels paid for that failed (len(failed_X) where the checkpoint keeps them)
    val_ok: np.ndarray | None = None  # which validation labels came back, when some failed (else all did)
    # the next round's inputs and their sources, fixed when the last round ended, where the algorithm
    # has a pool rule: its choice depends on models trained then, which a resumed job (another worker,
    # another device) must not retrain differently (BudgetedDesign._draws)
    pending_X: np.ndarray | None = None
    pending_source: np.ndarray | None = None

    def to_flat(self) -> Flat:
        flat = super().to_flat()
        flat.update(flat.pop("points").to_flat())
        kept, challenger = flat.pop("kept"), flat.pop("challenger")
        if kept is not None:
            flat.update(kept.to_flat(INCUMBENT))
        if challenger is not None:
            flat.update({CHALLENGER_PREFIX + n: v for n, v in challenger.items()})
        return flat

    @classmethod
    def from_flat(cls, flat: Flat, **kwargs: Any) -> Self:
        params = _prefixed(flat, INCUMBENT_PREFIX)
        return super().from_flat(flat, points=LabelledPoints.from_flat(flat),
                                 kept=None if params is None else Kept(params=params),
                                 challenger=_prefixed(flat, CHALLENGER_PREFIX), **kwargs)
