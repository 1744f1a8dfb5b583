"""Designs for a label budget, counted (issue #30; docs/method/budgets.md "Designs for a label budget").

Problems: the six Table 1 columns (:mod:`lwl.experiments.table1`, seed 0's Q) and the first
``robustness`` problems of :mod:`lwl.experiments.robustness` (Table-1-like problems over the four
test functions, d, K, output scale and start), each with the lengthscale given as Table 1 gives
it. For every problem, budget B and seed:

- **budgeted**: the job with ``budget: B`` on lwl's defaults (:mod:`lwl.design.budgeted_bilevel`), its
  training set of n <= B labels (every label counted);
- **Q's mixture** and the **NIPV anchor** (:mod:`lwl.evaluation.equal_labels`) at the same n labels,
  against which the training set is compared (better / tie / worse, :mod:`lwl.evaluation.comparison`; the
  mixture over ``draws`` training draws, the anchor one selection; the anchor only up to
  ANCHOR_MAX labels, or the preset's ``anchor_max``: its cost grows as n^2 times its pool);
- **unbudgeted**: the paper's design (``bilevel`` without budget, ``unbudgeted_iterations``)
  counted with all its labels: its Err when trained on B samples of its distribution stands at
  total labels = its design labels + B (the paper's cost-corrected Err-vs-N).

Held-out Err on Q's held-out samples of the job's seed, KRR with the spec's kernel,
lengthscale and ridge 1e-3. Wall time of each design and of the audit.

``model="gp"`` (``lwl experiment budget --model gp``, issue #46): the budgeted job designs for the
fitted GP (``model: gp``) and Q's mixture and the NIPV anchor are trained with the GP too (its
hyperparameters fitted to each training set's labels); beside them, **lwl's KRR pipeline** (the
study's own budgeted job with its KRR, as in the committed ``krr`` studies) is run and its
training set scored with its KRR and with the fitted GP. The unbudgeted design (a KRR comparison)
is not run. Its held-out population is GP_HELDOUT_PER_MEMBER points per member of Q, drawn from the
same stream as the job's Q (the job's validation points and the ``size - validation`` held-out points
above are its first rows): the fitted GP's squared errors on Sobol G at d >= 7 are heavy-tailed, and
at 4,500 points per member the verdict came out `worse` where 20,000 put the design level or ahead
(docs/method/evaluation.md, "Comparisons: the verdict's interval is on the log of the Err ratio").
"""

from __future__ import annotations

import time

import numpy as np

from lwl.experiments.report import machine_words

BASELINE_DRAWS = 5
MODELS = ("krr", "gp")  # the model the budgeted jobs design for (and are judged with)
# the gp study's held-out points per member of Q (the coverage study's population size): the
# verdict's variance falls as 1/points, and a fitted GP's errors on heavy-tailed labels need them
GP_HELDOUT_PER_MEMBER = 20_000

PRESETS = {
    # CI-sized: Q with 1,500 samples per member (300 validation), the unbudgeted design at 150 iterations
    "quick": dict(budgets=(500, 2000), seeds=(0,), columns=6, robustness=16, size=1500, validation=300,
                  unbudgeted_iterations=150, draws=BASELINE_DRAWS),
    # the quick problems at budget 8,000 (the NIPV anchor does not run at this size)
    "quick-8000": dict(budgets=(8000,), seeds=(0,), columns=6, robustness=16, size=1500, validation=300,
                       unbudgeted_iterations=150, draws=BASELINE_DRAWS),
    # the issue's: budgets 500, 2,000 and 8,000, two seeds (the design's own randomness), Q with
    # 5,000 samples per member (500 validation); the unbudgeted design at 150 iterations, as in
    # quick (at lwl's default iterations it alone takes hours on two cores)
    "full": dict(budgets=(500, 2000, 8000), seeds=(0, 1), columns=6, robustness=16, size=5000,
                 validation=500, unbudgeted_iterations=150, draws=BASELINE_DRAWS, gp_budgets=(2000, 8000)),
    # the full study's budget 8,000 at seed 0 with the NIPV anchor (its greedy selection of 8,000 from a
    # pool of 16,000 takes ~8-15 min per problem in one single-threaded process; grow it with --resume):
    # the same training sets as ``full``'s (each job is deterministic)
    "full-anchor-8000": dict(budgets=(8000,), seeds=(0,), columns=6, robustness=16, size=5000, validation=500,
                             unbudgeted_iterations=150, draws=BASELINE_DRAWS, anchor_max=8000),
    # the gp study's budget 2,000 at seed 0 alone (``--model gp``): the half of ``full`` a session can
    # rerun beside CI (about an hour with two workers on two cores)
    "full-2000": dict(budgets=(2000,), seeds=(0,), columns=6, robustness=16, size=5000, validation=500,
                      unbudgeted_iterations=150, draws=BASELINE_DRAWS),
    # full-2000 over five seeds (the design's own randomness: its training draw, Q's samples and the held-out
    # points of each seed), for chosen problems (``--columns``): a row's verdict covers the baselines' draws and
    # the held-out points, not the design's draw; the per-problem verdict over seeds (``over_seeds``) does.
    # The NIPV anchor is off (anchor_max 0: its greedy selection costs more than the rest of a row)
    "full-2000-seeds": dict(budgets=(2000,), seeds=(0, 1, 2, 3, 4), columns=6, robustness=16, size=5000,
                            validation=500, unbudgeted_iterations=150, draws=BASELINE_DRAWS, anchor_max=0),
    # the gp study's budget 8,000 at seed 0 alone (``--model gp``), its other half (about an hour and a
    # half with two workers on two cores; the NIPV anchor does not run at this size, ANCHOR_MAX)
    "full-8000": dict(budgets=(8000,), seeds=(0,), columns=6, robustness=16, size=5000, validation=500,
                      unbudgeted_iterations=150, draws=BASELINE_DRAWS),
    # for the test suite
    "smoke": dict(budgets=(120,), seeds=(0,), columns=1, robustness=1, size=300, validation=60,
                  unbudgeted_iterations=3, draws=2, gp_heldout_per_member=1000),
}


