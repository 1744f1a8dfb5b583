"""Coverage of the equal-labels verdict's interval (lwl.evaluation.comparison), measured on the gp
budget study's own problems (issue #46).

The budget study compares one fixed training set (the job's) with ``R`` = 5 training draws of Q's
mixture on ~4,500 held-out points per Q member. Whether its 95% interval covers is a property of
the population the rows come from: squared errors of a fitted GP are heavy-tailed across training
draws (one draw with a poorly fitted lengthscale can carry most of the mean). This script

1. ``collect``: for each named problem of ``lwl experiment budget --preset full-2000 --model gp``,
   runs the budgeted gp job (seed 0, the study's training set), draws ``--draws`` training sets of
   n labels from Q's mixture, fits the GP to each, and stores the squared errors of every model on
   a large held-out population (``--size`` points per member, a seed the study never uses);
2. ``analyse``: replicates the study's comparison ``--reps`` times (5 of the draws and, per member,
   the study's held-out count of the population's points, both without replacement) and reports,
   for each interval rule, how often the interval covers the population's Err ratio (the design's
   Err^2 over the mean Err^2 of all the draws, on all the points) and how often the verdict has the
   wrong sign (``better`` where the population says worse, or the reverse).

    OPENBLAS_NUM_THREADS=1 python scripts/comparison_coverage.py collect p00-sobol_g-d2-K9 --out /tmp/cov
    python scripts/comparison_coverage.py analyse /tmp/cov
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def collect(key: str, out: Path, draws: int, size: int, budget: int) -> None:
    from lwl.evaluation.baselines import mixture
    from lwl.experiments.budget import PRESETS, _with, paid_labels, problem_specs
    from lwl.measures import on_domain
    from lwl.models import train
    from lwl.oracles import as_numpy
    from lwl.q_samples import MetaTestSamples
    from lwl.runner import run_job
    from lwl.spec import parse_job_spec
    from lwl.streams import STREAM_AUDIT

    cfg = dict(PRESETS["full-2000"])
    spec = dict(problem_specs(cfg))[key]
    t0 = time.perf_counter()
    gp = {"name": "gp", "select": "loo"}
    res = run_job(_with(spec, 0, algorithm={"name": "bilevel"}, budget=budget, model=gp), evaluate=False)
    rspec = parse_job_spec(res["spec"])
    oracle = rspec.oracle.build()
    n = paid_labels(res)
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    study_q = MetaTestSamples.from_spec(rspec.test_distributions, 0)
    big = rspec.test_distributions.model_copy(deep=True)
    for member in big.members:
        member.size = size
    q = MetaTestSamples.from_spec(big, 12345)  # a seed the study never uses
    test_x = np.concatenate(q.heldout)
    test_y = as_numpy(oracle.label(test_x)).reshape(len(test_x), -1)

    def sq(model) -> np.ndarray:
        return ((np.asarray(model.predict(test_x)).reshape(test_y.shape) - test_y) ** 2).sum(1)

    design = sq(train(rspec.model, X, y, ridge=1e-3, seed=0))
    measure = on_domain(mixture(study_q), rspec, study_q)
    rows = []
    for r in range(draws):
        x = measure.sample(n, [0, STREAM_AUDIT, 500 + r])  # draw streams the study's 5 never use
        rows.append(sq(train(rspec.model, x, as_numpy(oracle.label(x)), ridge=1e-3, seed=0)))
        print(f"{key}: draw {r + 1}/{draws} ({time.perf_counter() - t0:.0f} s)", flush=True)
    np.savez_compressed(out / f"{key}.npz", design=design, mixture=np.stack(rows), y2=(test_y**2).sum(1),
                        sizes=np.array([len(h) for h in q.heldout]), weights=np.asarray(q.weights, float),
                        study_sizes=np.array([len(h) for h in study_q.heldout]), labels=n)
    print(f"{key}: done in {time.perf_counter() - t0:.0f} s", flush=True)


def analyse(folder: Path, reps: int, R: int, seed: int) -> dict:
    from lwl.evaluation.comparison import compare

    rules = {s: (lambda *a, s=s: compare(*a, scale=s)) for s in ("linear", "log")}
    out = {}
    for f in sorted(folder.glob("*.npz")):
        d = np.load(f)
        design, mix, y2 = d["design"], d["mixture"], d["y2"]
        sizes, w, study = d["sizes"], d["weights"], d["study_sizes"]
        bounds = np.cumsum([0, *sizes])
        wn = w / w.sum()

        def num(e, bounds=bounds, wn=wn):  # the weighted mean over Q's members (last axis: points)
            return sum(wk * e[..., bounds[k]:bounds[k + 1]].mean(-1) for k, wk in enumerate(wn))

        num_mix = num(mix)  # each draw's population mean squared error
        truth = float(np.sqrt(num(design) / num_mix.mean()))  # Err_design / Err_mixture, population
        draw_err = np.sqrt(num_mix / num(y2))
        rng = np.random.default_rng(seed)
        out[f.stem] = {"truth_ratio": truth, "design_err": float(np.sqrt(num(design) / num(y2))),
                       "mixture_err_draws": [float(v) for v in np.quantile(draw_err, [0, 0.25, 0.5, 0.75, 1])],
                       "draws": len(mix), "reps": reps, "rules": {}, "mixture_draw_as_design": {}}
        tally = {r: {"cover": 0, "wrong_sign": 0, "better": 0, "worse": 0, "tie": 0} for r in rules}
        aa = {r: {"cover": 0, "wrong_sign": 0, "better": 0, "worse": 0, "tie": 0} for r in rules}
        for _ in range(reps):
            rows = rng.choice(len(mix), R + 1, replace=False)
            idx = np.concatenate([bounds[k] + rng.choice(sizes[k], study[k], replace=False) for k in range(len(sizes))])
            b = mix[rows[:R]][:, idx]
            # the study's design, and (the same draws, a known-answer check near ratio 1) one more
            # mixture draw as a fixed design: its truth is its population Err^2 over the others' mean
            aa_truth = float(np.sqrt(num_mix[rows[R]] / np.delete(num_mix, rows[R]).mean()))
            for name, rule in rules.items():
                for fixed, t_ratio, t in ((design, truth, tally[name]), (mix[rows[R]], aa_truth, aa[name])):
                    c = rule(np.repeat(fixed[None, idx], R, 0), b, y2[idx], list(study), w)
                    lo, hi = c.ratio_interval
                    t["cover"] += lo <= t_ratio <= hi
                    v = c.outcome.value
                    t[v] += 1
                    t["wrong_sign"] += (v == "better" and t_ratio > 1) or (v == "worse" and t_ratio < 1)
        out[f.stem]["rules"] = {r: {k: v / reps for k, v in t.items()} for r, t in tally.items()}
        out[f.stem]["mixture_draw_as_design"] = {r: {k: v / reps for k, v in t.items()} for r, t in aa.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("problems", nargs="+")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--draws", type=int, default=30)
    c.add_argument("--size", type=int, default=20000)
    c.add_argument("--budget", type=int, default=2000)
    a = sub.add_parser("analyse")
    a.add_argument("folder", type=Path)
    a.add_argument("--reps", type=int, default=2000)
    a.add_argument("--draws-per-rep", type=int, default=5)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.cmd == "collect":
        args.out.mkdir(parents=True, exist_ok=True)
        for key in args.problems:
            collect(key, args.out, args.draws, args.size, args.budget)
    else:
        res = analyse(args.folder, args.reps, args.draws_per_rep, args.seed)
        print(json.dumps(res, indent=1))
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
