"""The scores every decision of a budgeted design reads (docs/method/budgets.md "Designs for a label
budget"): two-fold validation on Q's labelled validation points, and the paired comparison of two
sets of points at equal numbers.

Selection, the race, refinement, the left-out check and the validation verdict all score a set of
points the same way: the job's model trained on one half of the labelled validation points plus
the points, scored on the other half, so that every validation point is scored once,

    Err^2 = sum_i a_i e_i / sum_i a_i |y_i|^2,   a_i = w_k / M_k

(e_i the squared error at validation point i of member k of Q, w_k its weight, M_k its
labelled validation points). Two scores on the same folds are compared paired: the standard
errors by which Err^2 fell (:func:`improvement_z`, stratified by Q's members).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from lwl.design.budget.ledger import LabelledValidation
from lwl.design.budget.state import BudgetedState
from lwl.q_samples import MetaTestSamples

ACCEPT_Z = 1.645  # a challenger replaces the incumbent when it validates better by this many standard errors


class Scored(Protocol):
    """What the scores read of a budgeted design (:class:`lwl.design.budget.design.BudgetedDesign`):
    its labelled validation points, the model a score trains, and the error of a point."""

    q: MetaTestSamples

    def validation(self, state: BudgetedState) -> LabelledValidation: ...

    def scorer(self, state: BudgetedState, ell: float): ...

    def fold_sq_errors(self, model, X: np.ndarray, y: np.ndarray) -> np.ndarray: ...

    def sq_norms(self, y: np.ndarray) -> np.ndarray: ...

    def two_fold(self, state: BudgetedState, extra: np.ndarray, grid: list[float], residuals: bool = False,
                 fit=None): ...

    def improvement_z(self, sq_new: np.ndarray, sq_old: np.ndarray, y: np.ndarray,
                      val: LabelledValidation) -> float: ...


def two_fold(design: Scored, state: BudgetedState, extra: np.ndarray, grid: list[float],
             residuals: bool = False, fit=None):
    """(score, lengthscale): two-fold validation Err of the model (the design's ``scorer``) trained on one half of the
    labelled validation points plus the pool rows ``extra`` (indices) and scored on the other half, so
    that every validation point is scored once: Err^2 = sum_i a_i e_i / sum_i a_i y_i^2 (a_i =
    w_k / M_k); the lowest over ``grid``. ``residuals=True`` adds the squared errors e_i;
    ``fit`` ((X, y) -> model) replaces the scorer (then ``grid`` is one value)."""
    val = design.validation(state)
    nv = val.n
    points = state.points
    Xv, yv = points.X[:nv], points.y[:nv]
    Xe, ye = points.X[extra], points.y[extra]
    a = val.weights
    best = (float("inf"), grid[0], None)
    for ell in grid:
        sq = np.full(nv, np.inf)
        fit_ell = fit if fit is not None else design.scorer(state, ell)
        for f in (0, 1):
            train, test = val.fold != f, val.fold == f
            X = np.concatenate([Xv[train], Xe])
            Y = np.concatenate([yv[train], ye])
            try:
                model = fit_ell(X, Y)
            except np.linalg.LinAlgError:
                break
            sq[test] = design.fold_sq_errors(model, Xv[test], yv[test])
        score = float(np.sqrt(a @ sq / (a @ design.sq_norms(yv))))
        if np.isfinite(score) and score < best[0]:
            best = (score, ell, sq)
    return best if residuals else best[:2]


def improvement_z(design: Scored, sq_new: np.ndarray, sq_old: np.ndarray, y: np.ndarray,
                  val: LabelledValidation) -> float:
    """Standard errors by which Err^2 fell from ``sq_old`` to ``sq_new`` (paired on the
    labelled validation points ``val``, stratified by Q's members; as
    :meth:`BilevelDesign.improvement_z`)."""
    a = val.weights
    den = float(a @ design.sq_norms(y))
    diff = sq_new - sq_old
    var = sum((w / den) ** 2 * float(diff[val.member == k].var(ddof=1)) / val.counts[k]
              for k, w in enumerate(design.q.weights) if val.counts[k] > 1)
    delta = float(a @ diff) / den
    return -delta / np.sqrt(var) if var > 0 else (float("inf") if delta < 0 else 0.0)


def versus(design: Scored, state: BudgetedState, other: int, n: int | None = None,
           mine: int | None = None) -> dict | None:
    """The incumbent's points (or candidate ``mine``'s) against candidate ``other``'s at equal
    numbers n (the first n of each; ``n`` None: as many as the smaller side has), each added to
    the same half of the labelled validation points and scored on the other half (two-fold,
    paired), as the selection scores: ``{"points_each", "incumbent_score", "rival_score", "z"}``,
    z > 0 when ``other`` validates better (in standard errors); None when either has no point."""
    mine = state.points.of(state.incumbent if mine is None else mine)
    theirs = state.points.of(other)
    n = min(len(mine), len(theirs), *([n] if n is not None else []))
    if n == 0:
        return None
    grid = [float(state.lengthscale)]
    s_inc, _, sq_inc = design.two_fold(state, mine[:n], grid, residuals=True)
    s_oth, _, sq_oth = design.two_fold(state, theirs[:n], grid, residuals=True)
    val = design.validation(state)
    z = (design.improvement_z(sq_oth, sq_inc, state.points.y[:val.n], val)
         if sq_inc is not None and sq_oth is not None else float("nan"))
    return {"points_each": int(n), "incumbent_score": s_inc, "rival_score": s_oth,
            "z": float(z) if np.isfinite(z) else None}
