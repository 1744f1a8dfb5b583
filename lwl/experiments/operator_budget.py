"""Operator designs for a solve budget, counted (issue #47; docs/method/operators.md "Operator jobs under a
budget"): the budgeted ``ama`` job (:mod:`lwl.design.budgeted_ama`) on the paper's three operator
problems and the budgeted ``particle_ama`` job (:mod:`lwl.design.budgeted_particles`) on its
radiative-transport problem, every PDE solve counted by the oracle itself, judged at equal solves
(:mod:`lwl.evaluation.equal_solves`) against Q's law, the initial distribution and pool-based
active learning (QbC and CoreSet, :mod:`lwl.design.active`, the Burgers study's baselines), and
beside the unbudgeted AMA counted with all its solves.

Problems (job specs below; Q's members drawn as the operator studies draw them,
:mod:`lwl.experiments.operators`, but fewer, so that every member gets validation fields at 250):

- **darcy**: examples/darcy_ama.json (three KLE members of Q on the 16 x 16 grid, the family's mean
  shift free).
- **ntd**: the Neumann-to-Dirichlet map on the unit square's boundary (grid 24, 92 boundary nodes),
  the family 10 sin(omega (t - 1/2)) + KLE(2, 3, 3^1.5) with omega free, Q four members with
  omega and tau from the paper's law (SM NtD).
- **burgers**: viscous Burgers at t = 1 on 128 Fourier nodes, the family's (alpha, tau, sigma) free
  from (3, 1.4, 5), Q four Fourier KLEs with alpha ~ U[2, 2.5], tau ~ U[1.5, 3], sigma ~ U[5, 10].
- **rte**: examples/rte_particles.json, radiative transport at Knudsen 2 on the 21 x 21 grid (12
  directions), 40 particles of 10 x 10 sine modes, Q three log-normal fields (SM RTE).

The grids are the quick studies' (the paper's are 128 boundary points for NtD, 64^2 for Darcy and
8192 for Burgers: a 2-core CPU does not train the many DeepONets of a budgeted design there).

For every problem, budget B and seed:

- **budgeted**: the job with ``budget: B``; its training set of n <= B solves, every solve counted
  by a counting oracle, and the verdict at equal solves (``draws`` DeepONet training draws per
  comparator, Q's held-out fields): Q's law and the initial law (AMA's theta0, particle AMA's initial
  particles; fresh samples), QbC and CoreSet (a pool of
  ``pool_factor`` n inputs from Q's law, labels bought in three rounds n/4, n/2, n);
- **unbudgeted**: the paper's AMA (particle AMA for rte) job as the example gives it (its own
  iterations), its design's solves counted the same way (particle AMA's through the adjoint's
  solvers too; its evaluation's held-out solves apart, ``evaluation_solves``) and its relative OOD error on fresh samples of Q (its own evaluation).

Wall time of each job. Rows are written as they finish (``out``), so an interrupted study resumes.
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import numpy as np

Q_SEED = 2025  # Q's members, as in lwl.experiments.operators

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


def ntd(members: int = 4, grid: int = 24) -> dict:
    """SM NtD at ``grid`` (4 grid - 4 boundary nodes): Q's omega ~ rho[-2 pi, 2 pi], tau ~ rho[0, 50]
    (rho the paper's law), alpha 1.5, sigma tau^1.5; the family's omega by differential evolution."""
    from lwl.measures import cosine_law

    G = 4 * grid - 4
    rng = np.random.default_rng(Q_SEED)
    rho = cosine_law.law(cosine_law.DEFAULT_LAW)
    qs = []
    for _ in range(members):
        w, t = rho(rng, -2 * math.pi, 2 * math.pi), rho(rng, 0.0, 50.0)
        qs.append({"kle": {"basis": "sine1d", "grid": G, "alpha": 1.5, "tau": t, "sigma": t**1.5,
                           "amplitude": 10.0, "omega": w}})
    return {
        "oracle": {"name": "ntd", "params": {"grid": grid}},
        "test_distributions": {"members": qs, "validation_per_member": 40},
        "family": {"name": "kle", "basis": "sine1d", "grid": G, "alpha": 2.0, "tau": 3.0, "sigma": 3.0**1.5,
                   "amplitude": 10.0, "omega": 8 * math.pi, "free": ["omega"],
                   "bounds": {"omega": [-8 * math.pi, 8 * math.pi]}},
        "model": {"name": "deeponet", "branch": [64, 64], "trunk": [64, 64], "latent": 32, "iterations": 500},
        "algorithm": {"name": "ama", "iterations": 3, "samples_per_iteration": 100, "optimization_samples": 100,
                      "optimizer": "differential_evolution", "maxiter": 20, "rounds": 1},
    }


def burgers(members: int = 4, grid: int = 128) -> dict:
    """SM Burgers at ``grid`` Fourier nodes (viscosity 0.1, t = 1 on [0, 2 pi)): Q's Fourier KLEs
    as lwl's Burgers study draws them; the family's (alpha, tau, sigma) by L-BFGS-B."""
    rng = np.random.default_rng(Q_SEED)
    qs = [{"kle": {"basis": "fourier", "grid": grid, "alpha": rng.uniform(2.0, 2.5), "tau": rng.uniform(1.5, 3.0),
                   "sigma": rng.uniform(5.0, 10.0)}} for _ in range(members)]
    return {
        "oracle": {"name": "burgers", "params": {"viscosity": 0.1, "length": 2 * math.pi, "time": 1.0}},
        "test_distributions": {"members": qs, "validation_per_member": 40},
        "family": {"name": "kle", "basis": "fourier", "grid": grid, "alpha": 3.0, "tau": 1.4, "sigma": 5.0,
                   "free": ["alpha", "tau", "sigma"],
                   "bounds": {"alpha": [1.5, 5.0], "tau": [0.5, 5.0], "sigma": [1.0, 15.0]}},
        "model": {"name": "deeponet", "branch": [64, 64], "trunk": [64, 64], "latent": 32, "iterations": 500},
        "algorithm": {"name": "ama", "iterations": 3, "samples_per_iteration": 100, "optimization_samples": 50,
                      "optimizer": "lbfgsb", "maxiter": 10, "rounds": 1},
    }


# examples/rte_particles.json (SM RTE, Knudsen 2, grid 21, 12 directions; three log-normal members of Q), as
# the study runs it: the particle_ama job (lwl.design.budgeted_particles under a budget)
RTE = {
    "oracle": {"name": "rte", "params": {"knudsen": 2.0, "grid": 21, "directions": 12}},
    "test_distributions": {
        "members": [
            {"lognormal": {"basis": "sine2d", "grid": 21, "endpoints": True, "alpha": 2.0, "tau": 1.0, "sigma": s,
                           "shift": m}} for s, m in ((1.0, 0.5), (2.0, 0.0), (3.0, -0.5))],
        "validation_per_member": 40,
    },
    "family": {"name": "particles", "grid": 21, "modes": 10, "particles": 40},
    "model": {"name": "deeponet", "branch": [100, 100, 64], "trunk": [100, 100, 64], "latent": 32, "iterations": 500},
    "algorithm": {"name": "particle_ama", "iterations": 3, "step_size": 0.01},
}

PROBLEMS = {"darcy": lambda: copy.deepcopy(DARCY), "ntd": ntd, "burgers": burgers, "rte": lambda: copy.deepcopy(RTE)}

# the DeepONet of every job, comparator and audit in the quick and full presets: lwl's default
# 2,000 Adam iterations, not the examples' 300-500 (there the model, not the data, sets the error:
# Burgers' Q's law at 1,000 solves 0.383 at 500 iterations, 0.279 at 2,000; Darcy's at 250 solves
# 0.094 at 500, 0.062 at 2,000; NtD's 0.113 and 0.089; docs/method/operators.md), and five training draws per
# comparator (with three, the draw term's 2 degrees of freedom take a t quantile of 4.3: a Darcy cell
# at 250 solves read 0.055 against the initial law's 1.14 as a tie)
TRAINED = {"iterations": 2000}
# how the committee's pool is drawn, named in the presets' settings so that a study's rows made
# with the earlier fresh pool per round (docs/results/operator-budget-quick-freshpool) are never
# reused beside rows of the one pool per job (BudgetedDesign.pool; docs/method/operators.md "One pool")
POOL_DRAW = "one pool per job"

PRESETS = {
    # the three operator problems and rte at 250, 1,000 and 4,000 solves, three seeds (many hours on
    # 2 cores; resumes from the quick preset's rows: --merge docs/results/operator-budget-quick)
    "full": dict(problems=("darcy", "ntd", "burgers", "rte"), budgets=(250, 1000, 4000), seeds=(0, 1, 2), heldout=500,
                 unbudgeted=True, draws=5, active=("qbc", "coreset"), pool_factor=4, model=TRAINED,
                 explore=0.25, explore_min=8, pool_draw=POOL_DRAW),
    # the four problems at 250 and 1,000 solves, three seeds; 500 held-out fields per member of Q
    "quick": dict(problems=("darcy", "ntd", "burgers", "rte"), budgets=(250, 1000), seeds=(0, 1, 2), heldout=500,
                  unbudgeted=True, draws=5, active=("qbc", "coreset"), pool_factor=4, model=TRAINED,
                  explore=0.25, explore_min=8, pool_draw=POOL_DRAW),
    # the quick preset at the examples' own DeepONet iterations (300 Darcy, 500 the others) and three
    # draws: docs/results/operator-budget-examples, where the model saturates (above)
    "examples": dict(problems=("darcy", "ntd", "burgers", "rte"), budgets=(250, 1000), seeds=(0, 1, 2),
                     heldout=500, unbudgeted=True, draws=3, active=("qbc", "coreset"), pool_factor=4, model={},
                     explore=0.25),
    # for the test suite: a small DeepONet, one budget, one seed
    "smoke": dict(problems=("darcy",), budgets=(60,), seeds=(0,), heldout=30, unbudgeted=False, draws=2,
                  active=("coreset",), pool_factor=2,
                  model={"iterations": 20, "branch": [32], "trunk": [32], "latent": 16}, explore=0.25),
}


def problem_spec(name: str, cfg: dict, seed: int) -> dict:
    """The problem's job spec at ``seed``, with the preset's model settings and held-out samples."""
    spec = PROBLEMS[name]()
    spec["seed"] = seed
    spec["model"].update(cfg["model"])
    spec["algorithm"]["explore"] = cfg["explore"]
    if "explore_min" in cfg:  # the examples preset names none: its jobs get the spec's default
        spec["algorithm"]["explore_min"] = cfg["explore_min"]
    tests = spec["test_distributions"]
    for m in tests["members"]:
        m["size"] = tests["validation_per_member"] + cfg["heldout"]
    return spec


def _counted(spec: dict, evaluate: bool | None = None):
    """Run the job with every solve counted by a counting solver: (result, oracle, seconds,
    design solves). The design's solves are the count when its last step reported progress, before
    the job's own evaluation (whose held-out solves are an audit, not the design's)."""
    from lwl.oracles.counting import CountingOracle
    from lwl.runner import run_job
    from lwl.spec import parse_job_spec

    oracle = CountingOracle(parse_job_spec(spec).oracle.build())  # every solve, counted by the solver
    at_step: list[int] = []
    t0 = time.perf_counter()
    res = run_job(spec, oracle=oracle, evaluate=evaluate, progress=lambda p: at_step.append(oracle.solves))
    return res, oracle, time.perf_counter() - t0, (at_step[-1] if at_step else oracle.solves)


def active_trainers(stepper, oracle, cfg: dict) -> dict:
    """QbC and CoreSet (``cfg["active"]``) as :func:`lwl.evaluation.equal_solves.equal_solves`
    trainers: for n solves and draw r, a pool of ``pool_factor`` n inputs from Q's law (draw r of
    the audit stream), labels bought in rounds n/4, n/2, n (:func:`lwl.design.active.active_learning`,
    the job's DeepONet); returns the last round's model and the n solves it paid."""
    from lwl.design.active import active_learning
    from lwl.streams import STREAM_AUDIT

    seed = stepper.spec.seed

    def trainer(method: str):
        def train(n: int, r: int):
            pool = stepper.q_law().sample(cfg["pool_factor"] * n, [seed, STREAM_AUDIT, 1000 + r])
            sizes = sorted({max(2, n // 4), max(2, n // 2), n})
            (_, model), = active_learning(method, pool, oracle, stepper.factory, stepper.z, sizes,
                                          seed=seed + 101 * r, output_weights=stepper.output_weights)[-1:]
            return model, n
        return train

    return {m: trainer(m) for m in cfg["active"]}


def run_budget(name: str, cfg: dict, seed: int, B: int) -> dict:
    """One budgeted job and its verdict at equal solves (module docstring)."""
    from lwl.evaluation.equal_solves import equal_solves
    from lwl.experiments.budget import paid_labels
    from lwl.models import from_spec
    from lwl.runner import build_stepper
    from lwl.spec import parse_job_spec

    spec = problem_spec(name, cfg, seed)
    spec["budget"] = B
    res, oracle, seconds, design_solves = _counted(spec, evaluate=False)
    stepper = build_stepper(parse_job_spec(spec), oracle=oracle)  # the budgeted design of the problem's algorithm
    ts = res["training_set"]
    X, Y = np.asarray(ts["inputs"], dtype=np.float64), np.asarray(ts["labels"], dtype=np.float64)
    t0 = time.perf_counter()
    # the served DeepONet from the job's own model document: the audit's draw 0, not trained again
    served = from_spec(res["model"]) if res.get("model") else None
    ev = equal_solves(stepper, X, Y, oracle, draws=cfg["draws"], trainers=active_trainers(stepper, oracle, cfg),
                      labels=paid_labels(res), served=served)
    audit_solves = oracle.solves - design_solves  # counted by the solver, not the evaluation's own tally
    return {"budget": B, "labels_used": int(res["labels_used"]), "design_solves": int(design_solves),
            "training_set": int(len(X)),
            "within_budget": bool(design_solves <= B and res["labels_used"] <= B), "rounds": int(res["rounds"]),
            "selected": res["selected"]["candidate"], "err": ev["err"]["optimized"], "served_err": ev["served_err"],
            "err_interval": ev["err_interval"]["optimized"],
            "comparisons": {k: {f: c[f] for f in ("outcome", "other_err", "ratio", "ratio_interval")}
                            for k, c in ev["comparisons"].items()},
            "validation_verdict": (res.get("validation_verdict") or {}).get("outcome"),
            "audit_solves": int(audit_solves), "audit_labels_reported": int(ev["audit_labels"]), "seconds": seconds,
            "audit_seconds": time.perf_counter() - t0}


def run_unbudgeted(name: str, cfg: dict, seed: int) -> dict:
    """The problem's unbudgeted AMA (or particle AMA) job, its design's solves counted apart from
    its evaluation's (module docstring)."""
    res, oracle, seconds, design_solves = _counted(problem_spec(name, cfg, seed))
    return {"solves": int(design_solves), "evaluation_solves": int(oracle.solves - design_solves),
            "labels_used": int(res["labels_used"]), "relative_ood_error": float(res["evaluation"]["relative_ood_error"]),
            "seconds": seconds}


def run_task(kind: str, name: str, cfg: dict, seed: int, B: int | None = None) -> dict:
    """One piece of a row: the budgeted cell at ``B`` (``kind`` "budget") or the unbudgeted job."""
    return run_budget(name, cfg, seed, B) if kind == "budget" else run_unbudgeted(name, cfg, seed)


def _needs_unbudgeted(cfg: dict, row: dict) -> bool:
    # a row counted before the design's solves were told apart from its evaluation's is counted again
    return bool(cfg["unbudgeted"]) and (row["unbudgeted"] is None or "evaluation_solves" not in row["unbudgeted"])


def _tasks(cfg: dict, rows: dict) -> list[tuple]:
    """What is left to run: the budgeted cells smallest budget first (every problem and seed at 250
    before any at 1,000, so an interrupted study has the cheap cells of every problem), then the
    unbudgeted jobs."""
    cells = [("budget", name, cfg, seed, B) for B in cfg["budgets"] for seed in cfg["seeds"] for name in cfg["problems"]
             if str(B) not in rows[(name, seed)]["budgets"]]
    return cells + [("unbudgeted", name, cfg, seed, None) for seed in cfg["seeds"] for name in cfg["problems"]
                    if _needs_unbudgeted(cfg, rows[(name, seed)])]


def _place(row: dict, kind: str, B: int | None, piece: dict) -> None:
    if kind == "budget":
        row["budgets"][str(B)] = piece
    else:
        row["unbudgeted"] = piece


def _blank(name: str, seed: int) -> dict:
    return {"problem": name, "seed": seed, "budgets": {}, "unbudgeted": None}


def _report_cell(progress, name: str, seed: int, B: int, cell: dict) -> None:
    if progress:
        mix = cell["comparisons"]["mixture"]
        progress(f"{name} seed {seed} B={B}: {cell['err']:.4g} vs Q's law {mix['other_err']:.4g} ({mix['outcome']})")


def run_problem(name: str, cfg: dict, seed: int, done: dict | None = None) -> dict:
    """Every budget of one problem and seed, and the unbudgeted AMA (module docstring), in one
    process; budgets in ``done`` (an earlier run's row) are kept."""
    row: dict = copy.deepcopy(done) if done else _blank(name, seed)
    for kind, _, _, _, B in _tasks({**cfg, "problems": (name,), "seeds": (seed,)}, {(name, seed): row}):
        _place(row, kind, B, run_task(kind, name, cfg, seed, B))
    return row


COMPARATORS = {"mixture": "Q's law", "initial": "initial law", "qbc": "QbC", "coreset": "CoreSet"}


def summary(rows: list[dict], budgets) -> dict:
    out = {}
    for B in budgets:
        cells = [r["budgets"][str(B)] for r in rows if str(B) in r["budgets"]]
        out[str(B)] = {"runs": len(cells), "within_budget": all(c["within_budget"] for c in cells)}
        for name in COMPARATORS:
            outcomes = [c["comparisons"][name]["outcome"] for c in cells if name in c["comparisons"]]
            if not outcomes:
                continue
            out[str(B)][name] = {k: outcomes.count(k) for k in ("better", "tie", "worse")}
    return out


RESUMABLE_ACROSS = ("problems", "budgets", "seeds", "unbudgeted")  # settings a resumed study may differ in


def _settings(cfg: dict) -> dict:
    """A preset's settings as JSON stores them (tuples as lists): what rows.json is compared by."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}


def _same_jobs(a: dict, b: dict) -> bool:
    """Two presets' settings make the same jobs and audits (they may differ in which)."""
    strip = lambda s: {k: v for k, v in s.items() if k not in RESUMABLE_ACROSS}  # noqa: E731
    return strip(a) == strip(b)


def _saved_rows(path: Path, settings: dict) -> list[dict]:
    """Every row of an earlier study saved at ``path`` (rows.json) that made the same jobs (any
    problems, seeds and budgets); none when the file is missing or made other jobs."""
    if not path.exists():
        return []
    saved = json.loads(path.read_text())
    return saved["rows"] if _same_jobs(saved.get("settings", {}), settings) else []


def _merged(rows: list[dict]) -> dict:
    """Rows keyed by (problem, seed), the budgets of rows with the same key merged (later wins)."""
    out: dict = {}
    for r in rows:
        key = (r["problem"], r["seed"])
        if key in out:
            mine = out[key]
            out[key] = {**mine, "budgets": {**mine["budgets"], **r["budgets"]},
                        "unbudgeted": r["unbudgeted"] or mine["unbudgeted"]}
        else:
            out[key] = copy.deepcopy(r)
    return out


def earlier_rows(path: Path, settings: dict) -> dict:
    """Rows of an earlier study saved at ``path`` (rows.json) that made the same jobs (e.g. the
    quick preset's rows for the full preset, which adds a budget), keyed by (problem, seed), with
    only the problems, seeds and budgets ``settings`` asks for."""
    out = {}
    for key, r in _merged(_saved_rows(path, settings)).items():
        if r["problem"] in settings["problems"] and r["seed"] in settings["seeds"]:
            out[key] = {**r, "budgets": {B: c for B, c in r["budgets"].items() if int(B) in settings["budgets"]}}
    return out


def run(preset: str = "quick", *, progress=None, out=None, resume_from=None, workers: int = 1) -> dict:
    """The study at ``preset``; with ``out``, rows go to ``out``/rows.json as they finish, and the
    cells already there (or in ``resume_from``/rows.json, e.g. the quick preset's folder for the
    full preset) that made the same jobs are kept, not run again (``reused_cells``). Saving never
    drops a row or budget already in ``out``/rows.json (a smaller preset run in a larger one's
    folder adds to it). ``workers`` > 1 runs the cells in that many processes of one thread each
    (every cell is deterministic from its spec and seed), each saved as it finishes."""
    cfg = PRESETS[preset]
    settings = _settings(cfg)
    path = Path(out) / "rows.json" if out is not None else None
    folders = [Path(f) for f in (resume_from, out) if f is not None]
    earlier = _merged([r for f in folders for r in earlier_rows(f / "rows.json", settings).values()])
    everything = _merged([r for f in folders for r in _saved_rows(f / "rows.json", settings)])
    reused = sum(len(r["budgets"]) for r in earlier.values())
    t0 = time.perf_counter()
    keys = [(name, seed) for name in cfg["problems"] for seed in cfg["seeds"]]
    rows = {k: copy.deepcopy(earlier[k]) if k in earlier else _blank(*k) for k in keys}

    def save(row: dict) -> None:
        everything.update(_merged([*everything.values(), row]))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"settings": settings, "rows": list(everything.values())}))

    if progress:
        for (name, seed), row in rows.items():
            for B in row["budgets"]:
                progress(f"{name} seed {seed} B={B}: kept from an earlier run")

    def finished(task: tuple, piece: dict) -> None:
        kind, name, _, seed, B = task
        row = rows[(name, seed)]
        _place(row, kind, B, piece)
        if kind == "budget":
            _report_cell(progress, name, seed, B, piece)
        save(row)

    todo = _tasks(cfg, rows)
    if workers > 1:
        from lwl.experiments.report import as_finished

        for task, piece in as_finished(run_task, todo, workers):
            finished(task, piece)
    else:
        for task in todo:
            finished(task, run_task(*task))
    for row in rows.values():  # budgets in the preset's order, whatever order they finished in
        row["budgets"] = {str(B): row["budgets"][str(B)] for B in cfg["budgets"] if str(B) in row["budgets"]}
    rows = list(rows.values())
    return {"experiment": "operator-budget", "preset": preset, "settings": settings,
            "rows": rows, "summary": summary(rows, cfg["budgets"]), "reused_cells": reused,
            "wall_seconds": time.perf_counter() - t0, "compute_seconds": compute_seconds(rows), "workers": workers}


