"""The verdict of a budgeted job: its training set against others of the same size (equal labels).

A budgeted job pays for n = ``labels_used`` labels (with ``initial_labels``, the initial data) and
returns them as its training set (the served model's, and those the left-out check kept out of it,
``result["left_out"]``). It is judged by the
held-out Err (:mod:`lwl.evaluation`) of the job's model trained on its training set (KRR with the job's kernel,
lengthscale and ridge; a ``gp`` with its hyperparameters fitted to those labels), against the same
model, trained the same way (a ``gp`` refitted to each training set's own labels), on n labels from

- Q's mixture and the other distribution baselines (``evaluation.baselines``; ``mixture``,
  ``normal`` and ``barycenter`` by default), each over ``draws`` training draws;
- the active-learning anchor: greedy integrated-variance reduction (:mod:`lwl.evaluation.nipv`) over
  a pool of Q's samples (Q's validation inputs, topped up with draws of Q's mixture to twice n),
  integrated over Q's validation inputs (at most ``INTEGRATION_MAX``), with the job's kernel,
  its lengthscale and the ridge as noise variance (a ``gp``: the kernel and noise of the GP fitted
  to the job's training set, :func:`lwl.evaluation.nipv.gp_kernel`, the lab's GP at this size);
  one selection per pool draw.

A ``gp`` job's evaluation also runs **lwl's KRR pipeline** (the same job with ``model: krr``, its
lengthscale chosen by lwl) on the same oracle and reports, in ``krr_pipeline``, the held-out Err of
its training set with its KRR and with the fitted GP: with the design's own Err the gains from the
model (KRR -> GP on the KRR design's data) and from the data (the KRR design's data -> the GP
design's, both with the GP) are both visible.

Comparisons use :func:`lwl.evaluation.comparison.compare` (better / tie / worse from the interval of the
log of the ratio of Err^2 over training draws and held-out points). The job's training set is one
fixed set (the product the user holds), so its row is repeated against each draw of the other:
the interval covers the held-out points and the baselines' training draws, not the design's own
randomness (the budget study reruns the design over seeds for that).

**What counts.** The labels of this audit are *not* part of the job's ``labels_used``: they are
held-out labels and baseline training sets that a lab never pays for, spent by lwl on a cheap
built-in oracle to check its own result, and reported as ``audit_labels``. Jobs whose oracle is
ask/tell (``external``) or a lab endpoint (``http``) run no audit unless asked
(``evaluation.enabled``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from lwl.evaluation.comparison import compare, error_interval
from lwl.evaluation.metrics import krr_error
from lwl.names import words
from lwl.oracles import as_numpy
from lwl.streams import STREAM_AUDIT

DRAWS = 5  # training draws per baseline
ANCHOR_MAX = 4096  # the NIPV anchor runs for training sets up to this size (its cost is O(n^2 pool))
INTEGRATION_MAX = 1000  # Q points the anchor integrates the posterior variance over
EQUAL_LABEL_BASELINES = ("mixture", "normal", "barycenter")  # compared when the spec names none


def anchor_pool(q, n: int, seed: int, spec=None) -> np.ndarray:
    """The anchor's candidates: Q's validation inputs, topped up with draws of Q's mixture (on the
    job's input domain as ``spec`` puts Q's laws there, :func:`lwl.measures.on_domain`) to
    max(2n, n + 1000) points."""
    from lwl.evaluation.baselines import mixture
    from lwl.measures import on_domain

    pool = np.concatenate(q.validation)
    size = max(2 * n, n + 1000)
    if len(pool) < size:
        top_up = mixture(q) if spec is None else on_domain(mixture(q), spec, q)
        pool = np.concatenate([pool, top_up.sample(size - len(pool), [seed, STREAM_AUDIT, 1000])])
    return pool


def integration_points(q, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Q's validation inputs (each member subsampled to its share of INTEGRATION_MAX) and their
    weights w_k / M_k."""
    rng = np.random.default_rng([seed, STREAM_AUDIT, 2000])
    per = max(1, INTEGRATION_MAX // len(q.validation))
    parts = [x if len(x) <= per else x[np.sort(rng.choice(len(x), per, replace=False))] for x in q.validation]
    return np.concatenate(parts), q.point_weights(parts, q.weights)


def anchor_training_set(q, n: int, *, kernel, lengthscale: float, ridge: float, seed: int,
                        draw: int = 0, spec=None) -> np.ndarray:
    """The NIPV anchor's n inputs (to be labelled); ``spec``: the job's, for its input domain."""
    from lwl.evaluation.nipv import nipv_select

    pool = anchor_pool(q, n, seed + draw, spec)
    z, a = integration_points(q, seed)
    order, _ = nipv_select(pool, z, a, n, kernel=kernel, lengthscale=lengthscale, noise=ridge)
    return pool[order]


def equal_labels(spec, q, X: np.ndarray, y: np.ndarray, oracle, *, draws: int = DRAWS,
                 baselines: list[str] | None = None, anchor: bool | None = None, anchor_draws: int = 1,
                 progress=None, labels: int | None = None) -> dict:
    """Held-out Err of the job's model (KRR, or the gp fitted to each training set) on the
    training set (X, y) against the baselines and the anchor at the same number of labels
    (module docstring): ``labels`` each (None: len(y); a job whose left-out check kept paid labels
    out of (X, y) passes every label it paid for, so the others get as many). ``spec`` is the resolved spec (its
    lengthscale is the one the job chose). Returns the evaluation document with the per-point
    squared errors left out: ``{"labels", "err": {name: Err}, "comparisons": {name: ...},
    "audit_labels", "held_out", "draws", ...}``."""
    from lwl.measures import on_domain
    from lwl.registry import BASELINES

    from lwl.models import train

    n = len(y) if labels is None else int(labels)
    ridge = spec.evaluation.ridge
    test_x = np.concatenate(q.heldout)
    test_y = as_numpy(oracle.label(test_x)).reshape(len(test_x), -1)
    audit = len(test_x)
    a = q.point_weights(q.heldout, q.weights)
    sizes, y2 = [len(h) for h in q.heldout], (test_y**2).sum(1)

    def sq_errors(train_x, train_y, model=None) -> np.ndarray:
        """The job's model trained on this set (a gp's hyperparameters fitted to its labels)."""
        if model is None:
            model = train(spec.model, train_x, train_y, ridge=ridge, seed=spec.seed)
        return ((np.asarray(model.predict(test_x)).reshape(test_y.shape) - test_y) ** 2).sum(1)

    design_model = train(spec.model, X, y, ridge=ridge, seed=spec.seed)  # also the anchor's GP below
    design = sq_errors(X, y, design_model)
    rows: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    names = [b for b in (baselines if baselines is not None else EQUAL_LABEL_BASELINES)
             if BASELINES.get(b).extra.get("kind", "distribution") == "distribution"]
    for name in names:
        try:
            measure = on_domain(BASELINES.get(name).resolve()(spec, q), spec, q)  # on the input domain, as Q's laws are
            out = []
            for r in range(draws):  # draw r of every baseline from the same seed (common random numbers)
                x = measure.sample(n, [spec.seed, STREAM_AUDIT, r])
                out.append(sq_errors(x, as_numpy(oracle.label(x))))
                audit += n
            rows[name] = np.stack(out)
        except (ValueError, np.linalg.LinAlgError) as exc:
            failed[name] = str(exc)
        if progress:
            progress(name)
    anchor = n <= ANCHOR_MAX if anchor is None else anchor
    if anchor:
        if spec.model.name == "gp":  # the lab's GP at n labels: fitted to the job's training set
            from lwl.evaluation.nipv import gp_kernel

            kernel, noise = gp_kernel(design_model)
            ell = 0.0  # unused: the kernel is the GP's
        else:
            kernel, ell, noise = spec.model.kernel, spec.model.lengthscale, ridge
        out = []
        for r in range(anchor_draws):
            x = anchor_training_set(q, n, kernel=kernel, lengthscale=ell, ridge=noise,
                                    seed=spec.seed, draw=r, spec=spec)
            out.append(sq_errors(x, as_numpy(oracle.label(x))))
            audit += n
        rows["nipv"] = np.stack(out)
        if progress:
            progress("nipv")
    comparisons = {name: compare(np.repeat(design[None, :], len(sq), 0), sq, y2, sizes, q.weights)
                   for name, sq in rows.items()}
    err = {"optimized": float(np.sqrt(a @ design / (a @ y2)))}
    err.update({name: c.other_err for name, c in comparisons.items()})
    return {"kind": "equal_labels", "labels": n, "train_size": n, "model": spec.model.name, "err": err,
            "err_interval": {"level": 0.95, "optimized": list(error_interval(design, y2, sizes, q.weights))},
            "comparisons": {name: c.to_json() for name, c in comparisons.items()},
            "draws": {name: int(len(sq)) for name, sq in rows.items()}, "held_out": int(len(test_x)),
            "audit_labels": int(audit), "failed": failed,
            "anchor": ("nipv: greedy integrated posterior variance over Q's samples" if anchor else
                       f"skipped: the NIPV anchor runs for training sets up to {ANCHOR_MAX} labels")}


def krr_pipeline(spec, q, oracle, gp_design_err: float, run: Callable[..., dict]) -> dict:
    """lwl's KRR pipeline on this job: the same spec with ``model: krr`` (lengthscale chosen by
    lwl), designed on ``oracle`` under the same budget; the held-out Err of its training set with
    its own KRR and with the job's GP (hyperparameters fitted to that set), beside the GP design's
    (module docstring). ``model_gain``: KRR pipeline Err / (KRR design's data + GP) Err;
    ``data_gain``: (KRR design's data + GP) Err / the GP design's Err (> 1: a gain). ``run`` is
    :func:`lwl.runner.run_job`, handed down by the runner (the evaluation sits below it)."""
    from lwl.models import train

    doc = spec.model_dump(mode="json")
    doc["model"] = {"name": "krr"}
    doc["derived"] = [d for d in doc["derived"] if not d.startswith("model.")]  # lwl chooses the KRR lengthscale
    doc["evaluation"] = {**doc["evaluation"], "enabled": False}
    res = run(doc, oracle=oracle, evaluate=False)
    Xk, yk = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    test_x = np.concatenate(q.heldout)
    test_y = as_numpy(oracle.label(test_x)).reshape(len(test_x), -1)
    a = q.point_weights(q.heldout, q.weights)
    ell = float(res["spec"]["model"]["lengthscale"])
    err_krr = krr_error(Xk, yk, test_x, test_y, a, kernel=res["spec"]["model"]["kernel"], lengthscale=ell,
                        ridge=spec.evaluation.ridge)
    from lwl.evaluation.metrics import relative_ood_error

    gp = train(spec.model, Xk, yk, ridge=spec.evaluation.ridge, seed=spec.seed)
    err_gp = relative_ood_error(gp.predict(test_x), test_y, a)
    return {"err_krr": float(err_krr), "err_gp": float(err_gp), "lengthscale": ell, "labels_used": int(res["labels_used"]),
            "selected": res["selected"]["candidate"],
            "model_gain": float(err_krr / err_gp) if err_gp > 0 else None,
            "data_gain": float(err_gp / gp_design_err) if gp_design_err > 0 else None}


def verdict(evaluation: dict, warnings: list[str] = (), family: str | None = None) -> dict:
    """The budgeted job's verdict: the training set against each baseline at equal labels, in
    the fields :func:`lwl.evaluation.verdict_text.verdict_sentence` reads, plus ``outcomes`` (better / tie /
    worse per baseline) and ``comparisons``; the warnings name the baselines in the words of the
    job's ``family`` (:func:`lwl.names.words`)."""
    err = evaluation["err"]
    design = err["optimized"]
    comps = evaluation["comparisons"]
    baselines = {k: v for k, v in err.items() if k != "optimized"}
    out = {"kind": "equal_labels", "labels": evaluation["labels"], "err": design,
           "err_interval_95": evaluation["err_interval"]["optimized"], "baselines": baselines,
           "outcomes": {k: c["outcome"] for k, c in comps.items()}, "comparisons": comps,
           "best_baseline": None, "ratio": None, "beats_best_baseline": None, "beats_initial": None,
           "audit_labels": evaluation["audit_labels"], "model": evaluation.get("model"),
           "warnings": list(warnings)}
    if evaluation.get("krr_pipeline") is not None:  # a gp job: lwl's KRR pipeline on the same budget, stated
        out["krr_pipeline"] = evaluation["krr_pipeline"]
    for name, why in evaluation.get("failed", {}).items():
        out["warnings"].append(f"baseline {name} ({words(name, family)}) could not be evaluated: {why}")
    if baselines:
        best = min(baselines, key=baselines.get)
        out.update(best_baseline=best, best_baseline_err=baselines[best],
                   ratio=design / baselines[best] if baselines[best] > 0 else None,
                   beats_best_baseline=comps[best]["outcome"] == "better")
    for name, c in comps.items():
        if c["outcome"] == "worse":
            what = words(name, family)
            out["warnings"].append(f"at equal labels ({evaluation['labels']}) {what} trains a better model on "
                                   f"held-out data (Err {c['other_err']:.4g}) than the job's training set "
                                   f"(Err {design:.4g}), beyond noise")
    return out


def evaluate(stepper, state, spec, oracle, out: dict, run: Callable[..., dict]) -> dict:
    """The ``budgeted_evaluate`` hook of the bilevel algorithm (:func:`lwl.runner.run_job`): the
    stepper is a ``lwl.design.budgeted_bilevel.BudgetedBilevel`` and the state its ``BudgetedState``
    (named in words: the evaluation sits below the design); ``run`` runs a job spec
    (:func:`lwl.runner.run_job`, for lwl's KRR pipeline beside a gp job)."""
    X, y = stepper.training_set(state)
    baselines = [b for b in (spec.evaluation.baselines or EQUAL_LABEL_BASELINES)]
    # the comparators get every label the job holds, those the left-out check kept out of its model too
    evaluation = equal_labels(spec, stepper.q, X, y, oracle, baselines=baselines, labels=len(state.points.y))
    if spec.model.name == "gp":
        evaluation["krr_pipeline"] = krr_pipeline(spec, stepper.q, oracle, evaluation["err"]["optimized"], run)
        evaluation["audit_labels"] += evaluation["krr_pipeline"]["labels_used"] + len(np.concatenate(stepper.q.heldout))
    # the validation verdict's caveats give way to the verdict on held-out data
    own = (out.get("validation_verdict") or {}).get("warnings", [])
    v = verdict(evaluation, [w for w in out.get("warnings", []) if w not in own], spec.family.name)
    return {"evaluation": evaluation, "verdict": v, "warnings": v["warnings"]}
