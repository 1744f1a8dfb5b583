"""Validated AMA (beyond the paper): Q's validation samples accept distribution steps and select
the returned iterate, as the bilevel method's checks do; and the state both AMA steppers share.

The paper's AMA accepts a distribution step when the *bound* falls and returns the last iterate.
The bound is loose (often vacuous, docs/method/operators.md) and its fall need not lower the OOD error: on
the RTE at eps = 1/8 the error rose after the first step while the bound fell. With
``select="validation"`` every model step is scored on Q's validation samples (labelled once;
the member-weighted relative error of SM eqn app_ntd_rel_ood_error):

- a model whose validation error beats the best so far makes (distribution, model) the kept pair;
- otherwise the last distribution step is taken back halfway towards the kept distribution and
  the kept model is restored (a backtracking line search driven by validation); after
  ``backtracks`` consecutive failures the design stops;
- the result is the kept pair (``selected`` says which iteration), the last one stays available
  as ``last_distribution``.

The two steppers (:mod:`lwl.design.ama`, :mod:`lwl.design.particles`) call :func:`judge` after
their model step; their states (:class:`AMAStateBase`) keep the pair as a :class:`Kept` record,
checkpointed under the ``best.`` keys of :data:`KEPT_LAYOUT`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Literal, Self, TypeVar

import numpy as np

from lwl.design.state import Flat, Kept, KeptLayout, StepperState

SELECTIONS = ("bound", "validation")

#: where the kept (distribution, model) pair sits in a checkpoint (``best.theta`` / ``best.c``,
#: ``best.model.<weight>``, ``best_validation``, ``best_iteration``)
KEPT_LAYOUT = KeptLayout(params="best.", err="best_validation", iteration="best_iteration", model="best.model.")
#: prefix of the current model's weights in a checkpoint (``model.<weight>``)
MODEL_PREFIX = "model."

Verdict = Literal["kept", "backtracked", "stop"]


class Phase(StrEnum):
    """Where an AMA design stands (the values are the checkpoints' strings)."""

    LIPSCHITZ = "lipschitz"  # parametric AMA only: label the pairs that estimate Lip(G*), and G*(0)
    ITERATE = "iterate"      # model step, then distribution step
    DONE = "done"


@dataclass(kw_only=True)
class AMAStateBase(StepperState):
    """The fields both AMA steppers' states share; a subclass names its distribution's parameters
    (``POINT``: parametric AMA's ``theta``, particle AMA's ``c``) and declares that field.

    The bound's constants are those of c_R (paper Prop. 3.1 / Cor. 3.2, :mod:`lwl.design.ama`):
    ``lipschitz_oracle`` = L = Lip(G*), ``lipschitz_model`` = R = Lip(G_hat) (given or estimated
    once), ``oracle_zero_sq`` = ||G*(0)||^2 and ``zero_sq`` = ||G*(0)||^2 + ||G_hat(0)||^2 for the
    current model."""

    POINT: ClassVar[str]
    #: fields a checkpoint leaves out while they are None (the dict states only set them later)
    UNTIL_SET: ClassVar[tuple[str, ...]] = ("validation_labels",)

    phase: Phase = Phase.ITERATE
    objective: float | None = None  # the bound at the current pair (None: not known, after a backtrack)
    lipschitz_oracle: float | None = None
    lipschitz_model: float | None = None
    zero_sq: float | None = None
    oracle_zero_sq: float | None = None
    labels_used: int = 0  # oracle labels spent so far
    model: dict[str, np.ndarray] | None = None  # the current model's weights (None before the first model step)
    validation_labels: np.ndarray | None = None  # G* on Q's validation samples (select="validation")
    best: Kept | None = None  # the kept (distribution, model) pair (select="validation")
    backtracks: int = 0  # consecutive validation failures since the pair was kept

    @property
    def point(self) -> np.ndarray:
        """The distribution's current parameters (the field ``POINT`` names)."""
        return getattr(self, self.POINT)

    def at(self, point: np.ndarray) -> Self:
        """The state with the distribution's parameters moved to ``point``."""
        return self.replace(**{self.POINT: point})

    def candidate(self, model, err: float) -> Kept:
        """The current (distribution, model) pair as a record, scored ``err`` on validation."""
        return Kept(params={self.POINT: np.array(self.point, dtype=np.float64, copy=True)}, iteration=int(self.iteration),
                    err=float(err), model=model.get_weights())

    def to_flat(self) -> Flat:
        """Today's checkpoint layout: the model as ``model.<weight>``, the kept pair under
        :data:`KEPT_LAYOUT` with ``backtracks`` (both absent until the first validation)."""
        flat = super().to_flat()
        del flat["model"], flat["best"]
        if self.best is None:
            del flat["backtracks"]
        flat.update({MODEL_PREFIX + name: w for name, w in (self.model or {}).items()})
        if self.best is not None:
            flat.update(self.best.to_flat(KEPT_LAYOUT))
        return flat

    @classmethod
    def from_flat(cls, flat: Flat, **kwargs: Any) -> Self:
        model = {k[len(MODEL_PREFIX):]: v for k, v in flat.items() if k.startswith(MODEL_PREFIX)} or None
        best = Kept.from_flat(flat, KEPT_LAYOUT, [cls.POINT])
        return super().from_flat(flat, model=model, best=best, **kwargs)


S = TypeVar("S", bound=AMAStateBase)


def put_best(state: S, kept: Kept) -> S:
    """The state with ``kept`` as the best validated pair (and no backtracks since)."""
    return state.replace(best=kept, backtracks=0)


def best_weights(state: AMAStateBase) -> dict[str, np.ndarray]:
    """The kept model's weights ({} before any pair is kept)."""
    return state.best.model if state.best is not None and state.best.model else {}


class PairModels:
    """The models of an AMA stepper's state, for steppers that keep (distribution, model) pairs
    (:mod:`lwl.design.ama`, :mod:`lwl.design.particles`): they set ``model_factory`` (seed ->
    an untrained model), ``seed``, ``z`` (the trunk's points) and ``select``."""

    def model(self, state: AMAStateBase, weights: dict[str, np.ndarray] | None = None):
        """The model with ``weights`` (default: the current ones; None before the first model step)."""
        weights = state.model if weights is None else weights
        return self.model_factory(self.seed).set_weights(weights, self.z) if weights else None

    def selected_model(self, state: AMAStateBase):
        """The model the result reports: the best validated one (``select="validation"``, once a
        pair is kept), else the last."""
        return self.model(state, (best_weights(state) if self.select == "validation" else {}) or state.model or {})


def judge(state: S, candidate: Kept, max_backtracks: int) -> tuple[S, Verdict]:
    """After a model step whose pair scored ``candidate.err`` on validation: keep it ("kept"), or
    move the distribution halfway back to the kept one ("backtracked"), or give up ("stop")."""
    if state.best is None or candidate.err < state.best.err:
        return put_best(state, candidate), "kept"
    if state.backtracks >= max_backtracks:
        return state, "stop"
    best = state.best.params[state.POINT]
    return state.at(best + 0.5 * (np.asarray(state.point) - best)).replace(backtracks=state.backtracks + 1), \
        "backtracked"
