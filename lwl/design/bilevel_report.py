"""What a person reads of a bilevel result: the ``selected`` block (which check was returned, by
which rule, its improvement over theta0), the warnings about it and the headline (``summary``,
``stopped``). The check and the rule are :mod:`lwl.design.bilevel_keep`'s; this module words them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lwl.design.bilevel_keep import TOP_POINTS, Bars, Selection
from lwl.design.bilevel_state import BilevelState
from lwl.design.families import Params


def initial_err(checks: list[dict[str, Any]]) -> float | None:
    """theta0's check Err (None before it is checked)."""
    return next((c["err"] for c in checks if c.get("start") == "given"), None)


def worse_than_initial_warning(err: float, initial: float) -> str:
    return (f"the returned distribution is worse on the validation data than the initial one "
            f"(check Err {err:.4g} > {initial:.4g})")


def within_noise_warning(sel: Selection, threshold: float, significant_z: float | None) -> str:
    """The best check's improvement over theta0 is within noise: what is returned instead."""
    carried = (f"; its {TOP_POINTS} largest paired differences carry {sel.top_share:.0%} of their total"
               if sel.top_share is not None else "")
    head = (f"the best iterate's validation improvement over the initial distribution is within "
            f"noise ({sel.z:.2f} standard errors < {threshold:g}{carried})")
    if sel.fallback:
        return (head + f": of the checks that beat it beyond noise the surest (z {significant_z:.2f}) is returned, "
                f"the best checked iterate is best_distribution")
    if sel.nearest is not None:
        return (head + f", and so is every other check's: of the start points that validate below the initial "
                f"distribution, {sel.nearest} is nearest Q (the transport term of the paper's bound) and is "
                f"returned; the best checked iterate is best_distribution")
    return head + (", and so is every other check's: the initial distribution is returned, the best checked "
                   "iterate is best_distribution")


def no_iterate_improved_warning(start: str | None) -> str:
    """No gradient step beat the start point returned (a run that kept iteration 0)."""
    if start == "moment_matched":
        return ("no iterate improved on Q's moment-matched Gaussian (which validated better than "
                "the given initial distribution); it is returned")
    if str(start or "").startswith("broadened"):
        return (f"no iterate improved on the start point {start} (Q's fit with its "
                f"covariance scaled, which validated better than the given initial distribution); "
                f"it is returned")
    return ("no iterate improved on the initial distribution on the validation data; "
            "the initial distribution is returned")


def kept_err(state: BilevelState, sel: Selection, keep: str) -> float | None:
    """The check Err of the returned distribution (None without checks)."""
    checks = state.checks
    err = state.best.err if keep == "best" else (checks[-1]["err"] if checks else None)
    if not sel.within_noise:
        return err
    if sel.fallback:
        return state.significant.err
    return next((c["err"] for c in checks if c.get("start") == (sel.nearest or "given")), err)


def selected_block(state: BilevelState, sel: Selection, keep: str, bars: Bars) -> dict[str, Any]:
    """The result's ``selected`` block before its headline: the returned check's iteration,
    the rule that chose it, its improvement over theta0 (z), its check Err beside theta0's and
    the last check's, its lengthscale and (keep best) its start point."""
    checks = state.checks
    err = kept_err(state, sel, keep)
    selected = {"iteration": sel.iteration, "rule": f"{keep} validation check",
                "improvement_z": sel.z if sel.z is None or np.isfinite(sel.z) else None,
                "improvement_top_share": sel.top_share,
                "check_err": err if err is None or np.isfinite(err) else None,
                "initial_check_err": initial_err(checks), "lengthscale": sel.lengthscale,
                "last_check_err": checks[-1]["err"] if checks else None}
    starts = [c for c in checks if c["iteration"] == 0]
    if starts and keep == "best":
        selected["start"] = min(starts, key=lambda c: c["err"])["start"]
    if sel.fallback:
        selected["rule"] = "surest check that beats the initial distribution beyond noise"
        if sel.iteration == 0 and state.significant_start:
            selected["start"] = state.significant_start  # the start point returned
    elif sel.spread:
        selected["rule"] = (f"{keep} validation check on the lower bar for spread improvements (z "
                            f"{sel.z:.2f} >= {bars.threshold(state.best.iteration, sel.top_share):g}, its "
                            f"{TOP_POINTS} largest paired differences carrying {sel.top_share:.0%}; no check "
                            f"clears {bars.threshold(state.best.iteration):g})")
    elif sel.within_noise and sel.nearest is not None:
        selected.update(rule="start point nearest Q of those that validate below the initial distribution "
                             "(every check was within noise of it)", start=sel.nearest)
    elif sel.within_noise:
        selected.update(rule="initial distribution: the best check was within noise of it", start="given")
    return selected


def selection_warnings(state: BilevelState, sel: Selection, selected: dict[str, Any], keep: str,
                       bars: Bars) -> list[str]:
    """What a person should know about the returned distribution, in this order: it validates
    worse than theta0; the best check was within noise of theta0 (and what is returned
    instead); no iterate improved on the start point returned."""
    warnings = []
    initial, err = selected["initial_check_err"], selected["check_err"]
    if initial is not None and err is not None and err > initial:
        warnings.append(worse_than_initial_warning(err, initial))
    if sel.within_noise:
        # the bar the best check fell short of: the full one where a check cleared it instead
        bar = bars.threshold(state.best.iteration, None if sel.fallback else sel.top_share)
        warnings.append(within_noise_warning(sel, bar, state.significant_z))
    if state.checks and sel.iteration == 0 and keep == "best" and state.iteration > 0 \
            and not sel.within_noise:
        warnings.append(no_iterate_improved_warning(selected.get("start")))
    return warnings


def headline(state: BilevelState, selected: dict[str, Any], kept: Params, *, iterations: int, max_halvings: int,
             label: Callable[[str | None], str], kind: Callable[[Params], str] | None) -> dict[str, Any]:
    """What a person reads first: which distribution was kept and why, and why the run
    stopped (``summary``, ``stopped``), the kept start's readable ``start_label`` (``label``: the
    stepper's :meth:`~lwl.design.bilevel.BilevelDesign.start_label`) and, for families that
    choose between kinds (auto), the ``family`` that won (``kind``: the family's, if it has one)."""
    out: dict[str, Any] = {}
    if kind is not None:
        out["family"] = kind(kept)
    start = selected.get("start") if selected["iteration"] == 0 else None
    if selected["iteration"] == 0 and start is None:
        start = "given"
    start_label = label(start) if selected["iteration"] == 0 else None
    if start_label is not None:
        out["start_label"] = start_label
    given_label = label("given")
    if selected["iteration"] == 0 and start == "given":
        out["summary"] = (f"nothing beat {given_label} beyond noise on Q's validation samples: "
                          f"{given_label} is returned")
    elif selected["iteration"] == 0:
        out["summary"] = f"kept {start_label}, at iteration 0 (no gradient step improved on it)"
    else:
        # selected["start"] is the best start point: the one the descent began from
        origin = label(selected["start"]) if selected.get("start") else None
        out["summary"] = f"kept iteration {selected['iteration']}" + (f" (from {origin})" if origin else "")
    checks = state.checks
    last = checks[-1] if checks else {}
    if last.get("action") == "stopped":
        out["stopped"] = (f"early, at iteration {last['iteration']} of {iterations}: no check improved "
                          f"after the step was halved {max_halvings} times (converged)")
    else:
        out["stopped"] = f"at the last iteration ({state.iteration} of {iterations})"
    return out
