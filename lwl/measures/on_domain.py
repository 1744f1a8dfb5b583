"""A law on a job's input domain D as its ``domain.outside`` puts Q there: restricted to D
(:class:`lwl.measures.Truncated`, ``"refuse"``), or put onto D by the nearest-point projection with
at most Q's share on D's faces (:class:`lwl.measures.Clipped`, ``"clip"``); docs/method/families.md "Input
domains"."""

from __future__ import annotations

from lwl.measures.base import Measure
from lwl.measures.clipped import Clipped
from lwl.measures.truncated import Truncated


def constrain(measure: Measure, domain, outside: str = "refuse", face_share: float | None = None) -> Measure:
    """``measure`` on ``domain`` (a :class:`lwl.domain.Domain`): restricted to it (``"refuse"``) or
    put onto it by the projection, at most ``face_share`` of it on the faces (``"clip"``);
    unchanged when there is no domain."""
    if domain is None:
        return measure
    if outside == "clip":
        return Clipped(measure, domain, face_share)
    return Truncated(measure, domain)


def on_domain(measure: Measure, spec, q) -> Measure:
    """``measure`` as a job with ``spec`` and Q's samples ``q`` (a :class:`lwl.q_samples.MetaTestSamples`)
    draws from it: unchanged without a ``domain``; with ``outside: "clip"`` its face share capped at
    Q's share on D's boundary (``q.share_on_boundary``)."""
    domain = getattr(spec, "domain", None)
    if domain is None:
        return measure
    box = domain.build()
    share = q.share_on_boundary(box) if domain.outside == "clip" else None
    return constrain(measure, box, domain.outside, share)