def problem_specs(cfg: dict) -> list[tuple[str, dict]]:
    """(key, spec) of every problem: Table 1's columns, then the robustness problems."""
    from lwl.experiments import robustness, table1

    out = []
    for col in table1.COLUMNS[:cfg["columns"]]:
        spec = table1.column_spec(col, seed=0, size=cfg["size"], validation=cfg["validation"],
                                  baselines=("normal", "mixture"))
        out.append((f"table1-{col.key}", spec))
    for p in robustness.problems(max(cfg["robustness"], 1))[:cfg["robustness"]]:
        spec = robustness.problem_spec(p, size=cfg["size"], validation=cfg["validation"], iterations=None,
                                       lengthscale_factor=0.5)
        out.append((p.key, spec))
    return out


def _with(spec: dict, seed: int, **changes) -> dict:
    import copy

    s = copy.deepcopy(spec)
    s["seed"] = seed
    s.pop("evaluation", None)
    s["evaluation"] = {"enabled": False, "ridge": 1e-3, "baselines": []}
    s.update(changes)
    return s


def paid_labels(res: dict) -> int:
    """The labels a budgeted job's result holds: its served training set and the points left out of
    it (still paid; the comparators at equal labels get as many)."""
    return len(res["training_set"]["labels"]) + len((res.get("left_out") or {}).get("labels") or [])


def run_problem(key: str, spec: dict, cfg: dict, seed: int, progress=None) -> dict:
    """Every budget of one problem and seed, and the unbudgeted design (module docstring)."""
    from lwl.evaluation.equal_labels import equal_labels
    from lwl.evaluation.metrics import krr_error
    from lwl.measures import from_spec
    from lwl.oracles import as_numpy
    from lwl.q_samples import MetaTestSamples
    from lwl.runner import run_job
    from lwl.spec import parse_job_spec
    from lwl.streams import STREAM_AUDIT

    if cfg.get("model", "krr") == "gp":
        return run_problem_gp(key, spec, cfg, seed, progress)
    row: dict = {"problem": key, "seed": seed, "budgets": {}, "computed_on": machine_words()}
    algo = {"name": "bilevel"}
    if cfg["unbudgeted_iterations"] is not None:
        algo["iterations"] = cfg["unbudgeted_iterations"]
    t0 = time.perf_counter()
    unb = run_job(_with(spec, seed, algorithm=algo), evaluate=False)
    row["unbudgeted"] = {"design_labels": int(unb["labels_used"]), "seconds": time.perf_counter() - t0,
                         "iterations": len(unb["history"]), "err": {}}
    resolved = parse_job_spec(unb["spec"])
    oracle = resolved.oracle.build()
    q = MetaTestSamples.from_spec(resolved.test_distributions, seed)
    test_x = np.concatenate(q.heldout)
    test_y = as_numpy(oracle.label(test_x))
    a = q.point_weights(q.heldout, q.weights)
    unb_measure = from_spec(unb["distribution"])
    for B in cfg["budgets"]:
        x = unb_measure.sample(B, [seed, STREAM_AUDIT, 0])
        row["unbudgeted"]["err"][str(B)] = krr_error(
            x, as_numpy(oracle.label(x)), test_x, test_y, a, kernel=resolved.model.kernel,
            lengthscale=resolved.model.lengthscale, ridge=1e-3)
    for B in cfg["budgets"]:
        t0 = time.perf_counter()
        res = run_job(_with(spec, seed, algorithm={"name": "bilevel"}, budget=B), evaluate=False)
        design_seconds = time.perf_counter() - t0
        rspec = parse_job_spec(res["spec"])
        X = np.asarray(res["training_set"]["inputs"])
        y = np.asarray(res["training_set"]["labels"])
        t1 = time.perf_counter()
        paid = paid_labels(res)
        anchor = paid <= cfg["anchor_max"] if "anchor_max" in cfg else None  # None: equal_labels' own limit
        ev = equal_labels(rspec, q, X, y, oracle, draws=cfg["draws"], baselines=["mixture"], anchor=anchor,
                          labels=paid)
        comps = ev["comparisons"]
        row["budgets"][str(B)] = {
            "labels_used": int(res["labels_used"]), "budget": B, "rounds": int(res["rounds"]),
            "within_budget": bool(res["labels_used"] <= B), "selected": res["selected"]["candidate"],
            "err": ev["err"]["optimized"], "err_interval": ev["err_interval"]["optimized"],
            "mixture": comps["mixture"], "nipv": comps.get("nipv"),
            "race": race_summary(res["history"]),
            "design_seconds": design_seconds, "audit_seconds": time.perf_counter() - t1}
        if progress:
            progress(f"{key} seed {seed} B={B}: {ev['err']['optimized']:.4g} vs mixture "
                     f"{comps['mixture']['other_err']:.4g} ({comps['mixture']['outcome']})")
    return row


