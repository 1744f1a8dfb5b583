"""A refused job spec, field by field: pydantic's validation errors rewritten as
(field path, message) pairs that name the field a user wrote (:func:`lwl.spec.parse_job_spec`).

- the branch names of plain unions (``initial_data.labels``: ``list[float]``) are no field;
- a tagged union (family, model, algorithm) reports ``model.lengthscale``, not
  ``model.krr.lengthscale``, and an unknown or missing tag names its ``name`` field;
- a message of the form ``"sub.field: why"`` (the cross-field checks) names a field below the
  validator's location.
"""

from __future__ import annotations

from pydantic import ValidationError


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


def spec_error(exc: ValidationError) -> SpecError:
    """The :class:`SpecError` of a job spec's validation error (see the module docstring)."""
    errors, tags = [], _union_tags()
    for e in exc.errors(include_url=False):
        msg = e["msg"].removeprefix("Value error, ")
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
