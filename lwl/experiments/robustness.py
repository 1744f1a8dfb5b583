"""Does the default bilevel job win without tuning? (issue "Designs that win without tuning")

A fixed list of Table-1-like problems, varied over the four test functions, the dimension d
(2..10), the number of Q members K (1..10), the oracle's output scale (x1e-3 .. x1e4) and the
initial distribution (none: Q's moment-matched Gaussian; ``paper``: N(1/2, I); ``far``: a mean
several standard deviations of Q away from Q's centre and a covariance 1/10 of Q's; ``near``:
Q's centre plus a small offset with the identity covariance). Every job names only the oracle,
Q, (for the non-default starts) the family and the KRR lengthscale as Table 1 gives it (half
the RMS distance between Q's samples; the ``full-selected`` preset leaves it to lwl): no
algorithm or evaluation block, so it runs on lwl's defaults. Each problem reports the held-out Err of the design and of the initial
distribution (``normal``), the barycenter and the mixture, whether the run diverged (see
:func:`diverged`: runaway parameters or blown-up predictions), and time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import wishart

FUNCTIONS = (("sobol_g", 2), ("friedman1", 5), ("friedman2", 4), ("kernel_expansion", 2))
SCALES = (1e-3, 1e-1, 1.0, 1e2, 1e4)
STARTS = ("default", "paper", "far", "near")


@dataclass(frozen=True)
class Problem:
    key: str
    oracle: str
    dim: int
    members: int
    scale: float
    start: str


def problems(count: int = 32) -> list[Problem]:
    """``count`` problems cycling through functions, starts and scales, with d and K drawn
    from a fixed generator (the list is the same on every machine)."""
    rng = np.random.default_rng(20261126)
    out = []
    for i in range(count):
        oracle, min_dim = FUNCTIONS[i % len(FUNCTIONS)]
        dim = int(rng.integers(min_dim, 11))
        members = int(rng.integers(1, 11))
        scale = SCALES[(i // len(FUNCTIONS)) % len(SCALES)]
        start = STARTS[(i + i // len(FUNCTIONS)) % len(STARTS)]
        out.append(Problem(f"p{i:02d}-{oracle}-d{dim}-K{members}", oracle, dim, members, scale, start))
    return out


def problem_spec(p: Problem, *, size: int, validation: int, iterations: int | None, seed: int = 0,
                 lengthscale_factor: float | None = None, family: str = "gaussian") -> dict:
    """The job spec of a problem: Q of K Gaussians N(m_k, C_k), m_k ~ N(0, I),
    C_k ~ Wishart_d(I, d + 1) (Table 1's construction), fixed by the problem. ``family:
    "mixture"`` moves a Gaussian mixture fitted to Q instead (the problem's start then does not
    apply: the mixture starts from Q's members or clusters)."""
    rng = np.random.default_rng([7, p.dim, p.members, sum(map(ord, p.key))])
    d = p.dim
    members = []
    for _ in range(p.members):
        m = rng.standard_normal(d)
        C = np.atleast_2d(wishart(df=d + 1, scale=np.eye(d)).rvs(random_state=rng))
        members.append({"gaussian": {"mean": m.tolist(), "cov": (0.5 * (C + C.T)).tolist()}, "size": size})
    params = {"scale": p.scale}
    if p.oracle == "kernel_expansion":  # the paper's g4 in dimension d (Table 1's kernel convention)
        params.update(dim=d, centres=1000, lengthscale=5.0 * 2**0.5, seed=p.dim)
    spec = {"oracle": {"name": p.oracle, "params": params},
            "test_distributions": {"members": members, "validation_per_member": validation},
            "seed": seed, "device": "cpu"}
    centre = np.mean([m["gaussian"]["mean"] for m in members], axis=0)
    if p.start == "paper":
        spec["family"] = {"mean": [0.5] * d, "cov": np.eye(d).tolist()}
    elif p.start == "far":
        direction = rng.standard_normal(d)
        spec["family"] = {"mean": (centre + 4.0 * direction / np.linalg.norm(direction) * np.sqrt(d)).tolist(),
                          "cov": (0.1 * np.eye(d)).tolist()}
    elif p.start == "near":
        spec["family"] = {"mean": (centre + 0.3 * rng.standard_normal(d)).tolist(), "cov": np.eye(d).tolist()}
    if family == "auto":  # lwl's default family: no family block at all
        spec.pop("family", None)
    elif family != "gaussian":
        spec["family"] = {"name": family}
    if iterations is not None:
        spec["algorithm"] = {"name": "bilevel", "iterations": iterations}
    if lengthscale_factor is not None:  # a model given as Table 1 gives it: a fixed fraction of Q's spread
        spread = np.sqrt(2.0 * sum(np.trace(m["gaussian"]["cov"]) + np.sum(np.square(m["gaussian"]["mean"]))
                                   for m in members) / len(members))
        spec["model"] = {"name": "krr", "lengthscale": float(lengthscale_factor * spread)}
    return spec


PRESETS = {
    # every job on lwl's defaults (no family block: auto; 1000 iterations with early stopping,
    # N_k = 1024); the KRR lengthscale is given as Table 1 gives it (half the RMS distance
    # between Q's samples)
    "full": dict(count=32, size=5000, validation=500, iterations=None, lengthscale_factor=0.5, family="auto"),
    # the same with the lengthscale left to lwl (selected by validation at the start)
    "full-selected": dict(count=32, size=5000, validation=500, iterations=None, lengthscale_factor=None,
                          family="auto"),
    # the two above as they ran before auto became the default: a Gaussian family from the
    # problem's start (none: Q's moment-matched Gaussian)
    "full-gaussian": dict(count=32, size=5000, validation=500, iterations=None, lengthscale_factor=0.5),
    "full-selected-gaussian": dict(count=32, size=5000, validation=500, iterations=None, lengthscale_factor=None),
    # the same two with a Gaussian-mixture family fitted to Q (issue "Beyond one Gaussian")
    "full-mixture": dict(count=32, size=5000, validation=500, iterations=None, lengthscale_factor=0.5,
                         family="mixture"),
    "full-selected-mixture": dict(count=32, size=5000, validation=500, iterations=None,
                                  lengthscale_factor=None, family="mixture"),
    "full-pool": dict(count=32, size=5000, validation=500, iterations=None, lengthscale_factor=0.5, family="pool"),
    "full-selected-pool": dict(count=32, size=5000, validation=500, iterations=None, lengthscale_factor=None,
                               family="pool"),
    # CI-sized: fewer Q samples and iterations, same problems
    "quick": dict(count=32, size=1500, validation=300, iterations=150, lengthscale_factor=0.5),
    # for the test suite
    "smoke": dict(count=4, size=400, validation=150, iterations=20, lengthscale_factor=0.5),
}


def _outcome_against(res: dict, key: str) -> str:
    """The design against baseline ``key`` over the evaluation's training draws
    (:mod:`lwl.evaluation.comparison`), at whichever of the design's and its own lengthscale is better."""
    ev = res["evaluation"]
    own = (ev.get("err_own_lengthscale") or {}).get(key)
    if own is not None and own["err"] < ev["err"][key]:
        return own["comparison"]["outcome"]
    return ev["comparisons"][key]["outcome"]


def run_problem(p: Problem, cfg: dict) -> dict:
    """One problem's row (a job on lwl's defaults, judged on held-out data)."""
    from lwl.runner import run_job

    spec = problem_spec(p, **cfg)
    t0 = time.perf_counter()
    res = run_job(spec)
    seconds = time.perf_counter() - t0
    v = res["verdict"]
    size = runaway_measures(res)
    row = {"baselines": v["baselines"], "baselines_own_lengthscale": v.get("baselines_own_lengthscale", {})}
    mix, bary = _strongest(row, "mixture"), _strongest(row, "barycenter")
    return {**asdict(p), "err": v["err"], "err_interval_95": v["err_interval_95"], "initial_err": v["initial_err"],
            **row, "best_of_mixture_barycenter": min(mix, bary),
            "outcome": {"mixture": _outcome_against(res, "mixture"), "barycenter": _outcome_against(res, "barycenter"),
                        "better_of_mixture_barycenter": _outcome_against(res, "mixture" if mix <= bary else "barycenter"),
                        "initial": v["initial_outcome"], "best_baseline": v["outcome"]},
            "family": res["selected"].get("family", res["spec"]["family"]["name"]),
            "summary_line": res["selected"].get("summary"),
            **size, "diverged": diverged(v["err"], v["initial_err"], size),
            "selected_iteration": res["selected"]["iteration"], "iterations_run": len(res["history"]),
            "events": res["events"], "warnings": res["warnings"], "seconds": seconds,
            "labels_used": res.get("labels_used"), "lengthscale": res["spec"]["model"]["lengthscale"]}


def run(preset: str = "quick", *, count: int | None = None, progress=None, workers: int = 1,
        problems_run: list[str] | None = None, previous: dict | None = None) -> dict:
    """Every problem of the preset; ``workers`` > 1 runs problems in that many processes (each
    job is deterministic from its spec, so the rows are the same as in one process).

    ``problems_run`` (keys or their ``pNN`` prefixes) runs only those problems; with ``previous``
    (an earlier results.json of the same preset and settings) every other row is taken from it
    and the rerun is recorded in ``reruns``: the way to refresh the rows a change can affect."""
    cfg = dict(PRESETS[preset])
    n = count or cfg.pop("count")
    cfg.pop("count", None)
    t_all = time.perf_counter()
    todo = problems(max(n, 1))[:n]
    if problems_run is not None:
        todo = _pick(todo, problems_run)
    if previous is not None:
        if previous.get("preset") != preset or previous.get("settings") != cfg:
            raise ValueError(f"the earlier results are of preset {previous.get('preset')!r} with settings "
                             f"{previous.get('settings')}, not {preset!r} with {cfg}: nothing to keep")
    fresh = {}
    if workers > 1:
        from lwl.experiments.report import in_processes

        for p, row in zip(todo, in_processes(run_problem, [(p, cfg) for p in todo], workers)):
            fresh[p.key] = row
            if progress:
                progress(p.key, row)
    else:
        from lwl.experiments.report import single_threaded

        for p in todo:
            with single_threaded():  # as in the worker processes: rows do not depend on --workers
                fresh[p.key] = run_problem(p, cfg)
            if progress:
                progress(p.key, fresh[p.key])
    wall = time.perf_counter() - t_all
    out = {"experiment": "robustness", "preset": preset, "settings": cfg, "workers": workers}
    if previous is None:
        rows = list(fresh.values())
        return {**out, "problems": rows, "summary": summary(rows), "wall_seconds": wall}
    from lwl.experiments.report import provenance, provenance_line

    kept = {r["key"] for r in previous["problems"]}
    rows = [fresh.get(r["key"], r) for r in previous["problems"]]
    rows += [row for key, row in fresh.items() if key not in kept]
    made = provenance_line(provenance()).removeprefix("Produced by ").rstrip(".")
    reruns = [*previous.get("reruns", []),
              {"problems": list(fresh), "seconds": wall, "why": f"rerun with --columns --resume by {made}"}]
    return {**out, "problems": rows, "summary": summary(rows), "wall_seconds": previous["wall_seconds"],
            "workers": previous.get("workers", 1), "reruns": reruns}


def pick_keys(known: list[str], names: list[str]) -> list[str]:
    """The problem keys of ``known`` named by ``names`` (whole keys or their ``pNN`` prefixes), in
    ``known``'s order; a ValueError naming ``--columns`` and the name that matches none."""
    picked = set()
    for name in names:
        hits = [k for k in known if k == name or k.split("-")[0] == name]
        if not hits:
            raise ValueError(f"--columns: no problem {name!r} in this preset (known: {', '.join(known)})")
        picked.update(hits)
    return [k for k in known if k in picked]


def _pick(todo: list[Problem], keys: list[str]) -> list[Problem]:
    """The problems named by ``keys`` (whole keys or their ``pNN`` prefixes), in the study's order."""
    picked = set(pick_keys([p.key for p in todo], keys))
    return [p for p in todo if p.key in picked]


def runaway_measures(res: dict) -> dict:
    """How far the kept distribution is from Q's moment-matched Gaussian N(mu_Q, C_Q): the
    largest eigenvalue of C_Q^{-1/2} C C_Q^{-1/2}, the smallest, and the mean offset
    |C_Q^{-1/2}(m - mu_Q)| (inf when a parameter is not finite)."""
    from lwl.measures.gaussian import moment_matched
    from lwl.q_samples import MetaTestSamples
    from lwl.spec import parse_job_spec

    spec = parse_job_spec(res["spec"])
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed)
    mu, C = moment_matched(np.concatenate(q.validation), q.point_weights(q.validation, q.weights))
    from lwl.measures import from_spec

    try:
        m, S = from_spec(res["distribution"]).mean_and_cov()
    except ValueError:  # a non-finite parameter
        m = S = np.full(1, np.nan)
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(S))):
        return {"cov_ratio_max": float("inf"), "cov_ratio_min": 0.0, "mean_offset": float("inf")}
    w, V = np.linalg.eigh(C)
    W = (V / np.sqrt(w)) @ V.T  # C_Q^{-1/2}
    ratios = np.linalg.eigvalsh(W @ S @ W)
    return {"cov_ratio_max": float(ratios.max()), "cov_ratio_min": float(ratios.min()),
            "mean_offset": float(np.linalg.norm(W @ (m - mu)))}


