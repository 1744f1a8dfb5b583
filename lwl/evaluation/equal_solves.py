"""The verdict of a budgeted operator job at equal solves (issue #47): the held-out relative error
of the job's operator model (its DeepONet, trained as the job trains it) on the job's training set,
against the same model trained on the same number of solves drawn from Q's law and from the
initial distribution (AMA's nu_theta0, particle AMA's initial particles), each over ``draws`` training draws
(draw r of Q's law and of the initial law: its inputs and its network's initialisation, seed + r; the job's
training set's draw r: the same initialisation, draw 0 being the served model's, ``served_err``; a
``trainers`` comparator seeds its own draws); better / tie / worse beyond
noise (:func:`lwl.evaluation.comparison.compare`, the interval over training draws and held-out
points).

Err^2 = sum_k w_k mean_{i in k} ||G_hat(u_i) - G*(u_i)||^2 / sum_k w_k mean_{i in k} ||G*(u_i)||^2,
the L2 norms with the oracle's output quadrature weights: the relative OOD error of SM eqn
app_ntd_rel_ood_error, squared in the paper's weighting of Q's members, on Q's held-out samples.

Where a point costs several solves (an EIT point: a conductivity with its L boundary-data pairs,
``plan.solves_per_label``) the comparators get as many points, and the error of a point is the
design's own (:meth:`~lwl.design.budget.design.BudgetedDesign.fold_sq_errors`: AMINO's relative
L^1 error of the conductivity, squared; its norm 1).

**What counts.** The audit's solves (held-out labels, the baselines' training sets) are not part of
the job's ``labels_used``; they are reported as ``audit_labels``. The stepper is read, not
imported (the evaluation sits below the designs): ``q``, ``q_law()``, ``initial_law()``,
``heldout_points()``, ``label_points(oracle, x)``, ``train_draw(x, y, r)``,
``fold_sq_errors(model, x, y)``, ``sq_norms(y)``, ``plan``, ``spec``, ``training_set(state)``,
``served_model(state)``.
"""

from __future__ import annotations

import numpy as np

from lwl.evaluation.comparison import compare, error_interval
from lwl.evaluation.equal_labels import verdict
from lwl.streams import STREAM_AUDIT

DRAWS = 3  # training draws per baseline (each a DeepONet trained from scratch)


def equal_solves(stepper, X: np.ndarray, Y: np.ndarray, oracle, *, draws: int = DRAWS,
                 trainers: dict | None = None, labels: int | None = None, served=None) -> dict:
    """The evaluation document of a budgeted operator job's training set (X, Y) (module docstring):
    ``{"labels", "err", "err_interval", "comparisons", "draws", "held_out", "audit_labels", ...}``.

    ``trainers`` adds comparators that choose their own n solves (pool-based active learning,
    :mod:`lwl.design.active`, which a study passes in: the evaluation does not import designs):
    ``{name: (n, draw) -> (model, solves)}``, a model trained on n solves it asked ``oracle`` for
    and the number of solves it spent (counted in ``audit_labels``).

    ``labels``: the solves the job holds (None: len(Y)); a job whose left-out check kept paid solves
    out of (X, Y) passes every one it holds, so the comparators get as many (equal *paid* solves).

    ``served``: the served model (draw 0 of the training set, ``train_draw(X, Y, 0)``) where the
    caller holds it, judged as it is rather than trained again."""
    q, seed = stepper.q, stepper.spec.seed
    per = stepper.plan.solves_per_label
    heldout = stepper.heldout_points()
    test_x = np.concatenate(heldout)
    test_y = stepper.label_points(oracle, test_x)
    sizes, y2 = [len(h) for h in heldout], stepper.sq_norms(test_y)
    n = len(Y) if labels is None else int(labels)
    if n < len(Y):
        raise ValueError(f"labels: {n} solves held, fewer than the {len(Y)} rows of the training set")
    audit = len(test_x) * per

    def held_out_sq(model) -> np.ndarray:
        return stepper.fold_sq_errors(model, test_x, test_y)

    def sq_errors(x: np.ndarray, y: np.ndarray, r: int) -> np.ndarray:
        """Squared held-out errors of the model of training draw r (initialised from seed + r)."""
        return held_out_sq(stepper.train_draw(x, y, r))

    # the job's training set over as many network initialisations as the comparators' draws: on
    # one fixed set the initialisation alone moved Err by 15% (Burgers at 250 solves: 0.293-0.339),
    # so one network would judge the set by the luck of its start; draw 0 is the served model's
    design = np.stack([held_out_sq(served) if r == 0 and served is not None else sq_errors(X, Y, r)
                       for r in range(draws)])
    baselines = {"mixture": stepper.q_law(), "initial": stepper.initial_law()}
    rows = {}
    for name, measure in baselines.items():
        out = []
        for r in range(draws):  # draw r of every baseline: its inputs and its network's start (common random numbers)
            x = measure.sample(n, [seed, STREAM_AUDIT, r])
            out.append(sq_errors(x, stepper.label_points(oracle, x), r))
            audit += n * per
        rows[name] = np.stack(out)
    for name, train in (trainers or {}).items():
        out = []
        for r in range(draws):
            model, solves = train(n, r)
            out.append(held_out_sq(model))
            audit += int(solves)
        rows[name] = np.stack(out)
    comparisons = {name: compare(design, sq, y2, sizes, q.weights) for name, sq in rows.items()}
    a = q.point_weights(heldout, q.weights)
    err = {"optimized": float(np.sqrt(a @ design.mean(0) / (a @ y2)))}
    err.update({name: c.other_err for name, c in comparisons.items()})
    return {"kind": "equal_solves", "labels": n * per, "train_size": int(len(Y)), "model": stepper.spec.model.name, "err": err,
            "err_interval": {"level": 0.95, "optimized": list(error_interval(design, y2, sizes, q.weights))},
            "comparisons": {name: c.to_json() for name, c in comparisons.items()},
            "served_err": float(np.sqrt(a @ design[0] / (a @ y2))),  # the served DeepONet's (draw 0)
            "draws": {"optimized": int(len(design)), **{name: int(len(sq)) for name, sq in rows.items()}},
            "held_out": int(len(test_x)),
            "audit_labels": int(audit), "failed": {}}


def evaluate(stepper, state, spec, oracle, out: dict, run=None) -> dict:
    """The ``budgeted_evaluate`` hook of the ama algorithm (:func:`lwl.runner.run_job`)."""
    X, Y = stepper.training_set(state)
    # the comparators get every solve the job holds, those the left-out check kept out of its model too
    evaluation = equal_solves(stepper, X, Y, oracle, labels=len(state.points.y), served=stepper.served_model(state))
    own = (out.get("validation_verdict") or {}).get("warnings", [])
    v = verdict(evaluation, [w for w in out.get("warnings", []) if w not in own], spec.family.name)
    return {"evaluation": evaluation, "verdict": v, "warnings": v["warnings"]}
