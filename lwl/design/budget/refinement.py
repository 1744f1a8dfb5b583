"""Refinement rounds of a budgeted design (docs/method/budgets.md "Designs for a label budget").

Where the algorithm can move a distribution on the labels already paid for (its ``propose``: the
bilevel gradient on a surrogate, ...), the moved distribution is the next round's **challenger**
(:func:`move`): the round buys three quarters of its labels from the incumbent and a quarter from
the challenger, which replaces the incumbent when its points, added to everything bought before,
validate better beyond noise (ACCEPT_Z standard errors, :func:`refine`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from lwl.design.budget.ledger import CHALLENGER, MOVED, VALIDATION
from lwl.design.budget.scores import ACCEPT_Z, Scored
from lwl.design.budget.state import BudgetedState, float_params
from lwl.design.families import Params
from lwl.design.state import Kept
from lwl.streams import STREAM_BUDGET

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import the designs
    from lwl.spec import JobSpec

SCORE_POOL_MAX = 2000  # refinement scores add at most this many earlier points to each candidate's


class Refining(Scored, Protocol):
    """What refinement reads of a budgeted design (:class:`lwl.design.budget.design.BudgetedDesign`)
    beyond its scores: the algorithm's move."""

    spec: JobSpec

    def incumbent_name(self, state: BudgetedState) -> str | None: ...

    def propose(self, state: BudgetedState, record: dict) -> Params | None: ...


def refine(design: Refining, old: BudgetedState, new: BudgetedState, record: dict) -> BudgetedState:
    """After a round with a challenger: score incumbent and challenger points, each added to
    (a subsample of) everything bought before the round; the better one is the incumbent."""
    r = old.iteration
    record["kind"] = "refinement"
    record["incumbent"] = design.incumbent_name(new)
    if not old.has_challenger:
        return new
    points = new.points
    before = np.flatnonzero((points.round_of < r) & (points.source != VALIDATION))
    if len(before) > SCORE_POOL_MAX:
        rng = np.random.default_rng([design.spec.seed, STREAM_BUDGET, r, 10_000])
        before = np.sort(rng.choice(before, SCORE_POOL_MAX, replace=False))
    this = points.round_of == r
    inc_idx = np.flatnonzero(this & (points.source != CHALLENGER))
    chal_idx = np.flatnonzero(this & (points.source == CHALLENGER))
    grid = [float(new.lengthscale)]
    s_inc, _, sq_inc = design.two_fold(new, np.concatenate([before, inc_idx]), grid, residuals=True)
    s_chal, _, sq_chal = design.two_fold(new, np.concatenate([before, chal_idx]), grid, residuals=True)
    val = design.validation(new)
    z = (design.improvement_z(sq_chal, sq_inc, points.y[:val.n], val)
         if sq_inc is not None and sq_chal is not None else -float("inf"))
    # the challenger must beat the incumbent beyond validation noise (a one-sided 5% test)
    accept = bool(z >= ACCEPT_Z)
    record.update(incumbent_score=s_inc, challenger_score=s_chal, validation_err=min(s_inc, s_chal),
                  z=float(z) if np.isfinite(z) else None, accepted=accept)
    if accept:
        new = new.replace(kept=Kept(params=old.challenger), incumbent=MOVED,
                          incumbent_name=f"moved (round {r + 1})")
        record["incumbent"] = new.incumbent_name
    return new.replace(has_challenger=False)


def move(design: Refining, new: BudgetedState, record: dict) -> BudgetedState:
    """The next round's challenger, where the algorithm proposes one (its ``propose``)."""
    moved = design.propose(new, record)
    if moved is None:
        return new
    return new.replace(challenger=float_params(moved), has_challenger=True)
