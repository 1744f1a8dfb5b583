"""The interval-search design (EIT's omega law): the search, the stepper and the job spec."""

import json

import numpy as np
import pytest

from lwl import run_job
from lwl.design.interval_search import IntervalSearch, pair_rows
from lwl.spec import SpecError, parse_job_spec


def test_grid_spans_the_range_and_refinement_brackets_the_best():
    s = IntervalSearch(np.pi / 2, 7 * np.pi, np.pi / 2, candidates=13, refine=1)
    grid = s.grid()
    assert grid[0] == np.pi / 2 and np.isclose(grid[-1], 6.5 * np.pi) and len(grid) == 13
    # the paper's four intervals are grid points
    for low in (np.pi / 2, 3.5 * np.pi, 5 * np.pi, 6.5 * np.pi):
        assert np.isclose(grid, low).any()
    scores = {x: (x - 3.2 * np.pi) ** 2 for x in grid}  # best grid point: 3 pi
    mids = s.refinement(scores)
    assert np.allclose(sorted(mids), [2.75 * np.pi, 3.25 * np.pi])
    edge = s.refinement({x: x for x in grid})  # best at the range's end: one neighbour only
    assert np.allclose(edge, [0.75 * np.pi])
    with pytest.raises(ValueError, match="family.width"):
        IntervalSearch(0.0, 1.0, 2.0)


def test_pair_rows_repeat_each_conductivity_for_its_pairs():
    c = np.arange(8.0).reshape(2, 4)
    omega = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    rows = pair_rows(c, omega, np.array([0.1, 0.2, 0.3]))
    assert rows.shape == (6, 6)
    np.testing.assert_array_equal(rows[:, 0], omega.ravel())
    np.testing.assert_array_equal(rows[:, 1], [0.1, 0.2, 0.3] * 2)
    np.testing.assert_array_equal(rows[3:, 2:], np.repeat(c[1:], 3, axis=0))


@pytest.mark.slow
def test_job_keeps_the_candidate_with_the_smallest_validation_error(eit_spec):
    out = run_job(eit_spec)
    hist = out["history"]
    assert len(hist) == 3 + 2  # the grid, then two midpoints around the best
    best = min(hist, key=lambda r: r["validation_error"])
    assert [r["selected"] for r in hist].count(True) == 1 and best["selected"]
    assert out["distribution"]["family"] == "uniform"
    assert out["distribution"]["low"] == [best["low"]] and np.isclose(out["distribution"]["high"][0] - best["low"],
                                                                       np.pi / 2)
    assert out["selected"]["iteration"] == best["iteration"]
    ev = out["evaluation"]
    assert ev["law"]["low"] == best["low"] and np.isfinite(ev["relative_l1_error"]) and ev["samples"] == 8
    again = run_job(eit_spec)  # seeded: the same spec gives the same numbers
    assert [r["validation_error"] for r in again["history"]] == [r["validation_error"] for r in hist]
    assert again["evaluation"] == ev


def test_spec_errors_name_the_field(eit_spec):
    def error(doc):
        with pytest.raises(SpecError) as exc:
            parse_job_spec(json.loads(json.dumps(doc)))
        return str(exc.value)

    assert "model.name" in error({**eit_spec, "model": {"name": "deeponet"}})
    assert "family.width" in error({**eit_spec, "family": {**eit_spec["family"], "width": 100.0}})
    two_d = {"members": [{"uniform": {"low": [0.0, 0.0], "high": [1.0, 1.0]}, "size": 60}], "validation_per_member": 30}
    assert "dimension" in error({**eit_spec, "test_distributions": two_d})
    assert "uniform.high" in error({**eit_spec, "test_distributions": {
        "members": [{"uniform": {"low": [2.0], "high": [1.0]}, "size": 60}], "validation_per_member": 30}})
    assert "oracle darcy takes inputs" in error({**eit_spec, "oracle": {"name": "darcy"}})
    assert "oracle.name" in error({**eit_spec, "oracle": {"name": "sobol_g", "params": {"dim": 1}}})


def test_a_typed_state_checkpoints_under_the_keys_of_the_legacy_checkpoint():
    """The state after step K of the legacy case flattens to the keys of its checkpoint (written
    by the dict state), and the checkpoint restores to a typed state that flattens to itself."""
    from lwl.design.interval_search import IntervalSearchState, Phase
    from lwl.design.state import unpack
    from lwl.runner import build_stepper
    from tests.conformance.legacy_cases import CASES, HERE

    path = HERE / "interval_search-3.npz"
    spec = parse_job_spec(CASES["interval_search"][0]())
    stepper, oracle = build_stepper(spec), spec.oracle.build()
    state = stepper.init()
    assert "validation_neumann" not in state.to_flat()  # as the dict state: set by the first step
    for _ in range(3):
        state = stepper.step(state, oracle.label(stepper.queries(state)))
    legacy = unpack(path.read_bytes())
    assert set(state.to_flat()) == set(legacy)
    back = stepper.restore(legacy)
    assert isinstance(back, IntervalSearchState) and back.phase is Phase.SEARCH
    again = back.to_flat()
    np.testing.assert_array_equal(again.pop("validation_neumann"), legacy.pop("validation_neumann"))
    assert again == legacy
