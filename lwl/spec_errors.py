"""A refused job spec, field by field: pydantic's validation errors rewritten as
(field path, message) pairs that name the field a user wrote (:func:`lwl.spec.parse_job_spec`).

- the branch names of plain unions (``initial_data.labels``: ``list[float]``) are no field;
- a tagged union (family, model, algorithm) reports ``model.lengthscale``, not
  ``model.krr.lengthscale``, and an unknown or missing tag names its ``name`` field;
- a message of the form ``"sub.field: why"`` (the cross-field checks) names a field below the
  validator's location.
"""

from __future__ import annotations

import difflib
import typing

from pydantic import BaseModel, ValidationError


class SpecError(ValueError):
    """An invalid job spec; ``errors`` lists (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in errors))


def _union_tags() -> dict[str, list[str]]:
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    return {"family": FAMILIES.names(), "model": MODELS.names(), "algorithm": ALGORITHMS.names()}


def _loc(parts) -> str:
    return ".".join(str(p) for p in parts) or "(root)"


MAX_GUESSES = 20  # "did you mean" for the first errors only: a refused body may hold thousands of keys


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: itself, or inside Optional, unions, Annotated,
    lists and dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _fields_at(root: type[BaseModel], loc: tuple, tags: dict[str, list[str]]) -> list[str]:
    """The field names a user could have meant at the level of ``loc``'s last element (an
    unknown key): walked from ``root`` through nested models, list indices, the tagged unions'
    tags (their registry entries' parameter models) and plain unions' branch names."""
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    registries = {"family": FAMILIES, "model": MODELS, "algorithm": ALGORITHMS}
    candidates: list[type[BaseModel]] = [root]
    parts = list(loc[:-1])
    i = 0
    while i < len(parts) and candidates:
        part = parts[i]
        if isinstance(part, int):  # a list index: the list's models are the candidates already
            i += 1
            continue
        named = [m for m in candidates if m.__name__ == part]  # a plain union's branch name
        if named:
            candidates, i = named, i + 1
            continue
        found = [m for model in candidates for f in [model.model_fields.get(part)] if f is not None
                 for m in _models_in(f.annotation)]
        if i == 0 and part in registries and i + 1 < len(parts) and parts[i + 1] in tags.get(part, ()):
            entry = registries[part].get(parts[i + 1])  # a tagged union: the tag names its parameter model
            found, i = ([entry.params] if entry.params is not None else []), i + 1
        candidates, i = found, i + 1
    names = {n for model in candidates for n, f in model.model_fields.items()} | {
        f.alias for model in candidates for f in model.model_fields.values() if f.alias}
    return sorted(names)


def did_you_mean(unknown: str, known: list[str]) -> str:
    """``"; did you mean 'budget'?"`` for the closest known name, or nothing."""
    close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def spec_error(exc: ValidationError, root: type[BaseModel] | None = None) -> SpecError:
    """The :class:`SpecError` of a job spec's validation error (see the module docstring); with
    ``root`` (the model validated), an unknown field is told the closest known name at its level."""
    errors, tags = [], _union_tags()
    known: dict[tuple, list[str]] = {}  # field names per level, walked once (a body may hold many unknown keys)
    for e in exc.errors(include_url=False):
        msg = e["msg"].removeprefix("Value error, ")
        if (e["type"] == "extra_forbidden" and root is not None and e["loc"] and isinstance(e["loc"][-1], str)
                and len(errors) < MAX_GUESSES):
            level = tuple(e["loc"][:-1])
            if level not in known:
                known[level] = _fields_at(root, tuple(e["loc"]), tags)
            msg += did_you_mean(e["loc"][-1], known[level])
        # the branch names of plain unions (initial_data.labels: "list[float]") are no field
        loc = [p for p in e["loc"] if not (isinstance(p, str) and "[" in p)]
        # tagged unions (family, model, algorithm): report "model.lengthscale", not "model.krr.lengthscale"
        if len(loc) >= 2 and loc[1] in tags.get(loc[0], ()):
            del loc[1]
        if e["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc.append("name")
        # messages of the form "sub.field: why" name a field below the validator's location
        head, sep, rest = msg.partition(": ")
        if sep and " " not in head and head.replace(".", "").replace("_", "").isalnum():
            sub = head.split(".")
            loc = (loc[:-1] if loc and loc[-1] == sub[0] else loc) + sub
            msg = rest
        errors.append((_loc(loc), msg))
    return SpecError(errors)