def run_problem_gp(key: str, spec: dict, cfg: dict, seed: int, progress=None) -> dict:
    """Every budget of one problem and seed with the fitted GP (module docstring)."""
    from lwl.evaluation.equal_labels import equal_labels
    from lwl.evaluation.metrics import krr_error, relative_ood_error
    from lwl.models import train
    from lwl.oracles import as_numpy
    from lwl.q_samples import MetaTestSamples
    from lwl.runner import run_job
    from lwl.spec import parse_job_spec

    row: dict = {"problem": key, "seed": seed, "model": "gp", "budgets": {}, "unbudgeted": None,
                 "computed_on": machine_words()}
    algo = {"name": "bilevel"}
    q = oracle = test_x = test_y = a = None
    for B in cfg["budgets"]:
        t0 = time.perf_counter()
        gp_block = {"name": "gp", "select": cfg.get("gp_select", "evidence"),  # results made before gp_select: evidence
                    "fit_draws": cfg.get("gp_fit_draws", 1)}
        res = run_job(_with(spec, seed, algorithm=algo, budget=B, model=gp_block), evaluate=False)
        design_seconds = time.perf_counter() - t0
        rspec = parse_job_spec(res["spec"])
        if q is None:
            oracle = rspec.oracle.build()
            q = MetaTestSamples.from_spec(heldout_population(rspec.test_distributions, cfg), seed)
            test_x = np.concatenate(q.heldout)
            test_y = as_numpy(oracle.label(test_x))
            a = q.point_weights(q.heldout, q.weights)
        X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
        t1 = time.perf_counter()
        paid = paid_labels(res)
        anchor = paid <= cfg["anchor_max"] if "anchor_max" in cfg else None
        ev = equal_labels(rspec, q, X, y, oracle, draws=cfg["draws"], baselines=["mixture"], anchor=anchor,
                          labels=paid)
        audit_seconds = time.perf_counter() - t1
        # lwl's KRR pipeline: the study's own budgeted job (its KRR as the committed studies give it)
        krr = run_job(_with(spec, seed, algorithm=algo, budget=B), evaluate=False)
        kspec = parse_job_spec(krr["spec"])
        Xk, yk = np.asarray(krr["training_set"]["inputs"]), np.asarray(krr["training_set"]["labels"])
        err_krr = krr_error(Xk, yk, test_x, test_y, a, kernel=kspec.model.kernel,
                            lengthscale=kspec.model.lengthscale, ridge=1e-3)
        gp = train(rspec.model, Xk, yk, ridge=1e-3, seed=seed)
        err_krr_data_gp = relative_ood_error(gp.predict(test_x), test_y, a)
        comps = ev["comparisons"]
        v = res["verdict"] or {}  # no held-out label in the job (evaluate=False): the validation verdict
        row["budgets"][str(B)] = {
            "labels_used": int(res["labels_used"]), "budget": B, "rounds": int(res["rounds"]),
            "within_budget": bool(res["labels_used"] <= B), "selected": res["selected"]["candidate"],
            "err": ev["err"]["optimized"], "err_interval": ev["err_interval"]["optimized"],
            "mixture": comps["mixture"], "nipv": comps.get("nipv"),
            "validation_verdict": {k: v.get(k) for k in ("outcome", "ratio", "z", "points_each", "err",
                                                          "best_baseline_err", "returned_initial", "trend", "warnings")}
                                  | {"design_points": paid - int(res["plan"]["validation_labels"])},
            # the served model's training set: every paid label, or without the dropped candidates' points
            "left_out": (res.get("left_out") or {}).get("check"),
            "krr_pipeline": {"err": float(err_krr), "err_with_gp": float(err_krr_data_gp),
                             "labels_used": int(krr["labels_used"]), "selected": krr["selected"]["candidate"],
                             "race": race_summary(krr["history"])},
            "race": race_summary(res["history"]),
            "design_seconds": design_seconds, "audit_seconds": audit_seconds}
        if progress:
            progress(f"{key} seed {seed} B={B}: gp design {ev['err']['optimized']:.4g} vs mixture+gp "
                     f"{comps['mixture']['other_err']:.4g} ({comps['mixture']['outcome']}), krr pipeline {err_krr:.4g}")
    return row


def race_summary(history: list[dict]) -> dict | None:
    """A job's race against Q's mixture (BudgetedDesign._race) as a row records it: its looks, the
    most points each it compared, its last trend ratio and, where Q's mixture took over, whom it
    overtook and by which rule (z or trend); None where no race ran. Rows made before it have none."""
    looks = [h["race"] for h in history if h.get("race")]
    if not looks:
        return None
    won = next((r for r in looks if r.get("outcome") == "rival won"), None)
    return {"looks": len(looks), "max_points_each": max(int(r["points_each"]) for r in looks),
            "last_z": looks[-1].get("z"), "last_trend_ratio": looks[-1].get("trend_ratio"),
            "overtook": won and won.get("overtook"), "by": won and won.get("by")}


def heldout_population(tests, cfg: dict):
    """Q's spec (``TestDistributionsSpec``) with ``cfg["heldout_per_member"]`` held-out points per
    member after its validation points (unchanged without the setting). Members are drawn from one
    stream per member, so the validation points (what the job saw) and the first held-out points
    are those of ``tests`` itself."""
    per = cfg.get("heldout_per_member")
    if per is None:
        return tests
    big = tests.model_copy(deep=True)
    for k, member in enumerate(big.members):
        if getattr(member, "dataset", None) is not None:
            raise ValueError(f"test_distributions.members.{k}: a dataset member has no more points to draw")
        member.size = tests.validation_per_member + int(per)
    return big


