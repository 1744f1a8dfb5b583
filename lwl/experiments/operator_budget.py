"""Operator designs for a solve budget, counted (issue #47; docs/method.md "Designs for a label
budget"): the budgeted ``ama`` job (:mod:`lwl.design.budgeted_ama`) on the paper's operator
problems, every PDE solve counted by the oracle itself, judged at equal solves
(:mod:`lwl.evaluation.equal_solves`) against Q's law and the initial distribution, and beside the
unbudgeted AMA counted with all its solves.

Problems: **Darcy** (examples/darcy_ama.json: three KLE members of Q on the 16 x 16 grid, the
family's mean shift free, a DeepONet). NtD and Burgers are not here yet (docs/method.md says so).
For every problem, budget B and seed:

- **budgeted**: the job with ``budget: B``; its training set of n <= B solves, every solve counted
  by a counting oracle (``solver_count``), and its verdict at equal solves (3 DeepONet training
  draws per comparator, Q's held-out fields);
- **unbudgeted**: the paper's AMA job as the example gives it (its own iterations), its solves
  counted the same way and its relative OOD error on fresh samples of Q (its own evaluation).

Wall time of each job.
"""

from __future__ import annotations

import copy
import time

# examples/darcy_ama.json, as the study runs it (inline: the study needs no file beside the package)
DARCY = {
    "oracle": {"name": "darcy"},
    "test_distributions": {
        "members": [
            {"kle": {"basis": "sine2d", "grid": 16, "endpoints": True, "alpha": 2.5, "tau": 2.0, "sigma": 2.83,
                     "shift": 0.6}},
            {"kle": {"basis": "sine2d", "grid": 16, "endpoints": True, "alpha": 2.2, "tau": 3.0, "sigma": 3.74,
                     "shift": 0.3}},
            {"kle": {"basis": "sine2d", "grid": 16, "endpoints": True, "alpha": 2.8, "tau": 1.5, "sigma": 1.76,
                     "shift": 0.8}},
        ],
        "validation_per_member": 50,
    },
    "family": {"name": "kle", "basis": "sine2d", "grid": 16, "endpoints": True, "alpha": 2.0, "tau": 3.0,
               "sigma": 3.0, "shift": 0.0, "free": ["shift"], "bounds": {"shift": [-5, 5]}},
    "model": {"name": "deeponet", "branch": [64, 64], "trunk": [64, 64], "latent": 32, "iterations": 300},
    "algorithm": {"name": "ama", "iterations": 3, "samples_per_iteration": 100, "optimization_samples": 3,
                  "optimizer": "adam", "learning_rate": 0.01, "steps": 100, "rounds": 2},
}
PROBLEMS = {"darcy": DARCY}

PRESETS = {
    # Darcy at 250 and 1,000 solves, three seeds; 500 held-out fields per member of Q
    "quick": dict(problems=("darcy",), budgets=(250, 1000), seeds=(0, 1, 2), heldout=500, unbudgeted=True,
                  model={}),
    # for the test suite: a small DeepONet, one budget, one seed
    "smoke": dict(problems=("darcy",), budgets=(60,), seeds=(0,), heldout=30, unbudgeted=False,
                  model={"iterations": 20, "branch": [32], "trunk": [32], "latent": 16}),
}


def problem_spec(name: str, cfg: dict, seed: int) -> dict:
    """The problem's job spec at ``seed``, with the preset's model settings and held-out samples."""
    spec = copy.deepcopy(PROBLEMS[name])
    spec["seed"] = seed
    spec["model"].update(cfg["model"])
    tests = spec["test_distributions"]
    for m in tests["members"]:
        m["size"] = tests["validation_per_member"] + cfg["heldout"]
    return spec


def _counted(spec: dict):
    from lwl.oracles.counting import CountingOracle
    from lwl.runner import run_job
    from lwl.spec import parse_job_spec

    oracle = CountingOracle(parse_job_spec(spec).oracle.build())  # every solve, counted by the solver
    t0 = time.perf_counter()
    res = run_job(spec, oracle=oracle)
    return res, oracle.solves, time.perf_counter() - t0


