"""Initial data (``initial_data``): inputs and labels a lab already has. A budgeted job
(:mod:`lwl.design.budget`) counts them toward its budget as paid and keeps them in its training
set; this module holds their spec block and the job-level check (:func:`check_initial_data`,
run by :class:`lwl.spec.JobSpec`)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from lwl.params import StrictModel, check_rectangular


class InitialDataSpec(StrictModel):
    """Inputs and labels a lab already has (a budgeted job's free labels, kept in its training set):
    ``inputs`` an (n, d) array, ``labels`` (n,) or (n, 1)."""

    inputs: list[list[float]] = Field(min_length=1, description="(n, d) inputs already labelled")
    labels: list[float] | list[list[float]] = Field(
        min_length=1, description="their labels: (n,) or (n, 1) (the budgeted design takes one label per input)")

    @model_validator(mode="after")
    def _shapes(self):

        check_rectangular(self.inputs, "inputs")
        if not np.all(np.isfinite(np.asarray(self.inputs, dtype=np.float64))):
            raise ValueError("inputs: values must be finite")
        if isinstance(self.labels[0], list):
            width = check_rectangular(self.labels, "labels")
            if width != 1:
                raise ValueError(f"labels: the budgeted design takes one label per input, got {width} per row")
        if not np.all(np.isfinite(np.asarray(self.labels, dtype=np.float64))):
            raise ValueError("labels: values must be finite (a failed measurement is no initial data)")
        if len(self.labels) != len(self.inputs):
            raise ValueError(f"labels: {len(self.labels)} labels for {len(self.inputs)} inputs")
        return self

    def arrays(self):

        return (np.asarray(self.inputs, dtype=np.float64),
                np.asarray(self.labels, dtype=np.float64).reshape(len(self.inputs)))


def check_initial_data(spec) -> None:
    """Initial data of a job spec (a :class:`lwl.spec.JobSpec`): a budgeted job's, with inputs of
    the job's input dimension."""
    if spec.budget is None:
        raise ValueError("initial_data: only jobs with a label budget (budget) take initial data")
    d = spec.test_distributions.dim
    if d is None:
        d = spec.dim
    width = len(spec.initial_data.inputs[0])
    if d is not None and width != d:
        raise ValueError(f"initial_data.inputs: rows of {width} inputs, the job's inputs have dimension {d}")