def _settings(cfg: dict) -> dict:
    """A preset as results.json stores it (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}


def decided_otherwise(row: dict) -> bool:
    """Whether a row's left-out checks would decide otherwise under the check's rule now (z above
    ``leave_out_z``, and, where ``leave_out_rank_p`` is set, the rank rule, as the study's design,
    ``BudgetedBilevel``, has them): each check
    records its z, its rank p (rows made before 15eef4d have none) and its decision, so the decision
    is recomputed from them. A row made under the rank rule that left points out by ranks alone is
    stale with the rule off (its default since it was measured), and with the rule on, a check
    without rank_p whose z is in (0, leave_out_z] cannot be recomputed and is stale too. Every
    other row is what the current design gives."""
    from lwl.design.budgeted_bilevel import BudgetedBilevel  # the design the study's jobs run

    rule, bar = BudgetedBilevel.leave_out_rank_p, BudgetedBilevel.leave_out_z
    for cell in row["budgets"].values():
        check = cell.get("left_out")
        if not check:
            continue
        z, p = check.get("z"), check.get("rank_p")
        decision = z is not None and z > bar
        if rule is not None and z is not None and 0 < z <= bar:
            if "rank_p" not in check:
                return True
            decision = p is not None and p < rule
        if decision != bool(check.get("left_out")):
            return True
    return False


def reusable_rows(previous: dict | None, cfg: dict) -> dict[tuple[str, int], dict]:
    """Rows of an earlier results.json (``previous``) keyed by (problem, seed), if it was made
    with the same settings (else none: a row depends on every setting), less the rows whose left-out
    check the current rule would decide otherwise (:func:`decided_otherwise`: those run again)."""
    if not _same_settings(previous, cfg):
        return {}
    return {(r["problem"], int(r["seed"])): r for r in previous.get("rows", []) if not decided_otherwise(r)}


def _same_settings(previous: dict | None, cfg: dict) -> bool:
    """Whether ``previous`` is a budget study made with the settings ``cfg``."""
    return bool(previous) and previous.get("experiment") == "budget" and previous.get("settings") == _settings(cfg)


def _doc(preset: str, cfg: dict, rows: list[dict], seconds: float, workers: int, reused: int,
         problems: list[str] | None = None, rerun: list[str] | None = None) -> dict:
    doc = {"experiment": "budget", "preset": preset, "settings": _settings(cfg), "rows": rows,
           "summary": summary(rows, cfg["budgets"]), "wall_seconds": seconds, "workers": workers,
           "reused_rows": reused}
    if problems:  # a study of chosen problems (--columns), not the whole preset
        doc["problems"] = list(problems)
    if rerun:  # these problems run again, the other rows kept from the earlier study (--rerun)
        doc["rerun"] = list(rerun)
    return doc


def run(preset: str = "quick", *, progress=None, problems: list[str] | None = None, workers: int = 1,
        previous: dict | None = None, checkpoint=None, model: str = "krr", gp_fit_draws: int = 1,
        rerun: list[str] | None = None) -> dict:
    """Every problem and seed of the preset; ``workers`` > 1 runs (problem, seed) pairs in that
    many processes (each job is deterministic from its spec and seed, so the rows are the same).
    Rows of ``previous`` (an earlier results.json, same settings) are reused, and
    ``checkpoint(doc)`` is called with the rows so far after each new row, so an interrupted study
    resumes where it stopped (``lwl experiment budget --resume``). ``rerun``: these problems' rows
    of ``previous`` are run again, the others kept (``--rerun``: the rows a change can affect; the
    doc names them). Rows come out in problem order."""
    cfg = dict(PRESETS[preset])
    if model != "krr":  # a setting of its own: rows of the krr study are never reused for it
        cfg["model"] = model
        cfg["budgets"] = cfg.get(f"{model}_budgets", cfg["budgets"])  # issue #46: the gp study at 2,000 and 8,000
        if model == "gp":  # the fit's choice among local optima (GPSpec.select); a setting: rows made with
            cfg["gp_select"] = "loo"  # the other are not reused
            # the likelihood's fitting subset (GPSpec.max_fit_points; rows before it: 300 at every d)
            from lwl.models.gp import FINAL_FIT_POINTS, FIT_POINTS_RULE

            cfg["gp_fit_points"] = FIT_POINTS_RULE
            cfg["gp_final_fit_points"] = FINAL_FIT_POINTS  # the served fit's refinement (rows before it: none)
            if gp_fit_draws > 1:  # every GP fitted from several seeds (GPSpec.fit_draws; absent: one)
                cfg["gp_fit_draws"] = int(gp_fit_draws)
            # rows before it: size - validation (4,500); the smoke preset keeps its own small count
            cfg["heldout_per_member"] = cfg.pop("gp_heldout_per_member", GP_HELDOUT_PER_MEMBER)
    if problems:  # whole keys or their pNN prefixes; a name that matches none is refused, naming it
        from lwl.experiments.robustness import pick_keys

        problems = pick_keys([key for key, _ in problem_specs(cfg)], problems)
    reuse = reusable_rows(previous, cfg)
    if rerun is not None:
        if not rerun:
            raise ValueError("--rerun: name at least one problem")
        keys = {key for key, _ in problem_specs(cfg)}
        unknown = sorted(set(rerun) - keys)
        if unknown:
            raise ValueError(f"--rerun: no problem {', '.join(unknown)} in the {preset} preset")
        if not reuse:
            raise ValueError("--rerun: the earlier study has no rows made with these settings to keep")
        if problems is None and previous.get("problems"):  # a --columns study stays one: no other problem runs
            problems = list(previous["problems"])
        unknown = sorted(set(rerun) - set(problems or keys))
        if unknown:
            raise ValueError(f"--rerun: {', '.join(unknown)} not among the earlier study's problems")
        reuse = {k: r for k, r in reuse.items() if k[0] not in rerun}
        # every problem rerun so far, so that results.md names them after a second --rerun
        rerun = list(dict.fromkeys([*(previous.get("rerun") or []), *rerun]))
    elif previous and reuse:  # --resume keeps an earlier rerun's record with its rows
        rerun = previous.get("rerun")
    stale = [r["problem"] for r in previous.get("rows", []) if decided_otherwise(r)
             and (not problems or r["problem"] in problems)] if _same_settings(previous, cfg) else []
    if stale:  # rows the check's current rule decides otherwise run again (reusable_rows left them out), and the doc says so
        rerun = list(dict.fromkeys([*(rerun or []), *stale]))
    t_all = time.perf_counter() - (previous.get("wall_seconds", 0.0) if reuse else 0.0)  # reused rows' time counts
    todo = [(key, spec, cfg, seed) for key, spec in problem_specs(cfg) if not problems or key in problems
            for seed in cfg["seeds"]]
    order = {(key, seed): i for i, (key, _, _, seed) in enumerate(todo)}
    done = {k: r for k, r in reuse.items() if k in order}
    # every problem at the first seed before any at the next: an interrupted study has whole seeds
    fresh = sorted((task for task in todo if (task[0], task[3]) not in done), key=lambda t: cfg["seeds"].index(t[3]))

    def rows() -> list[dict]:
        return sorted(done.values(), key=lambda r: order[(r["problem"], int(r["seed"]))])

    def finished(row: dict) -> None:
        done[(row["problem"], int(row["seed"]))] = row
        if checkpoint:
            checkpoint(_doc(preset, cfg, rows(), time.perf_counter() - t_all, workers, len(todo) - len(fresh),
                            problems, rerun))

    if progress:
        for row in done.values():
            for B in row["budgets"]:
                progress(f"{row['problem']} seed {row['seed']} B={B}: reused")
    if workers > 1:
        from lwl.experiments.report import in_processes

        for row in in_processes(run_problem, fresh, workers):
            finished(row)
            for B, c in row["budgets"].items():
                if progress:
                    progress(f"{row['problem']} seed {row['seed']} B={B}: {c['err']:.4g} vs mixture "
                             f"{c['mixture']['other_err']:.4g} ({c['mixture']['outcome']})")
    else:
        from lwl.experiments.report import single_threaded

        for task in fresh:
            with single_threaded():  # as in the worker processes: rows do not depend on --workers
                row = run_problem(*task, progress)
            finished(row)
    return _doc(preset, cfg, rows(), time.perf_counter() - t_all, workers, len(todo) - len(fresh), problems, rerun)


def summary(rows: list[dict], budgets) -> dict:
    """Per budget: outcomes against Q's mixture and the anchor, the budget held, the median Err
    ratios, and the unbudgeted design's labels."""
    out = {}
    for B in budgets:
        cells = [r["budgets"][str(B)] for r in rows]
        s = {"runs": len(cells), "within_budget": sum(c["within_budget"] for c in cells)}
        for other in ("mixture", "nipv"):
            comps = [c[other] for c in cells if c.get(other)]
            if not comps:
                continue
            n = len(comps)
            s[other] = {"compared": n, "better": sum(c["outcome"] == "better" for c in comps),
                        "tie": sum(c["outcome"] == "tie" for c in comps),
                        "worse": sum(c["outcome"] == "worse" for c in comps),
                        "lower_err": sum(c["err"] < c["other_err"] for c in comps),
                        "median_ratio": float(np.median([c["ratio"] for c in comps]))}
        seeds = over_seeds(rows, B)
        if seeds:
            s["over_seeds"] = seeds
        s["median_design_seconds"] = float(np.median([c["design_seconds"] for c in cells]))
        pipes = [(c["err"], c["krr_pipeline"]) for c in cells if c.get("krr_pipeline")]
        if pipes:  # the gp study: the design (and Q's mixture + GP) against lwl's KRR pipeline
            mix = [c["mixture"]["other_err"] for c in cells if c.get("krr_pipeline")]
            s["krr_pipeline"] = {
                "compared": len(pipes), "design_lower": sum(e < p["err"] for e, p in pipes),
                "median_ratio": float(np.median([e / p["err"] for e, p in pipes])),
                "mixture_gp_lower": sum(m < p["err"] for m, (_, p) in zip(mix, pipes)),
                "max_pipeline_over_mixture_gp": float(max(p["err"] / m for m, (_, p) in zip(mix, pipes))),
                "lowest": {name: sum(min(cands, key=cands.get) == name for cands in (
                    {"gp design": e, "mixture + gp": m, "krr pipeline": p["err"], "krr data + gp": p["err_with_gp"]}
                    for m, (e, p) in zip(mix, pipes))) for name in ("gp design", "mixture + gp", "krr pipeline",
                                                                     "krr data + gp")}}
        verdicts = [(c["validation_verdict"]["outcome"], c["mixture"]["outcome"]) for c in cells
                    if c.get("validation_verdict")]
        if verdicts:  # issue #46: the job's own verdict (no held-out label) against the held-out one
            s["validation_verdict"] = {
                "compared": len(verdicts), "agree": sum(v == h for v, h in verdicts),
                "better_where_heldout_worse": sum(v == "better" and h == "worse" for v, h in verdicts),
                "worse_where_heldout_better": sum(v == "worse" and h == "better" for v, h in verdicts),
                "pairs": {f"{v}/{h}": sum((a, b) == (v, h) for a, b in verdicts)
                          for v in ("better", "tie", "worse", None) for h in ("better", "tie", "worse")
                          if (v, h) in verdicts}}
        out[str(B)] = s
    unb = [r["unbudgeted"]["design_labels"] for r in rows if r.get("unbudgeted")]
    out["unbudgeted_median_design_labels"] = float(np.median(unb)) if unb else None
    return out