def diverged(err: float, initial_err: float, size: dict) -> bool:
    """A run diverged when its distribution ran away (non-finite, a covariance 1000x Q's or
    1e-9 of it, a mean 100 standard deviations of Q away) or its held-out Err is not finite or
    above both 1.5 and 1.5x the initial distribution's (predictions blown up)."""
    runaway = (size["cov_ratio_max"] > 1e3 or size["cov_ratio_min"] < 1e-9 or size["mean_offset"] > 100.0)
    return bool(runaway or not np.isfinite(err) or err > 1.5 * max(1.0, initial_err))


def _initial(row: dict) -> float:
    """Held-out Err of the distribution the design started from (``normal`` for a Gaussian)."""
    return row.get("initial_err", row["baselines"]["normal"])


def _strongest(row: dict, key: str) -> float:
    """A baseline's held-out Err: the better of the design's lengthscale and its own."""
    own = row.get("baselines_own_lengthscale") or {}
    return min(row["baselines"][key], own.get(key, float("inf")))


def summary(rows: list[dict]) -> dict:
    n = len(rows)

    def rate(key):
        return sum(r["err"] < _strongest(r, key) for r in rows) / n

    return {"problems": n, "diverged": sum(r["diverged"] for r in rows),
            "worse_than_initial": sum(r["err"] > _initial(r) for r in rows),
            "equal_to_initial": sum(r["err"] == _initial(r) for r in rows),
            "win_rate": {"initial": sum(r["err"] < _initial(r) for r in rows) / n, "normal": rate("normal"), "barycenter": rate("barycenter"), "mixture": rate("mixture"),
                         "better_of_mixture_barycenter": sum(r["err"] < r["best_of_mixture_barycenter"]
                                                             for r in rows) / n},
            "median_ratio_to_best_of_mixture_barycenter": float(np.median(
                [r["err"] / r["best_of_mixture_barycenter"] for r in rows])),
            "seconds_per_problem": float(np.mean([r["seconds"] for r in rows])),
            # over the evaluation's training draws: better / tie / worse beyond noise (lwl.evaluation.comparison)
            "outcomes": {key: {o: sum(r.get("outcome", {}).get(key) == o for r in rows)
                               for o in ("better", "tie", "worse")}
                         for key in ("mixture", "barycenter", "better_of_mixture_barycenter", "initial",
                                     "best_baseline")} if all("outcome" in r for r in rows) else None}


