"""The result document of a budgeted job (``GET /v1/jobs/{id}``'s ``result``; docs/job-spec.md):
the returned distribution, the rounds' records, the labels paid and where they went, the
validation verdict, the served model and what it says about itself, the training set and the
points left out of it, and the job's warnings in words.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from lwl.design.budget.ledger import INITIAL
from lwl.design.budget.plan import BudgetPlan
from lwl.design.budget.selection import best_alive, default_rule, unexplored_rule
from lwl.design.budget.serving import Serving, final_served, model_diagnosis
from lwl.design.budget.state import BudgetedState, Phase
from lwl.design.budget.verdict import Judged
from lwl.measures import Measure



class Reported(Judged, Serving, Protocol):
    """What the result reads of a budgeted design (:class:`lwl.design.budget.design.BudgetedDesign`)
    beyond its verdict and its served model."""

    plan: BudgetPlan
    X0: np.ndarray
    selection_rule: str

    @property
    def tunes_lengthscale(self) -> bool: ...

    def labels_spent(self, state: BudgetedState) -> int: ...

    def incumbent_measure(self, state: BudgetedState) -> Measure: ...

    def validation_verdict(self, state: BudgetedState) -> dict: ...


def result(design: Reported, state: BudgetedState) -> dict[str, Any]:
    """The job's result document (module docstring); the verdict's caveats head its warnings, the
    served model's own reading follows them (an audit keeps those: equal_labels.evaluate)."""
    plan = design.plan
    y = state.points.y
    n0 = len(state.points.of(INITIAL))  # the initial data: in the training set, not asked for
    used = design.labels_spent(state)  # failed measurements were paid for too
    rows, check = design.served_rows(state)
    X, y_served = state.points.X[rows], y[rows]  # training_set's rows, already at hand
    inc = state.incumbent
    name = design.incumbent_name(state) or design._source_name(best_alive(design, state))
    measure = (design.incumbent_measure(state) if inc is not None
               else design.candidates[best_alive(design, state)][1])
    warnings = []
    if used < plan.askable and state.phase is Phase.DONE:
        warnings.append(f"the design used {used} of the {plan.askable} labels its budget left to ask for")
    if len(design.X0) and design.spec.domain is not None:
        outside = int((~design.spec.domain.build().contains(design.X0)).sum())
        if outside:  # a lab's earlier measurements are data wherever they were taken; a unit slip shows here
            warnings.append(f"{outside} of the {len(design.X0)} initial_data inputs lie outside the job's domain; "
                            f"they are training data all the same (new inputs stay inside it)")
    failed_X = state.points.failed_X
    if len(failed_X):
        what = (f"{len(failed_X)} of the {used // plan.solves_per_label} points asked for had a failed solve: their "
                f"{len(failed_X) * plan.solves_per_label} solves are" if plan.solves_per_label > 1 else
                f"{len(failed_X)} of the {used} labels asked for failed:")
        warnings.append(f"{what} counted against the budget, left out of the training set")
    out_rows = np.setdiff1d(np.arange(len(y)), rows)
    if check is not None and check["left_out"]:
        ranks = "" if check.get("rank_p") is None else f", rank test p = {check['rank_p']:.2g}"
        warnings.append(f"{check['points']} paid labels (the points of {', '.join(check['candidates'])}, which the design "
                        f"dropped) are "
                        f"left out of the served model's training set: without them it validates better on Q's "
                        f"labels (two-fold Err {check['score_without']:.4g} against {check['score_all']:.4g}, "
                        f"z = {check['z']:.2f}{ranks}); they are in the result's left_out")
    counts = {design._source_name(int(s)): int(n)
              for s, n in zip(*np.unique(state.points.source, return_counts=True))}
    v = design.validation_verdict(state) if state.phase is Phase.DONE else None
    if v is not None:  # the verdict's caveats head the job's warnings (an audit replaces them with its own)
        warnings += v["warnings"]
    served, model, fallback = final_served(design, state, len(y_served), warnings)
    diagnosis = model_diagnosis(design, state, served, model, rows)  # the model's own hook (None: it has none)
    if diagnosis is not None:  # after the verdict's: an audit keeps these (equal_labels.evaluate)
        warnings += diagnosis.warnings
    return {"distribution": measure.to_spec(), "history": [dict(h) for h in state.history],
            "verdict": v, "validation_verdict": v,
            "labels_used": used, "initial_labels": n0,
            "labels_failed": int(len(failed_X)) * plan.solves_per_label,
            "budget": plan.budget,
            "rounds": int(state.iteration),
            "plan": plan.to_json(), "labels_by_source": counts,
            "model": model,
            "model_fallback": fallback,
            "model_diagnosis": None if diagnosis is None else diagnosis.document,
            "selected": {"candidate": name, "lengthscale": float(state.lengthscale) if design.tunes_lengthscale else None,
                         "rule": design.selection_rule + default_rule(design) + unexplored_rule(design, state),
                         "scores": dict(state.scores)},
            "training_set": {"inputs": X.tolist(), "labels": y_served.tolist()},
            "left_out": {"check": check, "inputs": state.points.X[out_rows].tolist(),
                         "labels": y[out_rows].tolist()},
            "failed_inputs": failed_X.tolist(),
            "warnings": warnings}
