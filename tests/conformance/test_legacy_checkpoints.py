"""Checkpoints that running services already hold still resume: each file in
tests/conformance/legacy/ was written by the code before the steppers' states were typed
(tests/conformance/legacy_cases.py), and resuming it must end exactly where an uninterrupted run
of the current code ends."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from lwl.runner import run_job
from tests.conformance.legacy_cases import CASES, HERE
from tests.conformance.test_entries import SLOW_ALGORITHMS


def _case(path: Path) -> str:
    return path.stem.rsplit("-", 1)[0]


def _run(case: str, **kwargs) -> dict:
    spec, oracle = CASES[case]
    return run_job(spec(), oracle=oracle() if oracle else None, evaluate=False, **kwargs)


@lru_cache(maxsize=None)
def _uninterrupted(case: str) -> dict:
    return _run(case)


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
    full = _uninterrupted(case)
    resumed = _run(case, state=path.read_bytes())
    assert resumed["distribution"] == full["distribution"]
    assert resumed.get("last_distribution") == full.get("last_distribution")
    assert [r.get("objective") for r in resumed["history"]] == [r.get("objective") for r in full["history"]]
    for key in ("selected", "stopped", "warnings", "labels_failed"):
        assert resumed.get(key) == full.get(key), key
    # AMA keeps the labels of its optimisation samples in memory, not in the checkpoint: a
    # resumed AMA job asks the oracle again for the current iterate's and counts them (honestly)
    if CASES[case][0]()["algorithm"]["name"] != "ama":
        assert resumed.get("labels_used") == full.get("labels_used")