def saved_study(preset: str, folder) -> dict:
    """The study document of the rows saved in ``folder``/rows.json at ``preset`` (an interrupted
    run's, to report what finished; its markdown says how much is missing)."""
    cfg = PRESETS[preset]
    settings = _settings(cfg)
    saved = _merged(_saved_rows(Path(folder) / "rows.json", settings))
    rows = [saved[(name, seed)] for name in cfg["problems"] for seed in cfg["seeds"] if (name, seed) in saved]
    for r in rows:
        r["budgets"] = {str(B): r["budgets"][str(B)] for B in cfg["budgets"] if str(B) in r["budgets"]}
    budgets = [B for B in cfg["budgets"] if any(str(B) in r["budgets"] for r in rows)]
    return {"experiment": "operator-budget", "preset": preset, "settings": settings, "rows": rows,
            "summary": summary(rows, budgets), "reused_cells": 0, "wall_seconds": None,
            "compute_seconds": compute_seconds(rows)}


def compute_seconds(rows: list[dict]) -> float:
    """Seconds of every job and audit of ``rows`` (across resumed runs)."""
    return float(sum(c["seconds"] + c.get("audit_seconds", 0.0) for r in rows for c in r["budgets"].values())
                 + sum(r["unbudgeted"]["seconds"] for r in rows if r["unbudgeted"]))


