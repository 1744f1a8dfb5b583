"""The held-out verdict of an unbudgeted design (docs/method/bilevel.md "The verdict"): Err of KRR
models trained on several draws of the optimised distribution and of each baseline, on Q's
held-out samples, compared point by point and draw by draw (:mod:`lwl.evaluation.comparison`).
"""

from __future__ import annotations

import numpy as np

from lwl.evaluation.metrics import krr_error, sq_errors
from lwl.names import words


def evaluate_design(spec, q, distribution, oracle, validation_labels: np.ndarray | None = None,
                    *, initial=None, progress=None) -> dict:
    """Err of KRR models trained on ``train_size`` (and ``sizes``) samples from the optimised
    distribution and from each requested baseline, on Q's held-out samples; ``initial`` (the
    design's theta^0, for families whose theta^0 is not the ``normal`` baseline) as ``initial``.

    Every distribution candidate is trained on ``evaluation.draws`` training sets (draw r from
    the seed (seed, STREAM_EVAL, r), draw 0 from (seed, STREAM_EVAL) as before: Gaussians share
    their standard-normal draws, common random numbers); its Err is that of the squared error
    averaged over the draws, and the design is compared with each candidate point by point and
    draw by draw (:func:`lwl.evaluation.comparison.compare`). Err-vs-N uses draw 0.

    Returns ``{"train_size": N, "sizes": [...], "draws": R, "err": {name: Err at N},
    "err_draws": {name: [Err of each draw]}, "err_vs_n": {name: [Err at each size]},
    "comparisons": {name: design against it}, "held_out": count, ...}``.
    """
    from lwl.evaluation.comparison import compare, error_interval
    from lwl.measures import on_domain
    from lwl.registry import BASELINES
    from lwl.streams import STREAM_EVAL
    from lwl.oracles import as_numpy

    ev = spec.evaluation
    draws = getattr(ev, "draws", 1)
    sizes = sorted({*ev.sizes, ev.train_size})
    n_max = sizes[-1]
    test_x = np.concatenate(q.heldout)
    test_y = as_numpy(oracle.label(test_x))
    a = q.point_weights(q.heldout, q.weights)
    strata = [len(h) for h in q.heldout]
    y2 = (np.asarray(test_y, dtype=np.float64).reshape(len(test_x), -1) ** 2).sum(1)
    kw = dict(kernel=spec.model.kernel, lengthscale=spec.model.lengthscale, ridge=ev.ridge,
              device=spec.device)

    candidates: dict[str, object] = {"optimized": distribution}
    if initial is not None:  # the verdict compares with where the design started
        candidates["initial"] = initial
    failed: dict[str, str] = {}  # a baseline that cannot be built or trained never costs the design
    pool_baselines = [b for b in ev.baselines if BASELINES.get(b).extra.get("kind") == "pool"]
    for name in ev.baselines:
        if name not in pool_baselines:
            try:  # with an input domain the baselines draw inside it too: the oracle is never asked outside
                candidates[name] = on_domain(BASELINES.get(name).resolve()(spec, q), spec, q)
            except (ValueError, np.linalg.LinAlgError) as exc:
                failed[name] = str(exc)

    pool = np.concatenate(q.validation)
    pool_y = validation_labels if validation_labels is not None else None
    err_vs_n: dict[str, list[float]] = {}
    sq: dict[str, np.ndarray] = {}  # (draws, held-out points) squared errors at train_size
    drawn: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # each candidate's training sets at train_size
    bound = None
    labels_used = len(test_x)
    for name, measure in candidates.items():
        try:
            rows, sets = [], []
            for r in range(draws):
                # one seed per draw index for every candidate: common random numbers
                x = measure.sample(n_max if r == 0 else ev.train_size,
                                   [spec.seed, STREAM_EVAL] if r == 0 else [spec.seed, STREAM_EVAL, r])
                y = as_numpy(oracle.label(x))
                labels_used += len(x)
                sets.append((x[:ev.train_size], y[:ev.train_size]))
                kept: dict = {}
                if r == 0:
                    err_vs_n[name] = [krr_error(x[:n], y[:n], test_x, test_y, a, **kw,
                                                keep=kept if n == ev.train_size else None) for n in sizes]
                else:
                    krr_error(x, y, test_x, test_y, a, **kw, keep=kept)
                rows.append(sq_errors(kept["pred"], test_y))
                if r == 0 and name == "optimized" and ev.bound:
                    from lwl.bound import bilevel_bound

                    e_q = float(a @ ((kept["pred"] - test_y) ** 2).reshape(len(a), -1).sum(1))
                    zero_q = float(a @ (test_y**2).reshape(len(a), -1).sum(1))
                    try:
                        bound = bilevel_bound(spec, q, measure, oracle, kept["model"], e_q, zero_q)
                    except (ValueError, np.linalg.LinAlgError) as exc:  # e.g. a runaway covariance
                        bound = {"error": f"{type(exc).__name__}: {exc}"}
            sq[name] = np.stack(rows)
            drawn[name] = sets
        except (ValueError, np.linalg.LinAlgError) as exc:
            if name == "optimized":
                raise
            failed[name] = str(exc)
        if progress:
            progress(name)
    own: dict = {}
    if "model.lengthscale" in spec.derived and validation_labels is not None:
        own = baselines_at_own_lengthscale(spec, q, drawn, validation_labels, test_x, test_y, a, failed)
    for idx, name in enumerate(pool_baselines):
        if pool_y is None:
            pool_y = as_numpy(oracle.label(pool))
            labels_used += len(pool)
        order = BASELINES.get(name).resolve()(pool, pool_y, n_max, kernel=kw["kernel"], lengthscale=kw["lengthscale"],
                                          ridge=ev.ridge, seed=[spec.seed, STREAM_EVAL, 100 + idx])
        kept = {}
        err_vs_n[name] = [krr_error(pool[order[:n]], pool_y[order[:n]], test_x, test_y, a, **kw,
                                    keep=kept if n == ev.train_size else None) for n in sizes]
        sq[name] = sq_errors(kept["pred"], test_y)[None, :]  # a deterministic selection: one draw
        if progress:
            progress(name)
    err = {k: float(np.sqrt(_err_sq(v, y2, strata, q.weights))) for k, v in sq.items()}
    comparisons = {k: compare(sq["optimized"], v, y2, strata, q.weights).to_json()
                   for k, v in sq.items() if k != "optimized"}
    for k, v in own.items():
        v["comparison"] = compare(sq["optimized"], v.pop("sq"), y2, strata, q.weights).to_json()
    interval = error_interval(sq["optimized"], y2, strata, q.weights)
    return {"train_size": ev.train_size, "sizes": sizes, "held_out": int(len(test_x)), "draws": draws,
            "err": err, "err_draws": {k: [float(np.sqrt(_err_sq(row[None], y2, strata, q.weights))) for row in v]
                                      for k, v in sq.items()},
            "err_vs_n": err_vs_n, "failed": failed, "comparisons": comparisons,
            # with a lengthscale lwl selected for the design: each baseline at the lengthscale
            # that validates best for it (baselines_at_own_lengthscale)
            **({"err_own_lengthscale": own} if own else {}),
            # 95% interval of the design's Err over the training draws and the held-out points
            "err_interval": {"level": 0.95, "optimized": list(interval)},
            "labels_used": labels_used,
            # the paper's Prop. 3.1 / Cor. 3.2 bound of the design's model (lwl.bound)
            "bound": bound}