def run_problem(name: str, cfg: dict, seed: int, progress=None) -> dict:
    """Every budget of one problem and seed, and the unbudgeted AMA (module docstring)."""
    row: dict = {"problem": name, "seed": seed, "budgets": {}, "unbudgeted": None}
    for B in cfg["budgets"]:
        spec = problem_spec(name, cfg, seed)
        spec["budget"] = B
        res, solves, seconds = _counted(spec)
        ev = res["evaluation"]
        audit = ev["audit_labels"]
        row["budgets"][str(B)] = {
            "budget": B, "labels_used": int(res["labels_used"]), "design_solves": int(solves - audit),
            "within_budget": bool(solves - audit <= B and res["labels_used"] <= B), "rounds": int(res["rounds"]),
            "selected": res["selected"]["candidate"], "err": ev["err"]["optimized"],
            "err_interval": ev["err_interval"]["optimized"],
            "comparisons": {k: {f: c[f] for f in ("outcome", "other_err", "ratio", "ratio_interval")}
                            for k, c in ev["comparisons"].items()},
            "validation_verdict": (res.get("validation_verdict") or {}).get("outcome"),
            "audit_solves": int(audit), "seconds": seconds}
        if progress:
            progress(f"{name} seed {seed} B={B}: {ev['err']['optimized']:.4g} vs Q's law "
                     f"{ev['comparisons']['mixture']['other_err']:.4g} ({ev['comparisons']['mixture']['outcome']})")
    if cfg["unbudgeted"]:
        spec = problem_spec(name, cfg, seed)
        res, solves, seconds = _counted(spec)
        row["unbudgeted"] = {"solves": int(solves), "labels_used": int(res["labels_used"]),
                             "relative_ood_error": float(res["evaluation"]["relative_ood_error"]),
                             "seconds": seconds}
    return row


def summary(rows: list[dict], budgets) -> dict:
    out = {}
    for B in budgets:
        cells = [r["budgets"][str(B)] for r in rows if str(B) in r["budgets"]]
        out[str(B)] = {"runs": len(cells), "within_budget": all(c["within_budget"] for c in cells)}
        for name in ("mixture", "initial"):
            outcomes = [c["comparisons"][name]["outcome"] for c in cells]
            out[str(B)][name] = {k: outcomes.count(k) for k in ("better", "tie", "worse")}
    return out


def run(preset: str = "quick", *, progress=None) -> dict:
    cfg = PRESETS[preset]
    t0 = time.perf_counter()
    rows = [run_problem(name, cfg, seed, progress) for name in cfg["problems"] for seed in cfg["seeds"]]
    return {"experiment": "operator-budget", "preset": preset,
            "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
            "rows": rows, "summary": summary(rows, cfg["budgets"]), "wall_seconds": time.perf_counter() - t0}


def _btw(counts: dict) -> str:
    return f"{counts['better']} / {counts['tie']} / {counts['worse']}"


def markdown(doc: dict) -> str:
    names = {"mixture": "Q's law", "initial": "initial ν_θ⁰"}
    intro = ("Held-out relative L2 error (Q's members weighted, the oracle's output grid) of the DeepONet "
             "trained on the budgeted ama job's training set, against the same DeepONet trained on the same "
             "number of solves of Q's law and of the initial distribution (3 training draws each); better / "
             "tie / worse beyond noise (95%). Solves counted by the solver itself. Wall time "
             f"{doc['wall_seconds'] / 60:.1f} min.")
    lines = [f"# Operator designs for a solve budget ({doc['preset']})", "", intro, "",
             "| budget | runs | solves ≤ budget | vs Q's law b/t/w | vs initial b/t/w |", "|---:|---:|---|---|---|"]
    bt = _btw
    for B, s in doc["summary"].items():
        lines.append(f"| {B} | {s['runs']} | {'all' if s['within_budget'] else 'NO'} | {bt(s['mixture'])} | "
                     f"{bt(s['initial'])} |")
    header = ("| problem | seed | budget | solves | selected | Err | "
              + " | ".join(f"{n} Err | vs {n}" for n in names.values()) + " | validation verdict | s |")
    lines += ["", header,
              "|---|---:|---:|---:|---|---:|" + "---:|---|" * len(names) + "---|---:|"]
    for r in doc["rows"]:
        for B, c in r["budgets"].items():
            comps = " | ".join(f"{c['comparisons'][k]['other_err']:.4g} | {c['comparisons'][k]['outcome']}" for k in names)
            lines.append(f"| {r['problem']} | {r['seed']} | {B} | {c['design_solves']} | {c['selected']} | "
                         f"{c['err']:.4g} | {comps} | {c['validation_verdict']} | {c['seconds']:.0f} |")
    unb = [r for r in doc["rows"] if r["unbudgeted"]]
    if unb:
        lines += ["", ("The unbudgeted AMA job (the example's settings), every solve counted, its relative OOD error "
                       "on fresh samples of Q (its own evaluation):"), "",
                  "| problem | seed | solves | relative OOD error | s |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['problem']} | {r['seed']} | {r['unbudgeted']['solves']} | "
                  f"{r['unbudgeted']['relative_ood_error']:.4g} | {r['unbudgeted']['seconds']:.0f} |" for r in unb]
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict, out_dir) -> list:
    from lwl.experiments.report import write_tables

    return write_tables(doc, out_dir, markdown)[2]