def over_seeds(rows: list[dict], B: int) -> dict | None:
    """Per problem run at two or more seeds: the design against Q's mixture over its seeds
    (:func:`lwl.evaluation.comparison.compare_over_seeds` of the rows' Err ratios), and the counts of
    better / tie / worse over those problems; None where no problem has two seeds (a problem with a
    seed whose ratio is undefined, an exact interpolant's, is left out). A row's own verdict holds
    the job's training set fixed; this one carries the design's draw too."""
    from lwl.evaluation.comparison import compare_over_seeds

    ratios: dict[str, list] = {}
    for r in rows:
        c = r["budgets"].get(str(B)) or {}
        ratios.setdefault(r["problem"], []).append((c.get("mixture") or {}).get("ratio"))
    problems = {p: compare_over_seeds(v).to_json() for p, v in ratios.items()
                if len(v) >= 2 and all(x is not None and x > 0 for x in v)}
    if not problems:
        return None
    return {"problems": problems, **{o: sum(v["outcome"] == o for v in problems.values())
                                     for o in ("better", "tie", "worse")}}


def heldout_words(settings: dict) -> str:
    """The held-out population the rows were judged on, as a sentence."""
    per = settings.get("heldout_per_member")
    if per is None:
        return (f"Held-out points: Q's {settings['size'] - settings['validation']:,} per member after the job's "
                "validation points. ")
    return (f"Held-out points: {per:,} per member of Q, from the job's own Q stream (its validation points "
            "and held-out points are the first rows). ")



