"""Typed stepper states and their pickle-free checkpoints.

Every algorithm's state is a dataclass derived from :class:`StepperState` (the fields every
state has: ``iteration``, ``history``, ``elapsed_seconds``) with its phase as an enum and the
iterate it keeps as a :class:`Kept` record. On disk a state is the *flat* dict of numpy arrays
and JSON values that the steppers used before their states were typed: ``to_flat`` writes that
layout and ``from_flat`` reads it, so a checkpoint a running service already holds resumes
(tests/conformance/test_legacy_checkpoints.py). ``pack`` writes the flat dict as an ``.npz``
archive whose arrays are stored as-is and whose JSON values travel in one UTF-8 byte array;
``unpack`` reads it back with ``allow_pickle=False``, so a checkpoint from anywhere can be
loaded without executing code.
"""

from __future__ import annotations

import dataclasses
import io
import json
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Self

import numpy as np

_JSON_KEY = "__json__"
Flat = dict[str, Any]


@dataclass(kw_only=True)
class StepperState:
    """What every stepper's state carries; an algorithm's state adds its own fields.

    The default ``to_flat``/``from_flat`` map each field to the flat key of the same name
    (enums as their values; fields typed with an :class:`Enum` are read back as members); the
    fields named in ``UNTIL_SET`` are left out while None (the dict states added them only once
    set). A state whose checkpoint layout differs (records spread over prefixed keys, parameters
    named by the family) overrides both, calling these for the plain fields."""

    UNTIL_SET: ClassVar[tuple[str, ...]] = ()

    iteration: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    elapsed_seconds: float = 0.0

    def to_flat(self) -> Flat:
        out: Flat = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in self.UNTIL_SET:
                continue
            out[f.name] = value.value if isinstance(value, Enum) else value
        return out

    @classmethod
    def from_flat(cls, flat: Flat, **kwargs: Any) -> Self:
        """The state of a flat dict; ``kwargs`` give fields read from elsewhere (records)."""
        try:
            hints = typing.get_type_hints(cls)
        except NameError:  # an annotation imported only for type checkers: enums must be importable
            hints = {f.name: f.type for f in dataclasses.fields(cls) if not isinstance(f.type, str)}
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in kwargs or f.name not in flat:
                continue  # a field a checkpoint predating it lacks takes its default
            value = flat[f.name]
            kind = hints.get(f.name)
            enum = next((t for t in typing.get_args(kind) or (kind,) if isinstance(t, type) and issubclass(t, Enum)),
                        None)
            values[f.name] = enum(value) if enum is not None and value is not None else value
        return cls(**values, **kwargs)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (states are values: a step returns a new one)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class KeptLayout:
    """Where a :class:`Kept` record's fields sit in a flat checkpoint. The names predate the
    record (bilevel wrote ``best_mean``, AMA ``best.theta``) and stay, so running jobs resume."""

    params: str                    # prefix of each parameter's key ("best_" -> best_mean)
    err: str | None = None         # key of the validation error
    iteration: str | None = None   # None: the record is a start point, stored without one
    sq: str | None = None          # key of the per-point squared errors
    lengthscale: str | None = None
    model: str | None = None  # prefix of the kept model's weights ("best.model.")


@dataclass
class Kept:
    """The iterate a run keeps: returned unless a later one beats it on validation.

    ``params`` are the distribution's parameters by name (a family's ``param_names``, AMA's
    ``theta``, particle AMA's ``c``); ``err`` its validation error (``inf`` before any check);
    ``sq`` its per-point squared errors on Q's validation points (paired comparisons);
    ``lengthscale`` the model's at that check; ``model`` the weights of the model trained there
    (the operator learners keep (distribution, model) pairs)."""

    params: dict[str, Any]
    iteration: int = 0
    err: float = float("inf")
    sq: np.ndarray | None = None
    lengthscale: float | None = None
    model: dict[str, np.ndarray] | None = None

    def to_flat(self, layout: KeptLayout) -> Flat:
        out: Flat = {layout.params + n: v for n, v in self.params.items()}
        if layout.err is not None:
            out[layout.err] = self.err
        if layout.iteration is not None:
            out[layout.iteration] = self.iteration
        if layout.sq is not None and self.sq is not None:
            out[layout.sq] = self.sq
        if layout.lengthscale is not None and self.lengthscale is not None:
            out[layout.lengthscale] = self.lengthscale
        if layout.model is not None and self.model is not None:
            out.update({layout.model + n: w for n, w in self.model.items()})
        return out

    @classmethod
    def from_flat(cls, flat: Flat, layout: KeptLayout, param_names: typing.Iterable[str]) -> Kept | None:
        """The record stored under ``layout``, or None where the checkpoint holds none."""
        names = list(param_names)
        if not names or flat.get(layout.params + names[0]) is None:
            return None
        model = None
        if layout.model is not None:
            model = {k[len(layout.model):]: v for k, v in flat.items() if k.startswith(layout.model)} or None
        err = flat.get(layout.err) if layout.err is not None else None
        return cls(params={n: flat[layout.params + n] for n in names},
                   iteration=int(flat.get(layout.iteration, 0)) if layout.iteration is not None else 0,
                   err=float(err) if err is not None else float("inf"),
                   sq=flat.get(layout.sq) if layout.sq is not None else None,
                   lengthscale=flat.get(layout.lengthscale) if layout.lengthscale is not None else None,
                   model=model)


def flat_state(state: StepperState | Flat, *, history: bool = True) -> Flat:
    """The flat dict of a state (a typed state's ``to_flat``); without ``history`` the
    per-iteration records are left out (checkpoints of O(state) size, see lwl.runner)."""
    flat = state.to_flat() if isinstance(state, StepperState) else dict(state)
    if not history:
        flat.pop("history", None)
    return flat


def pack(state: StepperState | Flat, *, history: bool = True) -> bytes:
    flat = flat_state(state, history=history)
    arrays = {k: v for k, v in flat.items() if isinstance(v, np.ndarray)}
    if _JSON_KEY in arrays:
        raise ValueError(f"state key {_JSON_KEY!r} is reserved")
    rest = {k: v for k, v in flat.items() if not isinstance(v, np.ndarray)}
    buf = io.BytesIO()
    blob = np.frombuffer(json.dumps(rest, allow_nan=True).encode(), dtype=np.uint8)
    np.savez(buf, **arrays, **{_JSON_KEY: blob})
    return buf.getvalue()


def unpack(data: bytes) -> Flat:
    """The flat dict of a packed state; the stepper's ``restore`` makes it typed."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        out: Flat = {k: z[k] for k in z.files if k != _JSON_KEY}
        out.update(json.loads(z[_JSON_KEY].tobytes().decode()))
    return out


__all__ = ["Flat", "Kept", "KeptLayout", "StepperState", "flat_state", "pack", "unpack"]
