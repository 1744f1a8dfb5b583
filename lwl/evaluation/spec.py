"""The ``evaluation`` block of a job spec: how the design is judged (:mod:`lwl.evaluation.heldout`,
:mod:`lwl.evaluation.equal_labels`) and against which baselines. The built-in baselines
(:mod:`lwl.evaluation.baselines`) are registered here by name, so that the spec layer reads their
names without importing their code; ``baselines`` accepts every registered name, a plugin's too.
The checks that need the whole job (an external oracle, a coreset's pool) run in
:class:`lwl.spec.JobSpec`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from lwl.params import StrictModel
from lwl.registry import BASELINES, block_rebuilt


def _register_builtin_baselines() -> None:
    """Table 1's baselines (:mod:`lwl.evaluation.baselines`), registered by name before the
    evaluation block below reads their names."""
    module = "lwl.evaluation.baselines"
    for name, build, kind in (("normal", "normal", "distribution"), ("barycenter", "barycenter_baseline", "distribution"),
                              ("mixture", "mixture_baseline", "distribution"), ("uniform", "uniform_on", "distribution"),
                              ("ncoreset", "ncoreset_baseline", "pool"), ("acoreset", "acoreset", "pool")):
        if name not in BASELINES.names():
            BASELINES.register(name, None, f"{module}:{build}", kind=kind)


_register_builtin_baselines()


class EvaluationSpec(StrictModel):
    """Err of the final distribution and of baselines on the held-out Q samples: a KRR model
    is trained on ``train_size`` labelled samples with ridge N sigma^2 = ``ridge``."""

    enabled: bool | None = Field(default=None, description="default: on, except for external (ask/tell) oracles")
    train_size: int = Field(default=1024, ge=1, le=100_000)
    ridge: float = Field(default=1e-3, gt=0)
    baselines: list[Literal[tuple(BASELINES.names())]] | None = Field(
        default=None, description="default: normal, barycenter and mixture for bilevel jobs, none otherwise")
    sizes: list[int] = Field(default_factory=list, description="extra N for an Err-vs-N curve")
    draws: int = Field(default=5, ge=1, le=100,
                       description="training sets drawn per candidate: the verdict compares held-out Err over "
                                   "all of them (paired by draw index, common random numbers), with an interval "
                                   "that covers the training draw and the held-out points (lwl.evaluation.comparison)")
    bound: bool = Field(default=True, description="bilevel: also report the paper's OOD upper bound (Prop. 3.1 / "
                                                  "Cor. 3.2) of the design's model, with which constants are exact "
                                                  "(lwl.bound); costs about 2,500 oracle labels")

    @field_validator("sizes")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(n < 1 for n in v):
            raise ValueError("every size must be >= 1")
        return sorted(set(v))


def _accept_registered_baselines() -> None:
    """``evaluation.baselines`` accepts every registered baseline, a plugin's too (a registration
    rebuilds this block and the job spec)."""
    accepted = list[Literal[tuple(BASELINES.names())]] | None
    if EvaluationSpec.model_fields["baselines"].annotation != accepted:
        EvaluationSpec.model_fields["baselines"].annotation = accepted
        EvaluationSpec.model_rebuild(force=True)
        block_rebuilt()  # the job spec nesting EvaluationSpec rebuilds (lwl.spec)


BASELINES.on_change(_accept_registered_baselines)