def _err_sq(sq: np.ndarray, y2: np.ndarray, strata, weights) -> float:
    from lwl.evaluation.comparison import err_squared

    return err_squared(sq, y2, strata, weights)


def baselines_at_own_lengthscale(spec, q, drawn: dict, validation_labels: np.ndarray,
                                 test_x: np.ndarray, test_y: np.ndarray, a: np.ndarray, failed: dict) -> dict:
    """Held-out Err of each baseline (and ``initial``) with the lengthscale chosen for *it*, as
    lwl chose the design's: of the median distance times LENGTHSCALE_FACTORS, the one whose KRR,
    trained on the same ``train_size`` samples as the main evaluation (``drawn``: no new
    labels), has the lowest Err on Q's validation samples. When lwl selects the lengthscale
    with the design, the baselines trained with the design's lengthscale are the paper's
    comparison (one model, different training data); this is the stricter one a user would
    make by tuning the baseline too. ``{name: {"err": held-out Err, "lengthscale": chosen}}``."""
    from lwl.defaults import LENGTHSCALE_FACTORS, LENGTHSCALE_LIMITS, median_lengthscale, select_widening

    grid = [f * median_lengthscale(q, spec.seed) for f in LENGTHSCALE_FACTORS]
    val_x = np.concatenate(q.validation)
    val_a = q.point_weights(q.validation, q.weights)
    kw = dict(kernel=spec.model.kernel, ridge=spec.evaluation.ridge, device=spec.device)
    out = {}
    median = grid[LENGTHSCALE_FACTORS.index(1.0)]
    limits = [f * median for f in LENGTHSCALE_LIMITS]
    strata = [len(h) for h in q.heldout]
    y2 = (np.asarray(test_y, dtype=np.float64).reshape(len(test_x), -1) ** 2).sum(1)
    for name, sets in drawn.items():
        if name == "optimized" or name in failed:
            continue
        x, y = sets[0]  # chosen on draw 0's validation Err, as the design's on its check batch
        try:
            ell, _ = select_widening(lambda ell: krr_error(x, y, val_x, validation_labels, val_a, lengthscale=ell,
                                                           **kw), grid, *limits)
            rows = []
            for xs, ys in sets:
                kept: dict = {}
                krr_error(xs, ys, test_x, test_y, a, lengthscale=ell, keep=kept, **kw)
                rows.append(sq_errors(kept["pred"], test_y))
            sq = np.stack(rows)
            out[name] = {"err": float(np.sqrt(_err_sq(sq, y2, strata, q.weights))), "lengthscale": ell, "sq": sq}
        except (ValueError, np.linalg.LinAlgError):
            continue  # the baseline at the design's lengthscale still stands
    return out


