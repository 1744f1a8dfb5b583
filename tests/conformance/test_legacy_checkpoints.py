"""Checkpoints that running services already hold still resume: each file in
tests/conformance/legacy/ was written by the code before the steppers' states were typed
(tests/conformance/legacy_cases.py), and resuming it must end where an uninterrupted run of the
current code ends: the same keys, choices, counts and words, and the same floats at
tests/tolerance.py's CROSS_MACHINE_RTOL (the checkpoints were written on another machine, whose
BLAS rounds the last digits differently; see that module).

The operator learners and the interval search are the exception. A DeepONet trained in float32,
a best iterate picked among near-equal validation errors or an interval bisected on a sign turn
a last-digit difference into a different end (measured with scripts/test-other-blas.sh:
interval_search's interval 20.4 against 11.0, a particle coefficient 0.110 against 0.126), so no
tolerance holds across CPUs. For them the reference is recomputed here from the committed file:
its layout (keys, dtypes, types, counts) carrying the numbers this machine computes at the same
step must resume exactly to the uninterrupted end, and the file as written restores and steps."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

import numpy as np

from lwl.design import pack, unpack
from lwl.runner import build_stepper, run_job
from lwl.spec import parse_job_spec
from tests.conformance.legacy_cases import CASES, HERE
from tests.conformance.test_entries import SLOW_ALGORITHMS
from tests.tolerance import assert_close


def _case(path: Path) -> str:
    return path.stem.rsplit("-", 1)[0]


def _run(case: str, **kwargs) -> dict:
    spec, oracle = CASES[case]
    return run_job(spec(), oracle=oracle() if oracle else None, evaluate=False, **kwargs)


#: Algorithms whose end a last-digit difference changes (see the module's docstring).
DIVERGENT_ALGORITHMS = {"ama", "particle_ama", "interval_search"}


#: Cases whose start the code has changed since their files were written: their files carry the old
#: start's digits, so they are checked as the divergent algorithms are (this machine's digits in the
#: file's layout). bilevel-mixture: the mixture family's components are floored per input since
#: issue 83 (was 1e-6 of the average variance, isotropic: not equivariant under a change of units),
#: which moves its start by about 1e-6 relative and its end at 1e-5 relative, past the tolerance.
RESTARTED_CASES = {"bilevel-mixture"}


def _algorithm(case: str) -> str:
    return CASES[case][0]()["algorithm"]["name"]


@lru_cache(maxsize=None)
def _uninterrupted_with_checkpoints(case: str) -> tuple[dict, tuple[bytes, ...]]:
    blobs: list[bytes] = []
    return _run(case, checkpoint=blobs.append), tuple(blobs)


def _uninterrupted(case: str) -> dict:
    return _uninterrupted_with_checkpoints(case)[0]


def _with_these_digits(legacy, here):
    """``legacy``'s layout (keys, types, dtypes, every non-float value) carrying ``here``'s floats."""
    if isinstance(legacy, dict):
        return {k: _with_these_digits(v, here[k]) for k, v in legacy.items()}
    if isinstance(legacy, list):
        return [_with_these_digits(a, b) for a, b in zip(legacy, here, strict=True)]
    if isinstance(legacy, np.ndarray) and np.issubdtype(legacy.dtype, np.floating):
        return np.asarray(here).astype(legacy.dtype)
    if isinstance(legacy, float):
        return float(here)
    return legacy


def _params():
    out = []
    for path in sorted(HERE.glob("*.npz")):
        slow = CASES[_case(path)][0]()["algorithm"]["name"] in SLOW_ALGORITHMS
        out.append(pytest.param(path, id=path.stem, marks=[pytest.mark.slow] if slow else []))
    return out


def test_every_case_has_a_checkpoint():
    assert {_case(p) for p in HERE.glob("*.npz")} == set(CASES)


@pytest.mark.parametrize("path", _params())
def test_a_checkpoint_from_before_typed_states_resumes_to_the_same_end(path: Path):
    case = _case(path)
    if _algorithm(case) in DIVERGENT_ALGORITHMS or case in RESTARTED_CASES:
        _assert_resumes_with_this_machines_digits(path)
        return
    full = _uninterrupted(case)
    resumed = _run(case, state=path.read_bytes())
    assert_close(resumed["distribution"], full["distribution"], path="distribution")
    assert_close(resumed.get("last_distribution"), full.get("last_distribution"), path="last_distribution")
    assert_close([r.get("objective") for r in resumed["history"]], [r.get("objective") for r in full["history"]],
                 path="history.objective")
    for key in ("selected", "stopped", "warnings", "labels_failed"):
        assert_close(resumed.get(key), full.get(key), path=key)
    # AMA keeps the labels of its optimisation samples in memory, not in the checkpoint: a
    # resumed AMA job asks the oracle again for the current iterate's and counts them (honestly)
    # particle AMA's files hold the count from before its adjoint's re-solves were counted: the
    # resumed job adds today's counts to that (tests/lwl/oracles/test_counting.py checks today's)
    if CASES[case][0]()["algorithm"]["name"] not in ("ama", "particle_ama"):
        assert resumed.get("labels_used") == full.get("labels_used")


def _assert_resumes_with_this_machines_digits(path: Path) -> None:
    case, k = _case(path), int(path.stem.rsplit("-", 1)[1])
    full, blobs = _uninterrupted_with_checkpoints(case)
    legacy, here = unpack(path.read_bytes()), unpack(blobs[k - 1])
    assert set(here) == set(legacy), path.name
    resumed = _run(case, state=pack(_with_these_digits(legacy, here)))
    # same machine, same digits: the end is the uninterrupted end bit for bit
    assert resumed["distribution"] == full["distribution"]
    assert resumed.get("last_distribution") == full.get("last_distribution")
    assert [r.get("objective") for r in resumed["history"]] == [r.get("objective") for r in full["history"]]
    for key in ("selected", "stopped", "warnings", "labels_failed"):
        assert resumed.get(key) == full.get(key), key
    if _algorithm(case) not in ("ama", "particle_ama"):  # AMA relabels on resume; particle AMA: its old count (above)
        assert resumed.get("labels_used") == full.get("labels_used")
    # the file as written (another machine's digits) restores to a state of the same layout and steps on
    spec = parse_job_spec(CASES[case][0]())
    stepper = build_stepper(spec)
    oracle = CASES[case][1]() if CASES[case][1] else spec.oracle.build()
    state = stepper.restore(legacy)
    assert set(state.to_flat()) == set(legacy)
    if not stepper.done(state):
        labels = stepper.cached_labels(state)
        after = stepper.step(state, oracle.label(stepper.queries(state)) if labels is None else labels)
        assert type(after) is type(state) and after.iteration >= state.iteration
