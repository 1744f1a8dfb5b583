"""A served model's reading of itself on the job's own labels: the hook through which a budgeted
job's result (:mod:`lwl.design.budget.result`) gets its ``model_diagnosis`` without knowing which
model it serves.

A model that can say something about the problem from the labels it was fitted to implements
:class:`Diagnosable` (the GP: its noise floor, its leave-one-out Err and the coverage of its error
bar on Q's validation labels, :mod:`lwl.models.gp_diagnosis`); a model that cannot (KRR, the
operator networks) does not, and its job's ``model_diagnosis`` is null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

# what a fit of a model raises when it cannot be fitted to a training set (numpy's and torch's
# LinAlgError: K_y not positive definite; a NaN or an overflow in an optimiser, a runaway network,
# a device out of memory): a budgeted job still succeeds, with its training set and no model
# (lwl.design.budget.serving, "model_fallback"). np.linalg.LinAlgError is a ValueError and
# torch.linalg.LinAlgError a RuntimeError; FloatingPointError an ArithmeticError.
FIT_ERRORS: tuple[type[BaseException], ...] = (ArithmeticError, RuntimeError, ValueError, MemoryError)


@dataclass(frozen=True)
class ModelDiagnosis:
    """What a served model says about itself: the result's ``model_diagnosis`` block (None where it
    could not be computed) and the job's warnings it adds (a failed reading says so there)."""

    document: dict | None
    warnings: list[str] = field(default_factory=list)


@runtime_checkable
class Diagnosable(Protocol):
    """A fitted model that reads itself on labels of Q at the head of its training set."""

    def diagnosis(self, document: dict, labels: np.ndarray, weights: np.ndarray,
                  loo_rows: np.ndarray | None) -> ModelDiagnosis:
        """Its reading on ``labels`` (Q's validation labels, each weighted by ``weights``: w_k / M_k),
        given its own ``document`` (``to_spec(training_set=False)``); ``loo_rows``: the rows of its
        training set that hold those labels, for leave-one-out readings (None: they are not its
        first rows, and no leave-one-out reading is made). Never raises for a fit that cannot be
        read: the model is served all the same, and the warnings say what is missing."""
        ...