def _counts(d: dict | None) -> str:
    """A comparison's summary cell: better / tie / worse (lower Err / compared), or that none ran."""
    return f"{d['better']} / {d['tie']} / {d['worse']} ({d['lower_err']}/{d['compared']})" if d else "not run"


def _nipv_cells(c: dict) -> str:
    """The NIPV anchor's two cells of a row (its Err, the outcome against it), dashes where none ran."""
    nipv = c.get("nipv")
    return f"{nipv['other_err']:.4g} | {nipv['outcome']} | " if nipv else "- | - | "


def _per_budget_tables(doc: dict, columns: str, align: str, row) -> list[str]:
    """One "## Budget B" table per budget: problem, seed and labels, then the study's own
    ``columns`` (with their ``align`` row), each cell from ``row(problem_row, cell, B)``."""
    lines = []
    for B in doc["settings"]["budgets"]:
        lines += [f"## Budget {B}", "", "| problem | seed | labels | " + columns, "|---|---:|---:" + align]
        for r in doc["rows"]:
            c = r["budgets"][str(B)]
            lines.append(f"| {r['problem']} | {r['seed']} | {c['labels_used']} | " + row(r, c, B))
        lines.append("")
    return lines

def markdown_gp(doc: dict) -> str:
    """The gp study's tables: the GP design, Q's mixture and the NIPV anchor with the fitted GP at
    equal labels, and lwl's KRR pipeline (its data with its KRR and with the GP)."""
    s, budgets = doc["summary"], doc["settings"]["budgets"]
    expected = len(doc["settings"]["seeds"]) * (doc["settings"]["columns"] + doc["settings"]["robustness"])
    lines = [f"# Designs for a label budget with the fitted GP ({doc['preset']}, {len(doc['rows'])} problems)", ""]
    if doc.get("problems"):
        expected = len(doc["settings"]["seeds"]) * len(doc["problems"])
        lines += [f"Problems chosen with `--columns`: {', '.join(doc['problems'])} (not the whole preset).", ""]
    if len(doc["rows"]) < expected:  # a study stopped early: its rows are the first ones of the preset
        lines += [f"**Partial: {len(doc['rows'])} of the preset's {expected} problem runs** (the study was stopped; "
                  "`--resume` continues it).", ""]
    lines += _rerun_lines(doc) + _machines_line(doc)
    chosen = ("the local optimum of the likelihood, and the kernel, of lowest leave-one-out error on the fitting "
              "points" if doc["settings"].get("gp_select") == "loo" else
              "the local optimum and the kernel of highest marginal likelihood (select evidence: made before the "
              "leave-one-out selection)")
    if doc["settings"].get("gp_fit_draws", 1) > 1:
        chosen += (f"; every GP fitted {doc['settings']['gp_fit_draws']} times from different seeds, the draw of "
                   "lowest leave-one-out error on a common subset of its labels kept")
    lines += ["Held-out Err of the fitted GP (ARD, squared exponential or Matern 5/2, hyperparameters by maximum "
             f"marginal likelihood on each training set, {chosen}) trained on the gp job's training set, against the same GP trained on the same number of "
             f"labels of Q's mixture (over {doc['settings']['draws']} draws) and of the NIPV anchor (the fitted "
             "GP's kernel); better / tie / worse beyond noise (95%). KRR pipeline: the krr job of the committed "
             "study (its training set with its KRR), and that training set with the fitted GP. "
             + heldout_words(doc["settings"]) + f"Wall time {doc['wall_seconds'] / 60:.1f} min.", "",
             "| budget | runs | vs mixture+GP: better / tie / worse (lower Err) | median ratio | vs NIPV+GP | "
             "median ratio | GP design lower than KRR pipeline | median ratio | mixture+GP lower than KRR pipeline "
             "(max KRR/mixture+GP) | lowest of the four |",
             "|---:|---:|---|---:|---|---:|---:|---:|---:|---|"]

    for B in budgets:
        c = s[str(B)]
        mix, nipv, pipe = c.get("mixture"), c.get("nipv"), c["krr_pipeline"]
        lowest = ", ".join(f"{k} {v}" for k, v in pipe["lowest"].items())
        lines.append(f"| {B} | {c['runs']} | {_counts(mix)} | {mix['median_ratio']:.3f} | {_counts(nipv)} | "
                     + (f"{nipv['median_ratio']:.3f}" if nipv else "") + f" | {pipe['design_lower']}/{pipe['compared']} | "
                     f"{pipe['median_ratio']:.3f} | {pipe['mixture_gp_lower']}/{pipe['compared']} "
                     f"({pipe['max_pipeline_over_mixture_gp']:.2f}x) | {lowest} |")
    lines.append("")
    def row(r, c, B):
        p, v = c["krr_pipeline"], c.get("validation_verdict") or {}
        z = f"{v['z']:.2f}" if v.get("z") is not None else "-"
        return (f"{c['selected']} | {c['err']:.4g} | {c['mixture']['other_err']:.4g} | {c['mixture']['outcome']} | "
                f"{v.get('outcome')} ({z}, {v.get('points_each') or '-'}) | {_nipv_cells(c)}"
                f"{p['err']:.4g} | {p['err_with_gp']:.4g} | {_left_out_cell(c.get('left_out'))} | "
                f"{c['design_seconds']:.0f} | {c['audit_seconds']:.0f} |")

    lines += _per_budget_tables(doc, "selected | GP design Err | mixture+GP Err | vs mixture | validation verdict "
                                "(z, points each) | NIPV+GP Err | vs NIPV | KRR pipeline Err | KRR data + GP Err | "
                                "left-out check (points, z, rank p) | design s | audit s |",
                                "|---|---:|---:|---|---|---:|---|---:|---:|---|---:|---:|", row)
    lines += _over_seeds_lines(doc)
    agreement = [(B, s[str(B)]["validation_verdict"]) for B in budgets if s[str(B)].get("validation_verdict")]
    if agreement:
        lines += ["## The job's own verdict against held-out data", "",
                  "The validation verdict is what a job without held-out labels (ask/tell) reports: the returned "
                  "distribution's points against Q's mixture's at equal numbers, on Q's labelled validation points. "
                  "Held-out: the verdict at equal labels above (vs mixture).", "",
                  "| budget | runs | agree | validation `better` where held-out `worse` | validation `worse` where "
                  "held-out `better` | validation / held-out pairs |", "|---:|---:|---:|---:|---:|---|"]
        for B, a in agreement:
            pairs = ", ".join(f"{k}: {n}" for k, n in a["pairs"].items())
            lines.append(f"| {B} | {a['compared']} | {a['agree']}/{a['compared']} ({a['agree'] / a['compared']:.0%}) | "
                         f"{a['better_where_heldout_worse']} | {a['worse_where_heldout_better']} | {pairs} |")
        lines.append("")
    return "\n".join(lines)


