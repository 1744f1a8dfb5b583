"""The contract every design algorithm implements (docs/architecture.md "The pieces of a job").

A stepper never calls the oracle itself unless its algorithm needs the oracle inside a step
(AMA's distribution step, particle AMA's adjoint): the loop (:func:`lwl.runner.iterate`) asks
it for ``queries(state)``, labels them and hands the labels to ``step``. The state is a flat
dict of numpy arrays and JSON values (:mod:`lwl.design.state` packs it without pickle); every
random draw derives from (seed, stream, index), so a resumed state continues bit for bit.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

State = dict[str, Any]


@runtime_checkable
class Stepper(Protocol):
    spec: Any  # the JobSpec it was built from

    def init(self) -> State:
        """The state before the first step."""

    def done(self, state: State) -> bool: ...

    def queries(self, state: State) -> np.ndarray:
        """The (n, d) inputs the next step needs labelled."""

    def step(self, state: State, labels: np.ndarray) -> State:
        """The next state, given the labels of ``queries(state)``."""

    def result(self, state: State) -> dict[str, Any]:
        """The result document: at least ``distribution`` and ``history``."""

    def cached_labels(self, state: State) -> np.ndarray | None:
        """Labels of ``queries(state)`` that the last step already computed, else None."""

    def resolved_spec(self, state: State) -> Any:
        """The spec as run (with what the run selected, e.g. a lengthscale)."""


class StepperDefaults:
    """The optional parts of :class:`Stepper` for algorithms that need nothing special."""

    spec: Any = None

    def cached_labels(self, state: State) -> np.ndarray | None:
        return None

    def resolved_spec(self, state: State) -> Any:
        return self.spec