def markdown(doc: dict) -> str:
    s = doc["summary"]
    w = s["win_rate"]
    lines = [f"# Robustness of the default bilevel job ({doc['preset']} preset)", "",
             *([f"Family: {doc['settings']['family']} fitted to Q (the problems' starts do not apply).", ""]
               if doc["settings"].get("family", "gaussian") != "gaussian" else []),
             "Every job names only the oracle, Q, (for non-default starts) the family and "
             + ("the KRR lengthscale (Table 1's convention: half the RMS distance between Q's samples)"
                if doc["settings"].get("lengthscale_factor") else "no lengthscale (lwl selects it by validation)")
             + "; algorithm and evaluation are lwl's defaults"
             + (f" except {doc['settings']['iterations']} iterations" if doc["settings"].get("iterations") else "")
             + ". Err on Q's held-out samples, KRR with N = 1024.", "",
             f"- problems: {s['problems']}; diverged: {s['diverged']}",
             f"- design beats its initial distribution: {w.get('initial', w['normal']):.0%} (equal to it: "
             f"{s['equal_to_initial']}, worse: {s['worse_than_initial']})",
             f"- beats the barycenter: {w['barycenter']:.0%}; the mixture: {w['mixture']:.0%}; "
             f"the better of the two: {w['better_of_mixture_barycenter']:.0%}",
             f"- median Err ratio design / better of mixture and barycenter: "
             f"{s['median_ratio_to_best_of_mixture_barycenter']:.3f}",
             *([f"- over the evaluation's training draws per candidate (better / tie / worse beyond "
                f"noise): against the mixture {_counts(s['outcomes']['mixture'])}; the better of mixture and "
                f"barycenter {_counts(s['outcomes']['better_of_mixture_barycenter'])} "
                f"({s['outcomes']['better_of_mixture_barycenter']['better'] / s['problems']:.0%} better); the initial "
                f"distribution {_counts(s['outcomes']['initial'])}; the best baseline "
                f"{_counts(s['outcomes']['best_baseline'])}"] if s.get("outcomes") else []),
             f"- {s['seconds_per_problem']:.1f} s per problem on average; {doc['wall_seconds']:.0f} s in all"
             + (f" ({doc['workers']} processes)" if doc.get("workers", 1) > 1 else ""),
             *[f"- rerun alone after the study: {', '.join(r['problems'])} ({r['why']})"
               for r in doc.get("reruns", [])], "",
             *(["With the lengthscale selected with the design, each baseline counts with the better of "
                "the design's lengthscale and the one that validates best for it (shown as design's / own); "
                "the initial distribution, checked at every lengthscale by the design's selection, with "
                "the design's.", ""] if not doc["settings"].get("lengthscale_factor") else []),
             "| problem | start | scale | design | initial | barycenter | mixture | verdict | iterations (kept) | s |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def cell(r, key, value):
        own = (r.get("baselines_own_lengthscale") or {}).get(key)
        return f"{value:.3f}" + (f" / {own:.3f}" if own is not None else "")

    for r in doc["problems"]:
        b = r["baselines"]
        ok = "win" if r["err"] < r["best_of_mixture_barycenter"] else "loss"
        if "outcome" in r:
            ok = r["outcome"]["better_of_mixture_barycenter"] + (f" ({r['family']})" if r.get("family") else "")
        if r["diverged"]:
            ok = "DIVERGED"
        lines.append(f"| {r['key']} | {r['start']} | {r['scale']:g} | {r['err']:.3f} | {_initial(r):.3f} | "
                     f"{cell(r, 'barycenter', b['barycenter'])} | {cell(r, 'mixture', b['mixture'])} | {ok} | {r['iterations_run']} "
                     f"({r['selected_iteration']}) | {r['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def _counts(c: dict) -> str:
    return f"{c['better']} / {c['tie']} / {c['worse']}"


def write_outputs(doc: dict, out_dir) -> list:
    from lwl.experiments.report import pyplot, save_figure, write_tables

    out, _, paths = write_tables(doc, out_dir, markdown)
    plt = pyplot()
    rows = doc["problems"]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    best = np.array([r["best_of_mixture_barycenter"] for r in rows])
    design = np.array([r["err"] for r in rows])
    init = np.array([_initial(r) for r in rows])
    ax.scatter(best, design, label="design vs better of mixture/barycenter", s=18)
    ax.scatter(init, design, label="design vs initial", s=18, marker="x")
    lim = [min(best.min(), design.min(), init.min()) * 0.8, 1.05]
    ax.plot(lim, lim, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("baseline Err (held out)")
    ax.set_ylabel("design Err (held out)")
    ax.set_title("below the diagonal: the design wins")
    ax.legend(fontsize=7)
    save_figure(fig, out / "robustness.png")
    return [*paths, out / "robustness.png"]
