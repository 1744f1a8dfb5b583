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

from lwl.design import BilevelDesign
from lwl.design.state import pack, unpack
from lwl.evaluation import evaluate_design, verdict
from lwl.meta import STREAM_EVAL, DatasetResolver, _no_datasets
from lwl.oracles import Oracle, as_numpy, make_oracle
from lwl.spec import JobSpec, parse_job_spec


class Interrupted(Exception):
    """Raised by :func:`run_job` when ``should_stop`` returns True between steps (cancellation,
    or the end of a worker's time slice); ``state`` is where the job stopped."""

    def __init__(self, state: dict[str, Any]):
        super().__init__("job interrupted between steps")
        self.state = state


def build_stepper(spec: JobSpec, resolve: DatasetResolver = _no_datasets, oracle: Oracle | None = None):
    """The stepper object for the spec's algorithm (AMA labels inside its steps: it holds the oracle)."""
    if spec.algorithm.name == "bilevel":
        return BilevelDesign.from_spec(spec, resolve)
    if spec.algorithm.name == "ama":
        from lwl.design.ama import AMADesign

        return AMADesign.from_spec(spec, oracle or make_oracle(spec.oracle))
    if spec.algorithm.name == "particle_ama":
        from lwl.design.particles import ParticleAMADesign

        return ParticleAMADesign.from_spec(spec, oracle or make_oracle(spec.oracle), resolve)
    raise ValueError(f"algorithm.name: unknown algorithm {spec.algorithm.name!r}")


def run_job(*args, **kwargs) -> dict[str, Any]:
    """Run a design job to completion and return its result document.

    ``result = {"spec": ..., "distribution": ..., "history": [...], "evaluation": {...},
    "timings": {...}}``. ``state`` resumes from a checkpoint (a state dict or packed bytes).

    numpy's BLAS is held to one thread for the run: the heavy algebra is torch's, and two
    thread pools spinning on the same cores made an iteration 7x slower on 2 cores.
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return _run_job(*args, **kwargs)


def _run_job(spec: JobSpec | dict | str, *, oracle: Oracle | None = None,
            resolve: DatasetResolver = _no_datasets,
            state: dict[str, Any] | bytes | None = None,
            progress: Callable[[dict[str, Any]], None] | None = None,
            checkpoint: Callable[[bytes], None] | None = None,
            should_stop: Callable[[], bool] | None = None,
            evaluate: bool | None = None) -> dict[str, Any]:
    if not isinstance(spec, JobSpec):
        spec = parse_job_spec(spec)
    oracle = oracle or make_oracle(spec.oracle)  # an external oracle raises LabelsRequired
    stepper = build_stepper(spec, resolve, oracle)
    spec = getattr(stepper, "spec", spec)  # with the data-derived defaults filled in
    if isinstance(state, (bytes, bytearray, memoryview)):
        state = unpack(bytes(state))
    state = state if state is not None else stepper.init()
    t0 = time.perf_counter()
    # AMA and particle AMA: + the final model step
    total = spec.algorithm.iterations + (1 if spec.algorithm.name in ("ama", "particle_ama") else 0)
    cached = getattr(stepper, "cached_labels", lambda state: None)  # labels its last step already computed
    while not stepper.done(state):
        if should_stop is not None and should_stop():
            raise Interrupted(state)
        labels = cached(state)
        if labels is None:
            labels = as_numpy(oracle.label(stepper.queries(state)))
        state = stepper.step(state, labels)
        if checkpoint is not None:
            checkpoint(pack(state))
        if progress is not None:
            last = state["history"][-1] if state["history"] else {}
            # an early stop (the adaptive optimiser converged) completes the bar where it stopped
            progress({"iteration": state["iteration"], "total": state["iteration"] if stepper.done(state) else total, "objective": last.get("objective"),
                      "validation_err": last.get("validation_err"), "elapsed": time.perf_counter() - t0,
                      "record": last or None})
    design_seconds = time.perf_counter() - t0
    out = stepper.result(state)
    if isinstance(stepper, BilevelDesign):
        spec = stepper.resolved_spec(state)  # with the lengthscale the run selected, if it selected one
    do_eval = spec.evaluation.enabled if evaluate is None else evaluate
    t1 = time.perf_counter()
    if do_eval and spec.algorithm.name == "particle_ama":
        out["evaluation"] = stepper.evaluate(state)
    elif do_eval and spec.algorithm.name == "ama":
        out["evaluation"] = stepper.evaluate(state, spec.test_distributions.validation_per_member,
                                             [spec.seed, STREAM_EVAL])
    elif do_eval:
        from lwl.measures import from_spec

        out["evaluation"] = evaluate_design(spec, stepper.q, from_spec(out["distribution"]), oracle,
                                            np.asarray(state.get("validation_labels")))
        out["verdict"] = verdict(out["evaluation"], out.get("warnings", []))
        out["warnings"] = out["verdict"]["warnings"]
    out["timings"] = {"design_seconds": design_seconds, "evaluation_seconds": time.perf_counter() - t1}
    out["spec"] = spec.model_dump(mode="json")
    return out
