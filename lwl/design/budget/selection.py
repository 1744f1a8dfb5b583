"""Selection among a budgeted design's candidates, and the race against Q's mixture (docs/method/budgets.md
"Designs for a label budget").

- **Successive halving** (:func:`select`): after each selection round every live candidate is
  scored by two-fold validation of the job's model trained on half of the validation points plus
  all of its own points so far (:func:`lwl.design.budget.scores.two_fold`), and the better half
  lives on. With ``algorithm.explore`` Q's mixture is the **default**: scored at equal numbers of
  points, never dropped, and replaced by the last of the others only when that one validates
  better beyond noise (ACCEPT_Z standard errors, paired).
- **The race** (:func:`race`): when selection picks another candidate, Q's mixture gets a
  ``hedge`` share of every later round, and takes over when it validates better by RIVAL_Z
  standard errors at equal numbers of points, or, where a design sets ``race_trend_ratio``, when
  the race's learning curves extrapolated to the design's planned points put it ahead by that
  ratio (:func:`race_trend`).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from lwl.design.budget.candidates import Q_MIXTURE, Candidate
from lwl.design.budget.ledger import POOLED
from lwl.design.budget.plan import BudgetPlan
from lwl.design.budget.scores import ACCEPT_Z, Scored
from lwl.design.budget.settings import BudgetAlgorithm, explore_min
from lwl.design.budget.state import BudgetedState, float_params
from lwl.design.state import Kept


RACE_MIN_POINTS = 128  # the race switches only once each side has this many points
RIVAL_Z = 1.0  # Q's mixture takes over when it validates better by this many standard errors (race; asymmetric: docs/method/budgets.md)
# ... or, where a design sets race_trend_ratio (off by default: docs/method/budgets.md "The race's trend"), when
# the race's learning curves, extrapolated to the design's planned points, put Q's mixture ahead by that
# ratio; this is the value measured: Table 1's g4 at 8,000, the given N(1/2, I) ahead of Q's mixture by
# z = 8.5 at 292 points each, by 0.4 at 1,536, 19% behind on held-out data; the rule mends it (tie) but
# fires on noise where the ratio is near 1 (KRR p01 at 8,000: 10% higher Err), so it stays off
RACE_TREND_RATIO = 1.05
RACE_TREND_MIN_POINTS = 512  # ... only from this many points each: at 2,000 labels' few hundred the
# two-point trend put six ratios of 0.10-0.41 (held-out) at 1.01-4.3 (docs/method/budgets.md "The race's trend")
RACE_TREND_MIN_LOOKS = 4  # ... fitted on at least this many looks within the last halving of the points
# ... and only where the incumbent's lead at the look is within this ratio (incumbent / Q's mixture at
# least RACE_TREND_LEAD): the fit reads 5-10x beyond its looks, and on Friedman 2 (p02 at 8,000) one
# noisy look (ratio 0.44 -> 0.82 -> 0.54) extrapolated to 3.7 with the design 6x ahead on held-out data
RACE_TREND_LEAD = 0.85


class Selecting(Scored, Protocol):
    """What selection and the race read of a budgeted design
    (:class:`lwl.design.budget.design.BudgetedDesign`) beyond its scores."""

    candidates: list[Candidate]
    algo: BudgetAlgorithm
    plan: BudgetPlan
    unexplored: list[str]
    race_trend_ratio: float | None

    @property
    def explore(self) -> float | None: ...

    def _q_mixture_index(self) -> int: ...

    def lengthscale_grid(self, around: float | None = None) -> list[float]: ...

    def versus(self, state: BudgetedState, other: int, n: int | None = None, mine: int | None = None) -> dict | None: ...

    def incumbent_name(self, state: BudgetedState) -> str | None: ...


def select(design: Selecting, new: BudgetedState, record: dict) -> BudgetedState:
    """Score the live candidates on everything they were given; keep the better half (the
    last one left is the incumbent; Q's mixture alone, where nothing is explored, is scored on
    its pooled points too and becomes it). With ``algorithm.explore``, Q's mixture is the default:
    it is scored on as many of its points as the others have, never dropped, and the others
    are halved among themselves; the last of them left becomes the incumbent only when it
    validates better than Q's mixture at equal numbers of points by ACCEPT_Z standard errors
    (the design's ``versus``), else Q's mixture does."""
    alive = new.alive
    q = design._q_mixture_index()
    default = design.explore is not None and q in alive and len(alive) > 1
    others = [c for c in alive if c != q] if default else alive
    scores, ells = dict(new.scores), dict(new.ell_of)
    for c in alive:
        name = design.candidates[c][0]
        # a candidate's own points only: added to the initial data, a handful of points per
        # candidate changes nothing and selection goes by noise (docs/method/budgets.md, initial data)
        given = new.points.of(c)
        if default and c == q:  # at equal numbers: Q's mixture's extra points would favour it
            given = given[:max(len(new.points.of(o)) for o in others)]
        elif alive == [q]:  # Q's mixture alone (unexplored): scored on its own points and the pooled ones
            given = np.flatnonzero(np.isin(new.points.source, [q, POOLED]))
        scores[name], ells[name] = design.two_fold(new, given, design.lengthscale_grid())
    ranked = sorted(others, key=lambda c: (scores[design.candidates[c][0]], c))
    keep = ranked[:max(1, math.ceil(len(others) / 2))]
    best = min(alive, key=lambda c: (scores[design.candidates[c][0]], c))
    if default and len(keep) == 1:  # the last challenger of the default: better beyond noise, or out
        challenger = design.candidates[keep[0]][0]
        duel = design.versus(new.replace(lengthscale=ells.get(challenger, new.lengthscale)), keep[0], mine=q)
        # incumbent_score: Q's mixture's; rival_score: the challenger's (versus's names)
        record["default_duel"] = {"candidate": challenger, **(duel or {})}
        keep = keep if duel is not None and duel["z"] is not None and duel["z"] >= ACCEPT_Z else [q]
    elif default:
        keep = [*keep, q]
    new = new.replace(scores=scores, ell_of=ells, alive=sorted(keep))
    record.update(kind="selection", scores={design.candidates[c][0]: scores[design.candidates[c][0]] for c in alive},
                  alive=[design.candidates[c][0] for c in sorted(keep)],
                  validation_err=scores[design.candidates[best][0]])
    if len(keep) == 1:
        c = keep[0]
        name = design.candidates[c][0]
        params = design.candidates[c][2]
        new = new.replace(incumbent=c, incumbent_name=name, lengthscale=ells[name],
                          kept=new.kept if params is None else Kept(params=float_params(params)))
        record["incumbent"] = name
        if name != Q_MIXTURE and design.algo.hedge > 0:  # the race against Q's mixture (race)
            new = new.replace(rival=design._q_mixture_index())
            record["rival"] = "q_mixture"
    return new


def best_alive(design: Selecting, state: BudgetedState) -> int:
    """The candidate returned when the budget ends before selection settles: the lowest score,
    or Q's mixture while it is the default (``explore``: no other beat it beyond noise yet)."""
    q = design._q_mixture_index()
    if design.explore is not None and q in state.alive:
        return q
    scores = state.scores
    return min(state.alive, key=lambda c: (scores.get(design.candidates[c][0], float("inf")), c))


def default_rule(design: Selecting) -> str:
    """The words the design's ``selection_rule`` gets when Q's mixture is the default (``explore``)."""
    explore = design.explore
    return "" if explore is None or design.unexplored else (
        f"; Q's mixture the default (it takes {1 - explore:.0%} of each selection round, the others are halved "
        f"among themselves, and the last of them replaces it only when better beyond noise)")


def unexplored_rule(design: Selecting, state: BudgetedState) -> str:
    """The words the design's ``selection_rule`` gets when no candidate besides Q's mixture ran (a job
    started before ``explore_min`` existed resumes exploring: its ledger says so)."""
    q = design._q_mixture_index()
    others = [c for c in range(len(design.candidates)) if c != q]
    if not design.unexplored or state.alive != [q] or np.isin(state.points.source, others).any():
        return ""
    return (f"; no candidate besides Q's mixture explored ({', '.join(design.unexplored)}): the first selection "
            f"round would give each fewer than explore_min = {explore_min(design.algo)} labels")


def race(design: Selecting, new: BudgetedState, record: dict) -> BudgetedState:
    """After a round with a rival (Q's mixture, given a ``hedge`` share of the round): compare
    incumbent and rival at equal numbers of points, each added to the same half of the
    validation points (two-fold, paired). The rival becomes the incumbent when it validates
    better by RIVAL_Z (1) standard errors, and is never dropped before: a candidate that wins with a
    hundred points can lose with a thousand (Table 1's g4: the given N(1/2, I) against Q's
    mixture, docs/method/budgets.md), so the race goes on at the sizes the budget reaches, and until it
    is decided a ``hedge`` share of the labels is Q's own."""
    rival = new.rival
    look = design.versus(new, rival)
    if look is None:
        return new
    name = design.incumbent_name(new)
    record["race"] = {"rival": "q_mixture", "incumbent": name, **look}
    z = look["z"] if look["z"] is not None else 0.0
    # the looks at this incumbent (a challenger that replaced it starts a curve of its own)
    looks = [(h["race"]["points_each"], h["race"]["incumbent_score"], h["race"]["rival_score"])
             for h in new.history if (h.get("race") or {}).get("incumbent") == name] + [
                 (look["points_each"], look["incumbent_score"], look["rival_score"])]
    trend = race_trend(looks, sum(design.plan.rounds))
    if trend is not None:
        record["race"]["trend_ratio"] = trend
    lead = look["incumbent_score"] / look["rival_score"] if look["rival_score"] > 0 else None
    by_trend = (design.race_trend_ratio is not None and trend is not None and trend >= design.race_trend_ratio
                and look["points_each"] >= RACE_TREND_MIN_POINTS and lead is not None and lead >= RACE_TREND_LEAD)
    # a few dozen points each decide nothing (and a look every round would switch on noise)
    if (z >= RIVAL_Z or by_trend) and look["points_each"] >= RACE_MIN_POINTS:
        record["race"]["overtook"] = name
        name = design.candidates[rival][0]
        new = new.replace(incumbent=rival, incumbent_name=name, rival=None,
                          lengthscale=float(new.ell_of.get(name, new.lengthscale)))
        record["race"]["outcome"] = "rival won"
        record["race"]["by"] = "z" if z >= RIVAL_Z else "trend"
        record["incumbent"] = name
    return new


def race_trend(looks: list[tuple[int, float, float]], target: int) -> float | None:
    """The race's validation Err ratio (incumbent / Q's mixture) extrapolated to ``target`` points
    each, from its looks ``(points_each, incumbent_score, rival_score)``, one per race round: the
    power law log ratio = a + b log m (learning curves Err ~ c m^-alpha on both sides, as
    :func:`lwl.design.budget.verdict.extrapolated_ratio`) fitted by least squares to the looks at half the last look's points
    or more (the curves bend: an early look says little about the last halving). None with fewer
    than RACE_TREND_MIN_LOOKS such looks or a score that is not positive. A look's points are the
    first m of each side, so looks are nested and the fit is a trend, not a test: the race acts on
    it only above RACE_TREND_MIN_POINTS points each and a ratio of RACE_TREND_RATIO (:func:`race`)."""
    if not looks:
        return None
    last = looks[-1][0]
    # a failed fit scores inf, and a resumed service job's stored history holds it as null
    window = [(m, a / b) for m, a, b in looks
              if m >= last / 2 and a is not None and b is not None and 0 < a < math.inf and 0 < b < math.inf]
    if len(window) < RACE_TREND_MIN_LOOKS or len({m for m, _ in window}) < 2:
        return None
    lm, lr = np.log([m for m, _ in window]), np.log([r for _, r in window])
    slope, intercept = np.polyfit(lm, lr, 1)
    trend = float(np.exp(intercept + slope * math.log(max(target, last))))
    return trend if math.isfinite(trend) else None