def _over_seeds_lines(doc: dict) -> list[str]:
    """results.md's table of the verdicts over seeds (:func:`over_seeds`), where a problem has two or more."""
    out = []
    for B in doc["settings"]["budgets"]:
        seeds = doc["summary"][str(B)].get("over_seeds")
        if not seeds:
            continue
        out += [f"## Over seeds, budget {B}", "",
                "The design against Q's mixture + GP over the seeds each problem ran at: the geometric mean of the "
                "rows' Err ratios with Student's t interval over the seeds (95%), which carries the design's own "
                "training draw (a row's verdict holds it fixed; lwl.evaluation.comparison.compare_over_seeds). "
                f"Better / tie / worse: **{seeds['better']} / {seeds['tie']} / {seeds['worse']}**.", "",
                "| problem | seeds | Err ratio per seed | ratio (geometric mean) | 95% interval | over seeds |",
                "|---|---:|---|---:|---|---|"]
        for p, v in seeds["problems"].items():
            lo, hi = v["ratio_interval"]
            out.append(f"| {p} | {len(v['ratios'])} | {', '.join(f'{x:.3f}' for x in v['ratios'])} | "
                       f"{v['ratio']:.3f} | [{lo:.3f}, {hi:.3f}] | {v['outcome']} |")
        out.append("")
    return out


def _rerun_lines(doc: dict) -> list[str]:
    """results.md's statement of a study with rerun problems (``--rerun``), if it is one."""
    if not doc.get("rerun"):
        return []
    return [(f"Run again over an earlier study (named with `--rerun`, or whose left-out check decided otherwise "
             f"than the check's current rule): {', '.join(doc['rerun'])}; the other rows are the earlier study's, made "
             "with the same settings. Wall time counts both."), ""]


def _machines_line(doc: dict) -> list[str]:
    """Where a resumed study's rows come from more than one machine (each row's ``computed_on``;
    rows made before it was recorded have none), which rows each: a row does not reproduce to the
    last digit on another CPU, and can choose otherwise (docs/results/budget-full-8000-gp-rank/README.md,
    "The rank rule switched off")."""
    on: dict[str, list[str]] = {}
    one_seed = len(doc["settings"]["seeds"]) == 1
    for r in doc["rows"]:
        where = r.get("computed_on") or "a machine not recorded (rows made before commit 3fb7692)"
        on.setdefault(where, []).append(r["problem"] if one_seed else f"{r['problem']} (seed {r['seed']})")
    if len(on) < 2:
        return []
    parts = [f"{where}: {', '.join(names) if len(names) <= 8 else f'{len(names)} rows'}" for where, names in on.items()]
    return ["Rows computed on more than one machine (the last digits, and sometimes a design's choices, differ "
            "between CPUs): " + "; ".join(parts) + ".", ""]


