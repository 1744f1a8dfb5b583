"""The left-out check of a budgeted job: which paid labels the served model trains on
(docs/method/budgets.md, "Left out of the served model").

Every paid label is training data, unless (where the algorithm asks for the check, its
``checks_left_out``) the points of the candidates the design dropped make the served model worse
on Q's validation labels beyond noise. Why: a gp whose hyperparameters are fitted to a few
heavy-tailed labels far from Q (a broadened candidate's points on Sobol's G) explains every label
as noise and predicts about the mean.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from scipy import stats

from lwl.design.budget.ledger import MOVED
from lwl.design.budget.scores import ACCEPT_Z, Scored
from lwl.design.budget.state import BudgetedState, Phase
from lwl.models.diagnosis import FIT_ERRORS


LEAVE_OUT_Z = ACCEPT_Z  # the left-out check leaves the dropped candidates' points out at this many standard errors (served_rows)
# the rank rule (served_rows, rank_lower_p): also leave them out where Err^2 does not rise without them
# (z > 0) and the points' ranks say lower without them at this one-sided p. Off (None): on a problem
# nobody tuned on it turned a better job worse (Sobol G d 2: served Err 0.0214 -> 0.0562, the
# median-type test does not see what moves Err^2; docs/results/budget-full-8000-gp-rank/README.md
# "The left-out check's rank rule, measured"); the rank p is still recorded in every check
LEAVE_OUT_RANK_P: float | None = None
RANK_MIN_POINTS = 20  # the rank test needs this many points whose squared errors differ (else p = 1)


class LeavingOut(Scored, Protocol):
    """What the left-out check reads of a budgeted design
    (:class:`lwl.design.budget.design.BudgetedDesign`) beyond its scores: whether it asks for the
    check, its bars, the model a set of rows is served with, and the check's cache."""

    leave_out_z: float
    leave_out_rank_p: float | None
    _served_cache: tuple

    @property
    def checks_left_out(self) -> bool: ...

    def rows_scorer(self, state: BudgetedState, rows: np.ndarray): ...

    def _q_mixture_index(self) -> int: ...

    def _source_name(self, s: int) -> str: ...


def rank_lower_p(sq_new: np.ndarray, sq_old: np.ndarray, weights: np.ndarray) -> float:
    """One-sided p-value of the Wilcoxon signed-rank test (normal approximation) that the points'
    contributions to the change in Err^2, a_i (e_new,i - e_old,i) with a_i = w_k / M_k, are centred
    below zero (H1: lower with ``sq_new``). Unlike the paired z of the Err^2 difference it is not set
    by a handful of extreme labels. Points whose errors are equal, or not finite, are dropped; fewer
    than RANK_MIN_POINTS left: 1.0 (nothing to say)."""
    d = np.asarray(weights) * (np.asarray(sq_new) - np.asarray(sq_old))
    d = d[np.isfinite(d) & (d != 0)]
    if len(d) < RANK_MIN_POINTS:
        return 1.0
    return float(stats.wilcoxon(d, alternative="less", method="asymptotic").pvalue)


def served_rows(design: LeavingOut, state: BudgetedState) -> tuple[np.ndarray, dict | None]:
    """(rows, check): the points the served model trains on, and the left-out check that chose
    them (None: not run, every row). Every paid label is training data, unless (where the
    algorithm asks for it, its ``checks_left_out``) the points of the candidates the design
    dropped (in selection, or the one Q's mixture overtook in the race) make the served model
    worse on Q's validation labels beyond noise: the model trained on everything against the
    model trained without them (each with what it would be served with, the design's ``rows_scorer``:
    a gp's hyperparameters fitted to its own rows, Q's validation labels included, as the
    selection scores' are: the scored fold's labels are a larger share of the smaller arm's
    fitting set, which leans the check a little towards leaving points out), two-fold on the
    labelled validation points and paired (the design's ``improvement_z``); they are left out when it
    is better by the design's ``leave_out_z`` standard errors (LEAVE_OUT_Z); with its ``leave_out_rank_p``
    set (off by default, LEAVE_OUT_RANK_P), also when Err^2 is not higher without them (z > 0)
    and the points' ranks say it is lower (:func:`rank_lower_p` below it; the rank p is
    recorded either way, docs/results/budget-full-8000-gp-rank/README.md "The left-out check's rank rule"). A fit that fails
    leaves every point in. Kept always: Q's validation points, the initial data, Q's mixture's
    points, the incumbent's (the candidates still alive when selection did not settle, the moved
    one's origin), the challengers'."""
    n = len(state.points.y)
    everything = np.arange(n)
    if not design.checks_left_out or state.phase is not Phase.DONE:
        return everything, None
    # the rows and labels decide it (a design object may see more than one run's states)
    P = state.points
    key = (n, int(state.iteration), state.incumbent, tuple(state.alive), hash(P.y.tobytes()), hash(P.X.tobytes()),
           hash(P.source.tobytes()), None if state.val_ok is None else np.asarray(state.val_ok, dtype=bool).tobytes())
    if design._served_cache[0] == key:
        return design._served_cache[1]
    kept_c = {design._q_mixture_index()}
    if state.incumbent is None or state.incumbent == MOVED:
        kept_c.update(state.alive)  # selection did not settle, or the moved one's origin
    elif state.incumbent >= 0:  # (a candidate Q's mixture overtook in the race stays in alive: dropped)
        kept_c.add(state.incumbent)
    src = state.points.source
    val = design.validation(state)
    nv = val.n
    keep = (src < 0) | np.isin(src, sorted(kept_c))
    keep[:nv] = True
    out: tuple[np.ndarray, dict | None] = (everything, None)
    if not keep.all():
        grid = [float(state.lengthscale)]
        rest, kept = np.arange(nv, n), np.flatnonzero(keep[nv:]) + nv
        dropped = sorted({int(c) for c in src[~keep]})
        check = {"candidates": [design._source_name(c) for c in dropped], "points": int((~keep).sum()),
                 "score_all": None, "score_without": None, "z": None, "left_out": False}
        try:
            s_all, _, sq_all = design.two_fold(state, rest, grid, residuals=True,
                                               fit=design.rows_scorer(state, everything))
            s_kept, _, sq_kept = design.two_fold(state, kept, grid, residuals=True,
                                                 fit=design.rows_scorer(state, np.flatnonzero(keep)))
        except FIT_ERRORS as exc:
            # a fit that fails (K_y not positive definite, out of memory) decides nothing: every paid label is
            # served (and a served fit that fails too leaves the job its training set: serving.final_served)
            check["error"] = f"not checked: {exc}"
        else:
            paired = sq_all is not None and sq_kept is not None
            z = design.improvement_z(sq_kept, sq_all, state.points.y[:nv], val) if paired else float("nan")
            p = rank_lower_p(sq_kept, sq_all, val.weights) if paired else float("nan")
            by_ranks = (design.leave_out_rank_p is not None and np.isfinite(z) and z > 0
                        and p < design.leave_out_rank_p)
            check.update(score_all=s_all, score_without=s_kept, z=float(z) if np.isfinite(z) else None,
                         rank_p=float(p) if np.isfinite(p) else None,
                         left_out=bool(np.isfinite(z) and z > design.leave_out_z or by_ranks))
        out = (np.flatnonzero(keep) if check["left_out"] else everything, check)
    design._served_cache = (key, out)
    return out
