"""Typed stepper states: the flat checkpoint layout both ways, records under their legacy keys,
and no pickle anywhere."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import pytest

from lwl.design.state import Kept, KeptLayout, StepperState, pack, unpack


class Phase(StrEnum):
    WARMUP = "warmup"
    RUN = "run"


@dataclass(kw_only=True)
class ToyState(StepperState):
    phase: Phase = Phase.WARMUP
    x: np.ndarray = field(default_factory=lambda: np.zeros(2))
    score: float | None = None


BILEVEL = KeptLayout(params="best_", err="best_err", iteration="best_iteration", sq="best_sq",
                     lengthscale="best_lengthscale")
AMA = KeptLayout(params="best.", err="best_validation", iteration="best_iteration", model="best.model.")


def test_a_state_round_trips_through_a_checkpoint_with_its_enum():
    s = ToyState(iteration=3, phase=Phase.RUN, x=np.array([1.5, -2.0]), history=[{"iteration": 0}],
                 elapsed_seconds=1.25)
    flat = s.to_flat()
    assert flat["phase"] == "run" and not isinstance(flat["phase"], Phase)  # JSON, not an object
    back = ToyState.from_flat(unpack(pack(s)))
    assert back.phase is Phase.RUN
    np.testing.assert_array_equal(back.x, s.x)
    assert (back.iteration, back.history, back.elapsed_seconds, back.score) == (3, [{"iteration": 0}], 1.25, None)


def test_a_field_missing_from_an_older_checkpoint_takes_its_default():
    back = ToyState.from_flat({"iteration": 2, "phase": "warmup", "history": []})
    assert back.score is None and back.elapsed_seconds == 0.0
    np.testing.assert_array_equal(back.x, np.zeros(2))


def test_a_checkpoint_without_history_leaves_it_out():
    s = ToyState(history=[{"iteration": 0}])
    assert "history" not in unpack(pack(s, history=False))
    assert "history" in unpack(pack(s))


@pytest.mark.parametrize("layout, names", [(BILEVEL, ("mean", "chol")), (AMA, ("theta",))])
def test_kept_records_sit_under_their_legacy_keys(layout, names):
    kept = Kept(params={n: np.arange(3.0) + i for i, n in enumerate(names)}, iteration=7, err=0.25,
                sq=np.ones(4) if layout.sq else None, lengthscale=1.5 if layout.lengthscale else None,
                model={"w": np.eye(2)} if layout.model else None)
    flat = kept.to_flat(layout)
    expected = {layout.params + n for n in names} | {layout.err, layout.iteration}
    expected |= {k for k in (layout.sq, layout.lengthscale) if k} | ({layout.model + "w"} if layout.model else set())
    assert set(flat) == expected
    back = Kept.from_flat(unpack(pack(flat)), layout, names)
    assert (back.iteration, back.err, back.lengthscale) == (7, 0.25, kept.lengthscale)
    for n in names:
        np.testing.assert_array_equal(back.params[n], kept.params[n])
    if layout.model:
        np.testing.assert_array_equal(back.model["w"], np.eye(2))


def test_no_kept_record_reads_as_none():
    assert Kept.from_flat({"iteration": 0}, BILEVEL, ("mean", "chol")) is None
    assert Kept.from_flat({"best_mean": None}, BILEVEL, ("mean",)) is None


def test_unpack_refuses_pickled_arrays():
    buf = io.BytesIO()
    np.savez(buf, bad=np.array([{"a": 1}], dtype=object), __json__=np.frombuffer(b"{}", dtype=np.uint8))
    with pytest.raises(ValueError):
        unpack(buf.getvalue())


def test_a_stepper_without_a_state_type_refuses_to_restore_instead_of_dropping_fields():
    from lwl.design.stepper import StepperDefaults

    class Forgetful(StepperDefaults):
        pass

    with pytest.raises(TypeError, match="Forgetful: set state_type"):
        Forgetful().restore(ToyState(phase=Phase.RUN).to_flat())


def test_the_runner_refuses_a_state_that_is_not_typed():
    from lwl.runner import iterate

    class DictStepper:
        def done(self, state):
            return False

    with pytest.raises(TypeError, match="DictStepper: a stepper's state is a lwl.design.state.StepperState"):
        iterate(DictStepper(), None, {"iteration": 0, "history": []})


def test_fields_named_until_set_stay_out_of_a_checkpoint_while_none():
    @dataclass(kw_only=True)
    class Later(ToyState):
        UNTIL_SET = ("score",)

    assert "score" not in Later().to_flat() and "score" in ToyState().to_flat()
    assert Later(score=0.5).to_flat()["score"] == 0.5
    assert Later.from_flat(Later().to_flat()).score is None
