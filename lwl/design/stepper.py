"""The contract every design algorithm implements (docs/architecture.md "The pieces of a job").

A stepper never calls the oracle itself unless its algorithm needs the oracle inside a step
(AMA's distribution step, particle AMA's adjoint): the loop (:func:`lwl.runner.iterate`) asks
it for ``queries(state)``, labels them and hands the labels to ``step``. The state is a typed
value (a :class:`lwl.design.state.StepperState` dataclass; a step returns a new one) that
packs to the flat checkpoint layout without pickle and comes back through ``restore``; every
random draw derives from (seed, stream, index), so a resumed state continues bit for bit.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from lwl.design.state import Flat, StepperState

State = StepperState


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

    def restore(self, flat: Flat) -> State:
        """The state of a checkpoint's flat dict (:func:`lwl.design.state.unpack`)."""


@runtime_checkable
class CountsLabels(Protocol):
    """A stepper that counts the oracle labels its job has asked for (a budgeted design, bilevel):
    the progress bar's ``labels_used``."""

    def labels_spent(self, state: State) -> int: ...


@runtime_checkable
class PlansSteps(Protocol):
    """A stepper that knows its number of steps in advance (a budgeted design: its rounds), for the
    progress total; without it the total is the algorithm's ``iterations``."""

    total_steps: int


@runtime_checkable
class DesignsForQ(Protocol):
    """A stepper that holds Q's samples (``q``: a :class:`lwl.q_samples.MetaTestSamples`), which the
    result's pictures draw beside the distribution."""

    q: Any


@runtime_checkable
class CountedState(Protocol):
    """A state that counts the labels its job has used (AMA's), where the stepper does not."""

    labels_used: int


class StepperDefaults:
    """The optional parts of :class:`Stepper` for algorithms that need nothing special;
    ``state_type`` names the state class whose ``from_flat`` restores a checkpoint (a stepper
    whose state needs more to restore overrides ``restore`` instead)."""

    spec: Any = None
    state_type: type[StepperState] | None = None

    def restore(self, flat: Flat) -> State:
        if self.state_type is None:  # a bare StepperState would drop every field of the real one
            raise TypeError(f"{type(self).__name__}: set state_type to its state class (or override restore) "
                            f"to resume from a checkpoint")
        return self.state_type.from_flat(flat)

    def cached_labels(self, state: State) -> np.ndarray | None:
        return None

    def resolved_spec(self, state: State) -> Any:
        return self.spec
