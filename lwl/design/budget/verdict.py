"""The validation verdict of a budgeted job and its words (docs/method/budgets.md "Designs for a label
budget").

The verdict a job can draw from its own labels, with no held-out label (what an ask/tell job gets;
the audit's verdict at equal labels replaces it where that runs): the returned distribution's
points against Q's mixture's at equal numbers, on Q's labelled validation points. The same
comparison at half the points each gives the trend, the ratio extrapolated to the training set's
size by the learning-curve power law (:func:`extrapolated_ratio`); it withholds a verdict whose
direction it reverses, and never makes one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np

from lwl.design.budget.candidates import Q_MIXTURE
from lwl.design.budget.scores import ACCEPT_Z
from lwl.design.budget.selection import Selecting, best_alive
from lwl.design.budget.state import BudgetedState
from lwl.names import words

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import the designs
    from lwl.spec import JobSpec

TREND_MIN_POINTS = 32  # the validation verdict's trend needs this many points each at half its size


class Judged(Selecting, Protocol):
    """What the validation verdict reads of a budgeted design
    (:class:`lwl.design.budget.design.BudgetedDesign`) beyond what selection reads."""

    spec: JobSpec
    y0: np.ndarray

    def _source_name(self, s: int) -> str: ...


def validation_verdict(design: Judged, state: BudgetedState) -> dict:
    """The verdict a job can draw from its own labels, with no held-out label (what an
    ask/tell job gets; the audit's verdict at equal labels replaces it where that runs): the
    returned distribution's points against Q's mixture's at equal numbers, on Q's labelled
    validation points (the design's ``versus``). Those points also chose the distribution, so the
    comparison leans its way; said in ``basis``. The same comparison at half the points each
    gives the trend (``trend``: :func:`extrapolated_ratio` to the training set's size); a
    ``better`` or ``worse`` whose direction the trend reverses at that size is a ``tie``, with
    a warning: a ranking at a few hundred points can reverse at a few thousand (Table 1's g4,
    docs/method/budgets.md). Fields as :func:`lwl.evaluation.heldout.verdict`'s
    (``best_baseline`` "mixture", ``ratio`` of validation Errs), ``kind`` "validation"."""
    val_n = design.validation(state).n
    overtaken = next((h for h in state.history if h.get("race", {}).get("outcome") == "rival won"), None)
    name = design.incumbent_name(state) or design._source_name(best_alive(design, state))
    out = {"kind": "validation", "best_baseline": "mixture", "ratio_interval_95": None, "err_interval_95": None,
           "initial_outcome": None, "beats_initial": None, "draws": 1, "returned_initial": False,
           "initial_label": "Q's mixture", "selected": name, "validation_points": int(val_n), "trend": None,
           "basis": f"two-fold validation on the {val_n} labelled validation points of Q, which also chose the "
                    "distribution (so the comparison leans its way); no held-out label was paid for",
           "warnings": []}
    if name == Q_MIXTURE:
        score = state.scores.get("q_mixture")
        last = overtaken["race"] if overtaken else None
        out.update(err=last["rival_score"] if last else score, best_baseline_err=last["rival_score"] if last else score,
                   ratio=1.0, outcome="tie", beats_best_baseline=False, returned_initial=True, z=None,
                   points_each=last["points_each"] if last else None)
        out["baselines"] = {"mixture": out["best_baseline_err"]}
        duel = next((h["default_duel"] for h in state.history if "default_duel" in h), None)
        if duel is not None and not overtaken and duel.get("z") is not None:
            out["basis"] += (f"; Q's mixture stayed the default: {words(duel['candidate'], design.spec.family.name)} "
                             f"did not validate better beyond noise (z = {duel['z']:.2f} at "
                             f"{duel['points_each']} points each)")
        if overtaken:
            overtook = words(last["overtook"], design.spec.family.name)
            if last.get("by") == "trend":  # ahead no longer than the trend said it would stay
                lead = last["incumbent_score"] / last["rival_score"]
                out["basis"] += (f"; Q's mixture overtook {overtook} in round {overtaken['round']} by the race's "
                                 f"trend: validation Err ratio ({overtook} / Q's mixture) {lead:.3f} at "
                                 f"{last['points_each']} points each, extrapolated to {last['trend_ratio']:.3f} at "
                                 f"the design's {sum(design.plan.rounds)} points")
            else:
                out["basis"] += (f"; Q's mixture overtook {overtook} in round {overtaken['round']} "
                                 f"(z = {last['z']:.2f} at {last['points_each']} points each)")
        return out
    race = design.versus(state, design._q_mixture_index()) if state.incumbent is not None else None
    if race is None or race["z"] is None:  # nothing to compare: no verdict, and the job says why
        out["warnings"].append(no_verdict_reason(design, state, race))
        return {**out, "err": None, "best_baseline_err": None, "baselines": {}, "ratio": None, "outcome": None,
                "beats_best_baseline": None, "z": None, "points_each": None}
    z = race["z"]
    outcome = "better" if z <= -ACCEPT_Z else "worse" if z >= ACCEPT_Z else "tie"
    ratio = race["incumbent_score"] / race["rival_score"] if race["rival_score"] > 0 else None
    design_points = int(len(state.points.y)) - val_n
    # the trend: the same comparison at half the points each, extrapolated to the training set's size
    half = (design.versus(state, design._q_mixture_index(), n=race["points_each"] // 2)
            if race["points_each"] // 2 >= TREND_MIN_POINTS and ratio is not None else None)
    trend = None
    if half is not None and half["rival_score"] > 0 and half["incumbent_score"] > 0:
        ratio_half = half["incumbent_score"] / half["rival_score"]
        trend = {"ratio_half": ratio_half, "points_half": half["points_each"], "extrapolated_to": design_points,
                 "extrapolated_ratio": extrapolated_ratio(ratio, ratio_half, race["points_each"], design_points)}
        if outcome != "tie" and (outcome == "better") != (trend["extrapolated_ratio"] < 1.0):
            out["warnings"].append(
                f"{'ahead of' if outcome == 'better' else 'behind'} Q's mixture at {race['points_each']} points each "
                f"(z = {-z:.2f}), but the gap closes with more points (ratio {ratio_half:.3f} at "
                f"{half['points_each']}, {ratio:.3f} at {race['points_each']}): extrapolated to the training set's "
                f"{design_points} design points the ratio is {trend['extrapolated_ratio']:.3f}, so the verdict is a tie")
            outcome = "tie"
    out.update(err=race["incumbent_score"], best_baseline_err=race["rival_score"],
               baselines={"mixture": race["rival_score"]}, ratio=ratio,
               outcome=outcome, beats_best_baseline=outcome == "better", z=-z, points_each=race["points_each"],
               races=sum("race" in h for h in state.history), trend=trend)
    if outcome == "better" and 2 * race["points_each"] < design_points:
        # the comparison's size is not the training set's: rankings can reverse in between
        out["warnings"].append(
            f"the comparison is at {race['points_each']} points each, the job paid for {design_points} "
            f"design points: a distribution ahead at a few hundred points can fall behind at a few thousand "
            f"(Table 1's g4 at budget 2,000 with the paper's KRR: ahead on validation, 17% behind Q's mixture on "
            f"held-out data; docs/results/budget-full/README.md, 'The full study')")
    return out


def no_verdict_reason(design: Judged, state: BudgetedState, race: dict | None) -> str:
    """Why :func:`validation_verdict` has no verdict, in words: the budget ended while
    candidates were still being selected, or the returned distribution and Q's mixture have
    no points to compare."""
    used = int(len(state.points.y)) - len(design.y0) + state.labels_failed
    if state.incumbent is None:
        alive = ", ".join(words(design.candidates[c][0], design.spec.family.name) for c in state.alive)
        return (f"no verdict: the budget ({used} labels: {design.plan.validation} for Q's validation points, "
                f"{used - design.plan.validation} in {state.iteration - 1} selection round(s)) ended before "
                f"selection settled on one distribution ({len(state.alive)} still in the running: {alive}), so "
                f"no round compared its points with Q's own mixture's; a larger budget, or an evaluation with "
                f"held-out labels, gives a verdict")
    what = "has no points of its own" if race is None else "could not be compared on validation (no spread)"
    return (f"no verdict: the returned distribution, {words(design.incumbent_name(state), design.spec.family.name)}, "
            f"and Q's own mixture were never compared at equal numbers of points (one side {what}); an "
            f"evaluation with held-out labels gives a verdict")


def extrapolated_ratio(ratio: float, ratio_half: float, n: int, target: int) -> float:
    """The validation Err ratio (design / Q's mixture) at ``target`` points each, from its values
    at n/2 and n points each: learning curves Err ~ c m^-alpha on both sides make their ratio a
    power law in m, ratio(m) = ratio(n) (m / n)^beta with beta = log2(ratio(n) / ratio(n/2)).
    Used only to withhold a verdict whose direction the trend reverses
    (:func:`validation_verdict`), never to make one."""
    beta = math.log(ratio / ratio_half) / math.log(2.0)
    return float(ratio * (max(target, n) / n) ** beta)