def _num(x) -> str:
    """A number of a table cell ('–' where the row predates it)."""
    return "–" if x is None else f"{x:.4g}"


def _btw(counts: dict) -> str:
    return f"{counts['better']} / {counts['tie']} / {counts['worse']}"


def markdown(doc: dict) -> str:
    present = {k for r in doc["rows"] for c in r["budgets"].values() for k in c["comparisons"]}
    names = {k: v for k, v in COMPARATORS.items() if k in present}
    draws = doc["settings"].get("draws", 3)
    active = " and ".join(COMPARATORS[k] for k in ("qbc", "coreset") if k in names)
    chosen = f", and chosen from a pool of Q's law by {active}" if active else ""
    intro = ("Held-out relative L2 error (Q's members weighted, the oracle's output grid) of the DeepONet "
             "trained on the budgeted job's training set (ama; particle_ama for rte), against the same DeepONet trained on the same "
             f"number of solves of Q's law, of the initial law (ama's ν_θ⁰, particle AMA's initial particles){chosen} "
             f"({draws} training draws each; the job's training set over as many network starts, its served "
             f"DeepONet being the first: 'served Err'); better / tie / worse beyond noise (95%). Solves "
             f"counted by the solver itself. Compute time {doc['compute_seconds'] / 60:.1f} min (jobs, audits "
             "and unbudgeted runs).")
    st = doc["settings"]
    planned = len(st["problems"]) * len(st["seeds"]) * len(st["budgets"])
    done = sum(len(r["budgets"]) for r in doc["rows"])
    if done < planned:  # an interrupted study, reported from its saved rows (saved_study)
        intro += (f" **Partial: {done} of the preset's {planned} budgeted cells** (and "
                  f"{sum(1 for r in doc['rows'] if r['unbudgeted'])} of its unbudgeted jobs); the same command "
                  "with this folder's rows.json runs the rest.")
    lines = [f"# Operator designs for a solve budget ({doc['preset']})", "", intro, "",
             "| budget | runs | solves ≤ budget | " + " | ".join(f"vs {n} b/t/w" for n in names.values()) + " |",
             "|---:|---:|---|" + "---|" * len(names)]
    for B, s in doc["summary"].items():
        lines.append(f"| {B} | {s['runs']} | {'all' if s['within_budget'] else 'NO'} | "
                     + " | ".join(_btw(s[k]) if k in s else "–" for k in names) + " |")
    header = ("| problem | seed | budget | solves | selected | Err | served Err | "
              + " | ".join(f"{n} Err | vs {n}" for n in names.values()) + " | validation verdict | s |")
    lines += ["", header,
              "|---|---:|---:|---:|---|---:|---:|" + "---:|---|" * len(names) + "---|---:|"]
    for r in doc["rows"]:
        for B, c in r["budgets"].items():
            comps = " | ".join(f"{c['comparisons'][k]['other_err']:.4g} | {c['comparisons'][k]['outcome']}"
                               if k in c["comparisons"] else "– | –" for k in names)
            lines.append(f"| {r['problem']} | {r['seed']} | {B} | {c['design_solves']} | {c['selected']} | "
                         f"{c['err']:.4g} | {_num(c.get('served_err'))} | {comps} | {c['validation_verdict']} | "
                         f"{c['seconds']:.0f} |")
    unb = [r for r in doc["rows"] if r["unbudgeted"]]
    if unb:
        lines += ["", ("The unbudgeted AMA job (the problem's AMA or particle AMA settings above), every solve counted by "
                       "the solver (the design's, and apart the held-out solves of its own evaluation), its relative "
                       "OOD error on fresh samples of Q (that evaluation):"), "",
                  "| problem | seed | design solves | evaluation solves | relative OOD error | s |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['problem']} | {r['seed']} | {r['unbudgeted']['solves']} | "
                  f"{r['unbudgeted'].get('evaluation_solves', '–')} | "
                  f"{r['unbudgeted']['relative_ood_error']:.4g} | {r['unbudgeted']['seconds']:.0f} |" for r in unb]
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict, out_dir) -> list:
    from lwl.experiments.report import write_tables

    return write_tables(doc, out_dir, markdown)[2]
