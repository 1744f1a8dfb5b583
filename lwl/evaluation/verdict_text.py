"""A job's verdict in one line, as ``lwl run`` and the client print it.

Two kinds of verdict read differently: an unbudgeted job's against the best baseline
(:func:`lwl.evaluation.heldout.verdict`) and a budgeted job's at equal labels or on validation
(:mod:`lwl.evaluation.equal_labels`). The text lives here, apart from both computations, so neither
module imports the other for it. Candidates and baselines are named in words (:mod:`lwl.names`):
the ``names`` a verdict carries, else :func:`lwl.names.words` of the id.
"""

from __future__ import annotations

from lwl.names import words


def said(v: dict, name: str | None) -> str:
    """The verdict's candidate or baseline ``name`` in words."""
    return (v.get("names") or {}).get(name) or words(name)


def verdict_sentence(v: dict) -> str | None:
    """The verdict ``v`` in one line (None when it has nothing to say: no baselines)."""
    if v.get("kind") in ("equal_labels", "validation"):
        return budget_sentence(v)
    return design_sentence(v)


OUTCOME_WORDS = {"better": "better than", "tie": "within noise of", "worse": "WORSE than"}


def design_sentence(v: dict) -> str | None:
    """An unbudgeted job's verdict (:func:`lwl.evaluation.heldout.verdict`) against the best baseline."""
    best = v.get("best_baseline")
    if not best:
        return None
    outcome = v.get("outcome") or ("better" if v.get("beats_best_baseline") else "worse")
    err = v.get("best_baseline_err", v["baselines"][best])
    where = " at its own lengthscale" if err != v["baselines"][best] else ""
    ratio = f"ratio {v['ratio']:.3f}" if v.get("ratio") is not None else "ratio -"
    if v.get("ratio_interval_95"):
        lo, hi = v["ratio_interval_95"]
        ratio += f", 95% {lo:.3f}-{hi:.3f}"
    draws = v.get("draws", 1)
    over = f", {draws} training draws" if draws and draws > 1 else ""
    head = "verdict: the design"
    if v.get("returned_initial"):
        head = f"verdict: nothing beat {v.get('initial_label', 'the initial distribution')} on validation and it was returned; it"
    return (f"{head} (Err {v['err']:.4f}) is {OUTCOME_WORDS[outcome]} the best baseline, {said(v, best)} "
            f"(Err {err:.4f}{where}; {ratio}{over})")


def budget_sentence(v: dict) -> str | None:
    """One line: the training set against Q's mixture and the anchor at equal labels (the audit),
    or, with no held-out label (kind ``validation``, :meth:`BudgetedBilevel.validation_verdict`),
    the returned distribution's points against Q's mixture's on Q's validation points."""
    if v.get("kind") == "validation":
        if v.get("outcome") is None:
            return None
        if v.get("returned_initial"):
            return (f"verdict on validation (no held-out labels): Q's own mixture was returned "
                    f"(validation Err {v['err']:.4f}); {v['basis']}")
        how = {"better": "better than", "tie": "within noise of", "worse": "worse than"}[v["outcome"]]
        return (f"verdict on validation (no held-out labels): {said(v, v['selected'])}'s points validate {how} "
                f"{said(v, v['best_baseline'])}'s at {v['points_each']} points each (Err {v['err']:.4f} vs "
                f"{v['best_baseline_err']:.4f}, ratio {v['ratio']:.3f}, z {v['z']:.2f}); {v['basis']}")
    if v.get("kind") != "equal_labels":
        return None
    parts = [f"{said(v, name)} {v['baselines'][name]:.4f} ({v['outcomes'][name]})" for name in v["outcomes"]]
    return (f"verdict at equal labels ({v['labels']}): the training set trains to Err {v['err']:.4f}; "
            f"against {', '.join(parts)}")