def _left_out_cell(check: dict | None) -> str:
    """The left-out check of a row: none ran (-), or whether the dropped candidates' points were
    served or left out, with their number, z and the rank test's p (absent in rows made before it)."""
    if not check:
        return "-"
    z = "-" if check.get("z") is None else f"{check['z']:.2f}"
    p = "-" if check.get("rank_p") is None else f"{check['rank_p']:.2g}"
    return f"{'left out' if check['left_out'] else 'kept'} ({check['points']}, {z}, {p})"


def markdown(doc: dict) -> str:
    if doc["settings"].get("model") == "gp":
        return markdown_gp(doc)
    s, budgets = doc["summary"], doc["settings"]["budgets"]
    lines = [f"# Designs for a label budget ({doc['preset']})", "", *_rerun_lines(doc), *_machines_line(doc),
             "Held-out Err of KRR trained on the budgeted job's training set (every label counted) against "
             "the same number of labels of Q's mixture (over "
             f"{doc['settings']['draws']} training draws) and of the NIPV active-learning anchor; "
             "better / tie / worse beyond noise (95%, lwl.evaluation.comparison). The unbudgeted design stands at "
             "its design labels + B. Wall time "
             f"{doc['wall_seconds'] / 60:.1f} min"
             + (f" ({doc['workers']} processes)" if doc.get("workers", 1) > 1 else "") + ".", "",
             "| budget | runs | within budget | vs mixture: better / tie / worse (lower Err) | median ratio | "
             "vs NIPV: better / tie / worse (lower Err) | median ratio | median design s |",
             "|---:|---:|---:|---|---:|---|---:|---:|"]
    for B in budgets:
        c = s[str(B)]
        mix, nipv = c.get("mixture"), c.get("nipv")
        lines.append(f"| {B} | {c['runs']} | {c['within_budget']}/{c['runs']} | {_counts(mix)} | {mix['median_ratio']:.3f} | "
                     + (f"{_counts(nipv)} | {nipv['median_ratio']:.3f} | " if nipv else "not run | | ")
                     + f"{c['median_design_seconds']:.1f} |")
    lines += ["", f"The unbudgeted design used a median of {s['unbudgeted_median_design_labels']:,.0f} labels "
              "before its final training set.", ""]
    def row(r, c, B):
        u = r["unbudgeted"]
        return (f"{c['rounds']} | {c['selected']} | {c['err']:.4g} | {c['mixture']['other_err']:.4g} | "
                f"{c['mixture']['outcome']} | {_nipv_cells(c)}{u['err'][str(B)]:.4g} ({u['design_labels'] + B:,}) |")

    lines += _per_budget_tables(doc, "rounds | selected | budgeted Err | mixture Err | vs mixture | NIPV Err | vs NIPV | "
                                "unbudgeted Err (total labels) |", "|---:|---|---:|---:|---|---:|---|---:|", row)
    return "\n".join(lines)


def write_outputs(doc: dict, out_dir) -> list:
    from lwl.experiments.report import pyplot, save_figure, write_tables

    out, _, paths = write_tables(doc, out_dir, markdown)
    plt = pyplot()
    budgets = doc["settings"]["budgets"]
    table = [r for r in doc["rows"] if r["problem"].startswith("table1-") and r["seed"] == doc["settings"]["seeds"][0]]
    if table:
        fig, axes = plt.subplots(1, len(table), figsize=(3.2 * len(table), 3.2), squeeze=False)
        for ax, r in zip(axes[0], table):
            cells = [r["budgets"][str(B)] for B in budgets]
            n = [c["labels_used"] for c in cells]
            ax.plot(n, [c["err"] for c in cells], "o-", label="budgeted")
            ax.plot(n, [c["mixture"]["other_err"] for c in cells], "s--", label="Q's mixture")
            anchor = [(c["labels_used"], c["nipv"]["other_err"]) for c in cells if c.get("nipv")]
            if anchor:
                ax.plot(*zip(*anchor), "^:", label="NIPV anchor")
            u = r["unbudgeted"]
            if u is not None:  # the gp study runs no unbudgeted design
                ax.plot([u["design_labels"] + B for B in budgets], [u["err"][str(B)] for B in budgets], "x-",
                        label="unbudgeted (all labels)")
            if cells[0].get("krr_pipeline"):
                ax.plot(n, [c["krr_pipeline"]["err"] for c in cells], "x-", label="KRR pipeline")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(r["problem"].removeprefix("table1-"), fontsize=9)
            ax.set_xlabel("total labels")
        axes[0][0].set_ylabel("held-out Err")
        axes[0][0].legend(fontsize=6)
        paths.append(save_figure(fig, out / "err_vs_labels.png", dpi=110))
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for B in budgets:  # the verdicts over seeds: each seed's ratio, their geometric mean and its interval
        seeds = doc["summary"][str(B)].get("over_seeds")
        if not seeds:
            continue
        items = list(seeds["problems"].items())
        fig, ax = plt.subplots(figsize=(max(4.0, 1.2 + 1.1 * len(items)), 3.4))
        for i, (p, v) in enumerate(items):
            ax.plot([i] * len(v["ratios"]), v["ratios"], "o", color="0.6", ms=4)
            lo, hi = v["ratio_interval"]
            ax.errorbar([i + 0.15], [v["ratio"]], yerr=[[v["ratio"] - lo], [hi - v["ratio"]]], fmt="s", color="C0",
                        capsize=3)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(range(len(items)), [p.split("-")[0] if p.startswith("p") else p for p, _ in items], fontsize=8)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(-0.5, len(items) - 0.5)
        ax.set_ylabel("Err ratio, design / Q's mixture")
        ax.set_title(f"budget {B}: each seed (grey),\ngeometric mean and 95% interval (blue)", fontsize=8)
        paths.append(save_figure(fig, out / f"over_seeds_{B}.png", dpi=110))
    return paths

