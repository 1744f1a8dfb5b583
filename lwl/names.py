"""The names of candidates and baselines in words a user knows.

A job's documents name its candidates by internal ids (``broadened_4``, ``q_mixture``, ``given``,
``nipv``, ...): stable keys for programs. People read :func:`words` of them ("Q's fit broadened
×4", "Q's own mixture"), and this module is the one place that says them: the verdict sentences
(:mod:`lwl.evaluation.verdict_text`), the bilevel design's start labels and, through the
``names`` a result carries (:func:`names_of`), the dashboard.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

# ids whose words do not depend on the family
FIXED = {
    "q_mixture": "Q's own mixture",
    "mixture": "Q's own mixture",  # the baseline: the mixture of the Gaussians fitted to Q's members
    "moment_matched": "Q's moment-matched Gaussian",
    "barycenter": "the W2 barycenter of Q's members",
    "uniform": "the uniform distribution on the box",
    "ncoreset": "a k-centre coreset of Q's points",
    "acoreset": "an adaptive coreset of Q's points",
    "nipv": "active learning (NIPV)",
    "anchor": "active learning (NIPV)",
    "optimized": "the design",
    "challenger": "the design moved by bilevel steps (on trial)",
    "moved": "the design moved by bilevel steps",
}

# where a budgeted job's labelled points came from, besides its candidates (labels_by_source)
SOURCES = {"validation": "Q's validation points", "initial": "the lab's initial data"}


def words(name: str | None, family: str | None = None) -> str:
    """``name`` (a candidate's, start point's or baseline's id) in words; an unknown id as it is.

    ``family`` matters where a family's start points mean something else: under ``auto`` the
    given start point is Q's mixture and ``gaussian`` Q's moment-matched Gaussian."""
    if name is None:
        return "an iterate"
    auto = family == "auto"
    base, sep, factor = name.rpartition("broadened_")
    if sep:  # "broadened_4" or, under auto, "gaussian_broadened_2"
        base = base.removesuffix("_")
        what = (words(base, family) if base else "Q's mixture" if auto else "Q's fit")
        return f"{what} broadened ×{factor}"
    if name.startswith("moved (round "):  # the incumbent after an accepted bilevel step
        return f"the design moved by bilevel steps ({name.removeprefix('moved (').removesuffix(')')})"
    if name == "given":
        return "Q's mixture" if auto else "the initial distribution"
    if name == "gaussian" and auto:
        return "Q's moment-matched Gaussian"
    if name == "normal":  # a Gaussian family's theta^0, any other family's Q's moment-matched Gaussian
        return {"gaussian": "the initial Gaussian",
                None: "the Gaussian baseline"}.get(family, "Q's moment-matched Gaussian")
    if name == "initial":  # an evaluation's initial distribution; the interval search's first interval
        return "the search's first interval of ω" if family == "interval" else "the initial distribution"
    lo = name.removeprefix("interval_")
    if family == "interval" and lo != name and _is_number(lo):  # lwl.design.budgeted_interval's candidate
        return f"the interval law of ω from {float(lo) / math.pi:.3g}π"
    if name == "initial_particles":  # a budgeted particle design's candidate (not the lab's initial data)
        return "particle AMA's initial particles"
    if name == "q_fit":  # a budgeted operator design's candidate (lwl.design.budgeted_ama, budgeted_particles)
        if family == "particles":  # not a member of the particles family: a log-normal law
            return "the log-normal KLE nearest Q's log-fields (W2)"
        return "Q's W2 projection onto the family"
    member, sep, fit = name.removeprefix("member_").partition("_")
    if name.startswith("member_") and not sep and member.isdigit():  # lwl.design.budgeted_particles
        return f"Q's member {member}"
    if name.startswith("member_") and sep and fit == "fit" and member.isdigit():
        return f"the family member nearest Q's member {member} (W2)"
    return FIXED.get(name, name)


def source_words(name: str, family: str | None = None) -> str:
    """Where points of a budgeted job's training set came from (``labels_by_source``'s keys)."""
    return SOURCES.get(name) or words(name, family)


def names_of(result: dict[str, Any], family: str | None = None) -> dict[str, str]:
    """Every id a result document names (its verdict's, evaluation's and budgeted pool's), in
    words: the ``names`` a result and its verdict carry, so that a client shows the words
    without knowing the ids."""
    ids: set[str] = set()
    v = result.get("verdict") or {}
    ids.update(_strings([v.get("best_baseline"), v.get("selected")]))
    ids.update(v.get("baselines") or {})
    ids.update(v.get("outcomes") or {})
    ids.update((result.get("evaluation") or {}).get("err") or {})
    sel = result.get("selected") or {}
    ids.update(_strings([sel.get("candidate"), sel.get("start")]))
    ids.update(sel.get("scores") or {})
    for h in result.get("history") or []:
        ids.update(h.get("scores") or {})
        ids.update(_strings([h.get("incumbent"), h.get("rival")]))
        race = h.get("race") or {}  # the race against Q's mixture (the dashboard's race chart)
        ids.update(_strings([race.get("incumbent"), race.get("overtook"), race and "q_mixture"]))
    out = {i: words(i, family) for i in sorted(ids)}
    out.update({s: source_words(s, family) for s in result.get("labels_by_source") or {}})
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _strings(values: Iterable[Any]) -> list[str]:
    return [v for v in values if isinstance(v, str)]
