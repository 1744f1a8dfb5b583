"""An oracle that counts every label it gives: what a budgeted job's ``labels_used`` is checked
against (each label of an operator job is one PDE solve)."""

from __future__ import annotations


class CountingOracle:
    """``inner`` with a count of the labels it gave (``labels``, also ``solves``); everything
    else (``output_grid``, ``reports_failures``, ``name``, ...) is the inner oracle's. A solver
    handed out for the adjoint (``solver(a)``, the RTE oracle's: particle AMA solves through it)
    counts as one solve too: the inner oracle's own labels do not go through this wrapper, so
    nothing is counted twice."""

    def __init__(self, inner):
        self.inner, self.labels = inner, 0

    @property
    def solves(self) -> int:
        return self.labels

    def label(self, inputs):
        self.labels += len(inputs)
        return self.inner.label(inputs)

    def __getattr__(self, name: str):
        if name == "solver" and hasattr(self.inner, "solver"):
            return self._solver
        return getattr(self.inner, name)

    def _solver(self, a):
        self.labels += 1
        return self.inner.solver(a)