def _outcome(evaluation: dict, name: str, design: float, other: float, own: bool = False) -> dict:
    """The design against candidate ``name``: its comparison over the training draws when the
    evaluation has one (:mod:`lwl.evaluation.comparison`), else the two numbers alone."""
    if own:
        comp = ((evaluation.get("err_own_lengthscale") or {}).get(name) or {}).get("comparison")
    else:
        comp = (evaluation.get("comparisons") or {}).get(name)
    if comp is not None:
        return comp
    outcome = "better" if design < other else "worse" if design > other else "tie"
    return {"outcome": outcome, "err": design, "other_err": other, "ratio": design / other if other > 0 else None,
            "ratio_interval": None, "draws": 1}


def verdict(evaluation: dict, warnings: list[str] = (), *, returned_initial: bool = False,
            initial_label: str = "the initial distribution") -> dict:
    """The design against its baselines and its initial distribution on Q's held-out samples.

    ``{"err": Err of the design (over the evaluation's training draws), "err_interval_95": its
    interval over the draws and the held-out points, "baselines": {name: Err}, "best_baseline":
    name, "best_baseline_err": its Err, "ratio": Err / Err of the best baseline,
    "ratio_interval_95", "outcome": "better" | "tie" | "worse" against the best baseline,
    "initial_outcome": the same against the initial distribution, "beats_best_baseline": outcome
    is better, "beats_initial": initial_outcome is better, "draws": training sets per candidate,
    "warnings": [...]}``. A baseline counts with the better of its Err at the design's
    lengthscale and (when lwl selected the lengthscale) at the one that validates best for it
    (``baselines_own_lengthscale``). ``normal`` is the initial distribution of a Gaussian family
    (other families' is ``initial``). ``returned_initial``: the design is its initial
    distribution (nothing beat it beyond noise), which the verdict says instead of a ratio
    of 1 against itself.
    """
    err = evaluation["err"]
    design = err["optimized"]
    baselines = {k: v for k, v in err.items() if k not in ("optimized", "initial")}
    own = {k: v["err"] for k, v in (evaluation.get("err_own_lengthscale") or {}).items() if k in baselines}
    # a baseline is as strong as its better lengthscale: the design's or its own
    strongest = {k: min(v, own.get(k, v)) for k, v in baselines.items()}
    interval = (evaluation.get("err_interval") or {}).get("optimized")
    out = {"err": design, "err_interval_95": interval, "baselines": baselines, "best_baseline": None, "ratio": None,
           "ratio_interval_95": None, "outcome": None, "initial_outcome": None, "beats_best_baseline": None,
           "beats_initial": None, "draws": evaluation.get("draws", 1), "returned_initial": returned_initial,
           "initial_label": initial_label, "warnings": list(warnings)}
    for name, why in evaluation.get("failed", {}).items():
        out["warnings"].append(f"baseline {name} ({words(name)}) could not be evaluated: {why}")
    if own:
        out["baselines_own_lengthscale"] = own
    if baselines:
        best = min(strongest, key=strongest.get)
        at_own = best in own and own[best] < baselines[best]
        comp = _outcome(evaluation, best, design, strongest[best], own=at_own)
        out.update(best_baseline=best, best_baseline_err=strongest[best], ratio=comp["ratio"],
                   ratio_interval_95=comp["ratio_interval"], outcome=comp["outcome"],
                   beats_best_baseline=comp["outcome"] == "better")
        if at_own and _outcome(evaluation, best, design, baselines[best])["outcome"] == "better" \
                and comp["outcome"] != "better":
            out["warnings"].append(f"the design beats baseline {best} ({words(best)}) trained with the design's "
                                   f"lengthscale (Err {baselines[best]:.4g}) but not {best} with the lengthscale selected "
                                   f"for it "
                                   f"(Err {own[best]:.4g})")
        if comp["outcome"] == "worse" and comp.get("ratio_interval") is not None:  # over the draws
            out["warnings"].append(f"on held-out data the design (Err {design:.4g}) is worse than baseline {best} "
                                   f"({words(best)}) "
                                   f"(Err {strongest[best]:.4g}) beyond noise over {out['draws']} training draws")
    # "initial" for families other than the Gaussian, judged at the design's lengthscale (the
    # paper's comparison: one model); at its own lengthscale it only warns, because theta0 was a
    # candidate of the design's selection at every lengthscale
    key = "initial" if "initial" in err else "normal"
    initial = err.get(key)
    if initial is not None:
        comp = _outcome(evaluation, key, design, initial)
        out.update(initial_err=initial, initial_outcome=comp["outcome"], beats_initial=comp["outcome"] == "better")
        if returned_initial:
            pass  # said by the headline: nothing beat it on validation, it was returned
        elif comp["outcome"] == "worse":
            out["warnings"].append(f"on held-out data the design (Err {design:.4g}) is worse than {initial_label} "
                                   f"(Err {initial:.4g}) beyond noise")
        elif comp["outcome"] == "tie":
            out["warnings"].append(f"on held-out data the design (Err {design:.4g}) is within noise of "
                                   f"{initial_label} (Err {initial:.4g})")
        own_initial = (evaluation.get("err_own_lengthscale") or {}).get(key)
        if own_initial and comp["outcome"] == "better" and not design < own_initial["err"]:
            out["warnings"].append(f"on held-out data the initial distribution trained with the lengthscale that "
                                   f"validates best for it (Err {own_initial['err']:.4g}) is not worse than the "
                                   f"design (Err {design:.4g})")
    if key == "normal" and out["best_baseline"] == "mixture" and out["outcome"] == "worse":
        # one Gaussian cannot put its samples where Q's members are; the default family starts there
        out["warnings"].append(f"on held-out data Q's own mixture (Err {out['best_baseline_err']:.4g}) is better "
                               f"than this one-Gaussian design (Err {design:.4g}): leave the family out (auto) or "
                               f"name {{\"name\": \"mixture\"}}, which start from Q's members")
    return out
