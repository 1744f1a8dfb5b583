"""The one function that runs a job spec through its stepper.

``lwl run``, the service's worker and a notebook all call :func:`run_job`, so they cannot
drift apart. The caller owns nothing but callbacks: ``progress`` after each step,
``checkpoint`` with the packed state, ``should_stop`` between steps (cancellation).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
from threadpoolctl import threadpool_limits

from lwl.design.state import StepperState, pack, unpack
from lwl.design.stepper import CountedState, CountsLabels, DesignsForQ, PlansSteps, State, Stepper
from lwl.q_samples import DatasetResolver, _no_datasets
from lwl.oracles import Oracle, as_numpy
from lwl.outcomes import check_labels
from lwl.registry import ALGORITHMS
from lwl.spec import JobSpec, parse_job_spec


class Interrupted(Exception):
    """Raised by :func:`run_job` when ``should_stop`` returns True between steps (cancellation,
    or the end of a worker's time slice); ``state`` is where the job stopped."""

    def __init__(self, state: State):
        super().__init__("job interrupted between steps")
        self.state = state


def build_stepper(spec: JobSpec, resolve: DatasetResolver = _no_datasets, oracle: Oracle | None = None) -> Stepper:
    """The stepper of the spec's algorithm: the ``build`` of its :data:`lwl.registry.ALGORITHMS`
    entry, called as ``build(spec, oracle, resolve)``."""
    entry = ALGORITHMS.get(spec.algorithm.name)
    # a job with a label budget runs the algorithm's budgeted design (lwl.design.budget; bilevel's: lwl.design.budgeted_bilevel)
    build = entry.resolve("budgeted") if spec.budget is not None else entry.resolve()
    return build(spec, oracle if oracle is not None else spec.oracle.build(), resolve)


def label_width(spec: JobSpec) -> int:
    """Values per label the job's oracle answers with: 1 (a scalar), or an operator job's output
    field (the ``label_width`` hook of its algorithm's registry entry)."""
    hook = ALGORITHMS.get(spec.algorithm.name).resolve("label_width")
    return 1 if hook is None else int(hook(spec))


def iterate(stepper: Stepper, oracle: Oracle, state: State, *, total: int | None = None,
            progress: Callable[[dict[str, Any]], None] | None = None,
            checkpoint: Callable[[bytes], None] | None = None,
            should_stop: Callable[[], bool] | None = None,
            after_step: Callable[[State], None] | None = None,
            checkpoint_history: bool = True) -> State:
    """The one stepper loop: label ``queries(state)`` (unless the last step already did) and
    ``step`` until ``done``. Between steps: ``should_stop`` (raises :class:`Interrupted`),
    ``checkpoint(pack(state))``, ``progress({...})`` with iteration / total / objective /
    validation_err / elapsed / the step's history record (JSON, for a bar or the API), and
    ``after_step(state)`` for callers that inspect the state itself (the studies).

    The state carries ``elapsed_seconds``, the design time over every slice of the job: a job
    resumed from a checkpoint goes on counting where the checkpoint stopped.

    ``checkpoint_history=False`` leaves the per-iteration records out of the checkpoints, so a
    checkpoint costs O(state) instead of O(iterations); the caller keeps the records (the
    service appends one row per iteration from ``progress``) and hands them back to
    :func:`run_job` (``history=``) when it resumes."""
    t0 = time.perf_counter()
    before = float(_typed(state, stepper).elapsed_seconds)
    while not stepper.done(state):
        if should_stop is not None and should_stop():
            raise Interrupted(state)
        labels = stepper.cached_labels(state)
        if labels is None:
            labels = as_numpy(oracle.label(stepper.queries(state)))
            check_labels(labels, oracle)  # NaN marks a failed point only where the oracle reports failures
        state = _typed(stepper.step(state, labels), stepper)
        state = state.replace(elapsed_seconds=before + time.perf_counter() - t0)
        if checkpoint is not None:
            checkpoint(pack(state, history=checkpoint_history))
        if after_step is not None:
            after_step(state)
        if progress is not None:
            last = state.history[-1] if state.history else {}
            # an early stop (the adaptive optimiser converged) completes the bar where it stopped
            progress({"iteration": state.iteration, "total": state.iteration if stepper.done(state) else total,
                      "objective": last.get("objective"), "validation_err": last.get("validation_err"),
                      "labels_used": labels_spent(stepper, state, last),
                      "elapsed": time.perf_counter() - t0, "record": last or None})
    return state


def labels_spent(stepper: Stepper, state: State, record: dict | None) -> int | None:
    """Oracle labels the job has asked for so far, where its algorithm counts them: the
    stepper's ``labels_spent(state)``, else the state's or the step record's ``labels_used``."""
    if isinstance(stepper, CountsLabels):
        return int(stepper.labels_spent(state))
    for v in (state.labels_used if isinstance(state, CountedState) else None, (record or {}).get("labels_used")):
        if isinstance(v, (int, np.integer)):
            return int(v)
    return None


def _typed(state: Any, stepper: Stepper) -> State:
    if not isinstance(state, StepperState):
        raise TypeError(f"{type(stepper).__name__}: a stepper's state is a lwl.design.state.StepperState "
                        f"(a dataclass; see docs/architecture.md), got {type(state).__name__}")
    return state


def run_job(spec: JobSpec | dict | str, *, oracle: Oracle | None = None,
            resolve: DatasetResolver = _no_datasets,
            state: State | dict | bytes | None = None,
            progress: Callable[[dict[str, Any]], None] | None = None,
            checkpoint: Callable[[bytes], None] | None = None,
            should_stop: Callable[[], bool] | None = None,
            evaluate: bool | None = None,
            history: list[dict] | None = None,
            checkpoint_history: bool = True) -> dict[str, Any]:
    """Run a design job to completion and return its result document.

    ``result = {"spec": ..., "distribution": ..., "history": [...], "evaluation": {...},
    "timings": {...}}`` (bilevel jobs add ``verdict`` and ``warnings``). ``state`` resumes from
    a checkpoint (packed bytes, their flat dict, or a typed state); ``history`` gives the records
    of its earlier iterations when the checkpoint was written without them
    (``checkpoint_history=False``, see :func:`iterate`), and only then: a checkpoint's own
    records win. ``evaluate`` overrides the spec's ``evaluation.enabled``. Callbacks: see
    :func:`iterate`.

    numpy's BLAS is held to one thread for the run: the heavy algebra is torch's, and two
    thread pools spinning on the same cores made an iteration 7x slower on 2 cores.
    """
    with threadpool_limits(limits=1, user_api="blas"):
        if not isinstance(spec, JobSpec):
            spec = parse_job_spec(spec)
        oracle = oracle or spec.oracle.build()  # built once, when the spec was validated
        entry = ALGORITHMS.get(spec.algorithm.name)
        stepper = build_stepper(spec, resolve, oracle)
        spec = stepper.spec or spec  # with the data-derived defaults filled in
        if isinstance(state, (bytes, bytearray, memoryview)):
            state = unpack(bytes(state))
        if isinstance(state, dict):  # a checkpoint's flat layout
            if "history" not in state:
                if history is None:
                    raise ValueError("history: the checkpoint was written without its iteration records "
                                     "(checkpoint_history=False); pass them to resume")
                state = {**state, "history": [dict(r) for r in history]}
            state = stepper.restore(state)
        state = state if state is not None else stepper.init()
        t0 = time.perf_counter()
        total = (stepper.total_steps if isinstance(stepper, PlansSteps) else None) or (
            spec.algorithm.iterations + entry.extra.get("final_steps", 0))  # AMA: + the final model step
        state = iterate(stepper, oracle, state, total=total, progress=progress, checkpoint=checkpoint,
                        should_stop=should_stop, checkpoint_history=checkpoint_history)
        slice_seconds = time.perf_counter() - t0
        design_seconds = float(state.elapsed_seconds)  # over every slice
        out = stepper.result(state)
        spec = stepper.resolved_spec(state)  # e.g. with the lengthscale the run selected
        t1 = time.perf_counter()
        budgeted = spec.budget is not None
        hook = entry.resolve("budgeted_evaluate" if budgeted else "evaluate")
        audit = (spec.evaluation.enabled if evaluate is None else evaluate) and hook is not None
        if audit and budgeted and (out.get("model_fallback") or {}).get("reason") == "fit_failed":
            # the audit trains the job's model on the same training set (equal_labels' design model,
            # equal_solves' draw 0 is the served model): the fit that just failed, again; the job
            # keeps its validation verdict and its training set, and says why there is no audit
            out["warnings"] = [*out.get("warnings", []), (
                "no verdict on held-out data: the audit trains the job's model on its training set, which "
                "could not be fitted (model_fallback); the verdict is the one on Q's validation labels")]
        elif audit:
            # a budgeted verdict may run another job (lwl's KRR pipeline beside a gp job): this
            # loop is handed down, as the evaluation sits below the runner
            extra = {"run": run_job} if budgeted else {}
            out.update(hook(stepper, state, spec, oracle, out, **extra))
        out["timings"] = {"design_seconds": design_seconds, "last_slice_seconds": slice_seconds,
                          "evaluation_seconds": time.perf_counter() - t1}
        out["views"] = _views(out["distribution"], stepper)
        out["spec"] = spec.model_dump(mode="json")
        _name_in_words(out, getattr(spec.family, "name", None))
        return out


def _name_in_words(out: dict, family: str | None) -> None:
    """``names``: every candidate and baseline id the result names, in words (lwl.names); the
    verdict (and a budgeted job's validation verdict) carries its own, so that the job's status
    shows it in words too."""
    from lwl.names import names_of

    out["names"] = names_of(out, family)
    for key in ("verdict", "validation_verdict"):
        if isinstance(out.get(key), dict):
            out[key]["names"] = names_of({"verdict": out[key]}, family)


def _views(distribution: dict, stepper) -> dict:
    """The pictures' numbers (lwl.views); a picture that cannot be drawn never fails the job."""
    from lwl.q_samples import MetaTestSamples
    from lwl.views import design_views

    q = stepper.q if isinstance(stepper, DesignsForQ) else None
    try:
        return design_views(distribution, q if isinstance(q, MetaTestSamples) else None)
    except (ValueError, np.linalg.LinAlgError) as exc:
        return {"kind": "none", "why": f"{type(exc).__name__}: {exc}"}
