"""The model a budgeted job serves (``GET /v1/jobs/{id}/model``): fitted once per training set,
its document, and what is served where no fit is (docs/method/budgets.md "Designs for a label budget").

The training set is the rows the left-out check keeps (:mod:`lwl.design.budget.left_out`). A fit
that fails never fails the job: its labels are paid for, and the training set is the product
(issue #83); the result then says why no model is served (``model_fallback``). What the served
model says about itself on Q's validation labels reaches the result through the model's own hook
(:class:`lwl.models.diagnosis.Diagnosable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from lwl.design.budget.ledger import LabelledValidation
from lwl.design.budget.state import BudgetedState, Phase
from lwl.models.diagnosis import FIT_ERRORS, Diagnosable, ModelDiagnosis

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import the designs
    from lwl.spec import JobSpec


class Serving(Protocol):
    """What serving reads of a budgeted design (:class:`lwl.design.budget.design.BudgetedDesign`):
    the algorithm's served model and its document, the served rows, and the fit's cache."""

    spec: JobSpec
    _served_model: tuple

    def final_model(self, state: BudgetedState): ...

    def served_model(self, state: BudgetedState): ...

    def model_document(self, state: BudgetedState, served=None) -> dict | None: ...

    def served_rows(self, state: BudgetedState) -> tuple[np.ndarray, dict | None]: ...

    def training_set(self, state: BudgetedState) -> tuple[np.ndarray, np.ndarray]: ...

    def validation(self, state: BudgetedState) -> LabelledValidation: ...


def served_model(design: Serving, state: BudgetedState):
    """The design's ``final_model``, fitted once per training set: the result's model document and
    the verdict at equal solves (its draw 0 is the served model's, :mod:`lwl.evaluation.equal_solves`)
    read the same fit, one network fit fewer per audited operator job."""
    X, y = design.training_set(state)
    key = (X.shape, hash(X.tobytes()), hash(y.tobytes()))
    if design._served_model[0] != key:
        design._served_model = (key, design.final_model(state))
    return design._served_model[1]


def training_set(design: Serving, state: BudgetedState) -> tuple[np.ndarray, np.ndarray]:
    """The served model's training data: the rows of the design's ``served_rows``."""
    rows = design.served_rows(state)[0]
    return state.points.X[rows].copy(), state.points.y[rows].copy()


def final_served(design: Serving, state: BudgetedState, n: int,
                 warnings: list[str]) -> tuple[Any, dict | None, dict | None]:
    """(served model, its document, model_fallback) at the end of the job: the model fitted to
    the ``n`` points of the training set (the design's ``served_model``), or, where none is served,
    None, None and why (``{"reason", "error", "points"}``; a warning says it too): ``too_few_points``
    (under two labelled points), ``fit_failed`` (the fit raised one of :data:`FIT_ERRORS`).
    Before the end: (None, None, None)."""
    if state.phase is not Phase.DONE:
        return None, None, None
    name = design.spec.model.name
    if n < 2:
        warnings.append(f"no model is served: the training set has {n} labelled point(s), a {name} needs two")
        return None, None, {"reason": "too_few_points", "error": None, "points": int(n)}
    try:
        served = design.served_model(state)
        return served, design.model_document(state, served), None
    except FIT_ERRORS as exc:
        error = f"{type(exc).__name__.lstrip('_')}: {exc}"  # torch's LinAlgError is torch._C._LinAlgError
        warnings.append(
            f"the served model ({name}) could not be fitted to the {n} labelled points of the training set "
            f"({error}): no model is served (model is null; model_fallback says why); every paid label is "
            f"in the training set (GET /v1/jobs/{{id}}/training-set, or lwl run's training_set.npz): fit a "
            f"model to it yourself, or run the job's spec again with another model")
        return None, None, {"reason": "fit_failed", "error": error, "points": int(n)}


def model_diagnosis(design: Serving, state: BudgetedState, served, document: dict | None,
                    rows: np.ndarray) -> ModelDiagnosis | None:
    """What the served model says about itself on Q's validation labels, the head of the ledger
    (None: no model is served, or the model has no reading, :class:`lwl.models.diagnosis.Diagnosable`).
    Q's validation points are the served training set's first rows (the left-out check keeps them;
    were that to change, the leave-one-out readings would be null rather than read at other rows)."""
    if document is None or not isinstance(served, Diagnosable):
        return None
    val = design.validation(state)
    head = np.arange(val.n)
    loo_rows = head if np.array_equal(rows[:val.n], head) else None
    return served.diagnosis(document, state.points.y[:val.n], val.weights, loo_rows)
