"""The paper's Table 1: bilevel design for function approximation (SM "Bilevel minimization
for function approximation"), with all six baselines, over independent runs.

Each column fixes an oracle, a dimension d, a kernel lengthscale l and an initial mean m_0.
Q has K = 10 Gaussian members N(m_k, C_k), m_k ~ N(0, I), C_k ~ Wishart_d(I, d + 1), drawn
once per column from a fixed seed (the paper fixes them once and for all); each run r then
uses job seed r for everything random: Q's 5000 samples per member, the design's samples, the
baselines' samples and coresets, and the final training sets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import wishart

from lwl.experiments.report import mean_2sd, save_figure


# The authors' code evaluates exp(-||x-x'||^2 / (2 l^2)) with the paper's l; the paper's
# numbers come from that code, so Table 1 runs lwl's exp(-||x-x'||^2 / l^2) at sqrt(2) l.
SQRT2 = 2.0**0.5
# Table 1's baselines, in the paper's column order (each registered in lwl.registry.BASELINES)
TABLE1_BASELINES = ("normal", "barycenter", "mixture", "uniform", "ncoreset", "acoreset")


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    oracle: str
    dim: int
    lengthscale: float
    initial_mean: float
    # learning rate for gradient_scale="relative" (lwl's departure, see docs/experiments.md)
    learning_rate: float
    oracle_params: dict = field(default_factory=dict)
    paper_ours: tuple[float, float] = (0.0, 0.0)  # paper's mean and 2 sd
    paper_baselines: dict = field(default_factory=dict)


# paper Table 1 (mean, 2 sd): Normal, Barycenter, Mixture, Uniform, nCoreSet, aCoreSet
_P = {
    "g1": [(.808, .015), (.546, .025), (.308, .011), (.983, .001), (.185, .000), (.501, .060)],
    "g2_d5": [(.811, .010), (.514, .012), (.372, .015), (.971, .002), (.247, .002), (.538, .028)],
    "g2_d8": [(.949, .003), (.782, .005), (.712, .011), (.993, .000), (.622, .002), (.782, .018)],
    "g3_d4": [(.937, .005), (.771, .008), (.471, .037), (.976, .000), (.295, .002), (.793, .048)],
    "g3_d5": [(.947, .003), (.784, .010), (.658, .011), (1.000, .000), (.494, .002), (.848, .034)],
    "g4": [(.029, .001), (.021, .001), (.022, .001), (.121, .001), (.098, .012), (.013, .000)],
}

COLUMNS = [
    Column("g1", "g1 (d=2)", "sobol_g", 2, 1.0, 0.0, 3.0, paper_ours=(.040, .010)),
    Column("g2_d5", "g2 (d=5)", "friedman1", 5, 3.0, 0.5, 10.0, paper_ours=(.169, .007)),
    Column("g2_d8", "g2 (d=8)", "friedman1", 8, 3.0, 0.5, 10.0, paper_ours=(.556, .007)),
    Column("g3_d4", "g3 (d=4)", "friedman2", 4, 2 / 1.1, 0.5, 10.0, paper_ours=(.276, .019)),
    Column("g3_d5", "g3 (d=5)", "friedman2", 5, 2 / 1.1, 0.5, 10.0, paper_ours=(.558, .009)),
    Column("g4", "g4 (d=10)", "kernel_expansion", 10, 5.0, 0.5, 3.0,
           oracle_params={"dim": 10, "centres": 1000, "lengthscale": 5.0 * SQRT2, "seed": 0},
           paper_ours=(.025, .000)),
]
COLUMNS = [Column(**{**c.__dict__, "paper_baselines": dict(zip(TABLE1_BASELINES, _P[c.key]))}) for c in COLUMNS]


# The authors' per-function settings (their config_sobolg/f1/f2/rkhs.py): initial mean m0 and the
# plain step size lr_initial (cosine-annealed to 0 over 1,000 iterations, N_k = 250, nugget
# 1e-3 -> 1e-7) -- ``--q authors`` and the ``paper-literal`` preset.
AUTHORS_M0 = {"g1": 0.5, "g2_d5": 0.5, "g2_d8": 0.5, "g3_d4": 0.5, "g3_d5": 0.5, "g4": 0.0}
AUTHORS_LR = {"g1": 1e-2, "g2_d5": 5e-4, "g2_d8": 5e-4, "g3_d4": 2.5e-7, "g3_d5": 2.5e-7, "g4": 5.0}
Q_SOURCES = ("lwl", "authors")


def authors_q_members(col: Column, K: int = 10) -> list[tuple[np.ndarray, np.ndarray]]:
    """The authors' test Gaussians for the column, regenerated as their driver.py draws them:
    torch's global generator seeded 42, float32 (their FLOAT64_FLAG = False), means
    Q_sigma * randn(J, d) and covariances from torch's Wishart(d + 1, scale_tril = Q_gamma I)
    (Q_sigma = Q_gamma = 1). For g4 their RKHS test function is built first and draws its 1,000
    coefficients and centres (rand(J), rand(J, d)) from the same generator, so those draws are
    replayed before Q's. Uses torch's own samplers, as their code does; the generator's state and
    the default dtype are restored afterwards."""
    import torch

    state, dtype = torch.get_rng_state(), torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        torch.manual_seed(42)
        if col.oracle == "kernel_expansion":
            torch.rand(1000)
            torch.rand(1000, col.dim)
        means = torch.randn(K, col.dim)
        wishart = torch.distributions.wishart.Wishart(torch.tensor([col.dim + 1.0]), scale_tril=torch.eye(col.dim))
        covs = wishart.sample((K,)).squeeze(1)
    finally:
        torch.set_rng_state(state)
        torch.set_default_dtype(dtype)
    return [(m, 0.5 * (C + C.T)) for m, C in zip(means.double().numpy(), covs.double().numpy())]


def initial_mean(col: Column, q: str = "lwl") -> float:
    """m0 of the column's Normal start: lwl's, or with ``q="authors"`` theirs (AUTHORS_M0)."""
    return AUTHORS_M0[col.key] if q == "authors" else col.initial_mean


def q_members(col: Column, K: int = 10, seed: int = 2025, q: str = "lwl") -> list[tuple[np.ndarray, np.ndarray]]:
    """The column's fixed test Gaussians: m_k ~ N(0, I), C_k ~ Wishart_d(I, d + 1); lwl's draw
    (``q="lwl"``) or the authors' (``q="authors"``, :func:`authors_q_members`)."""
    if q == "authors":
        return authors_q_members(col, K)
    if q != "lwl":
        raise ValueError(f"q: {q!r} is not one of {', '.join(Q_SOURCES)}")
    rng = np.random.default_rng([seed, col.dim, sum(map(ord, col.key))])
    d = col.dim
    out = []
    for _ in range(K):
        m = rng.standard_normal(d)
        C = np.atleast_2d(wishart(df=d + 1, scale=np.eye(d)).rvs(random_state=rng))
        out.append((m, 0.5 * (C + C.T)))
    return out


def column_spec(col: Column, *, seed: int, iterations: int = 1000, samples: int = 250,
                members: int = 10, size: int = 5000, validation: int = 500, train_size: int = 1024,
                sizes=(), baselines=TABLE1_BASELINES, learning_rate: float | None = None,
                gradient_scale: str = "relative", optimizer: str = "adaptive", family: str = "gaussian",
                q: str = "lwl", literal: bool = False) -> dict:
    """The job spec of one run of one column: lwl's defaults (``optimizer="adaptive"``, one
    configuration for every column), or the paper's plain schedule with the per-column step
    sizes of the earlier lwl table (``optimizer="paper"``, ``samples`` points per iteration).

    ``family`` picks the design family: the paper's Gaussian N(m0 1, I), or a family whose
    start lwl fits to Q (``mixture``: Q's members' Gaussians, the mixture baseline;
    ``pool``: Q's kernel density estimate), each on its defaults."""
    if family != "gaussian" and optimizer != "adaptive":
        raise ValueError(f"family: {family!r} needs lwl's adaptive optimiser, not the paper's schedule")
    col = Column(**{**col.__dict__, "initial_mean": initial_mean(col, q)})
    if literal:  # the authors' own schedule: their raw gradient and per-function step size
        learning_rate, gradient_scale = AUTHORS_LR[col.key], "absolute"
    return {
        "oracle": {"name": col.oracle, "params": dict(col.oracle_params)},
        "test_distributions": {
            "members": [{"gaussian": {"mean": m.tolist(), "cov": C.tolist()}, "size": size}
                        for m, C in q_members(col, members, q=q)],
            "validation_per_member": validation,
        },
        "family": FAMILY_BLOCKS[family](col),
        "model": {"name": "krr", "kernel": "squared_exponential", "lengthscale": col.lengthscale * SQRT2},
        "algorithm": ({"name": "bilevel", "iterations": iterations} if optimizer == "adaptive" else
                      {"name": "bilevel", "optimizer": "paper", "iterations": iterations,
                       "samples_per_iteration": samples, "learning_rate": learning_rate or col.learning_rate,
                       "final_learning_rate": 0.0, "nugget": 1e-3, "final_nugget": 1e-7,
                       "gradient_scale": gradient_scale, **({"keep": "last"} if literal else {})}),
        "evaluation": {"train_size": train_size, "ridge": 1e-3, "baselines": list(baselines),
                       "sizes": list(sizes)},
        "seed": seed,
        "device": "cpu",
    }


FAMILY_BLOCKS = {  # the family block of a column's job spec, per --family
    "gaussian": lambda col: {"name": "gaussian", "mean": [col.initial_mean] * col.dim,
                             "cov": np.eye(col.dim).tolist()},
    "mixture": lambda col: {"name": "mixture"},
    "pool": lambda col: {"name": "pool"},
    # lwl's default when a spec names no family (issue #29): the Gaussian and the mixture
    # family compete on validation, Q's mixture itself among the candidates
    "auto": lambda col: {"name": "auto"},
}


# -- presets and the study runner ------------------------------------------------------------

PRESETS = {
    # the paper's size: 10 runs x 1000 iterations, K = 10, M = 5000 (500 validation); lwl's
    # default optimiser with one configuration for all columns
    "paper": dict(runs=10, iterations=1000, members=10, size=5000, validation=500,
                  sizes=(16, 32, 64, 128, 256, 512, 1024)),
    # the earlier table: the paper's plain schedule, N_k = 250, a step size per column
    "paper-schedule": dict(runs=10, iterations=1000, members=10, size=5000, validation=500,
                           sizes=(16, 32, 64, 128, 256, 512, 1024), optimizer="paper"),
    # the authors' code literally: N_k = 250, 1000 plain steps, their raw gradient and step size per
    # test function (AUTHORS_LR), nugget 1e-3 -> 1e-7
    "paper-literal": dict(runs=10, iterations=1000, members=10, size=5000, validation=500,
                          sizes=(16, 32, 64, 128, 256, 512, 1024), optimizer="paper", literal=True),
    # CI-sized: same Q and model, fewer iterations and runs
    "quick": dict(runs=2, iterations=300, members=10, size=2000, validation=500,
                  sizes=(64, 256, 1024)),
    # seconds: the tests' preset (few iterations, small Q, N = 64)
    "smoke": dict(runs=1, iterations=30, members=3, size=300, validation=100, train_size=64, sizes=(32,)),
}


def run(preset: str = "quick", *, runs: int | None = None, columns: list[str] | None = None,
        progress=None, family: str = "gaussian", q: str = "lwl") -> dict:
    """Run the study with one design family and return its results document (see
    :func:`write_outputs`); ``q``: lwl's test Gaussians or the authors' (:func:`q_members`)."""
    q_source = q  # ``q`` is Q's samples further down
    import time

    from lwl.evaluation import baselines as bl
    from lwl.q_samples import MetaTestSamples
    from lwl.runner import run_job
    from lwl.spec import parse_job_spec

    if family not in FAMILY_BLOCKS:
        raise ValueError(f"family: unknown family {family!r}; known: {', '.join(FAMILY_BLOCKS)}")
    cfg = dict(PRESETS[preset])
    n_runs = runs or cfg.pop("runs")
    cfg.pop("runs", None)
    chosen = [c for c in COLUMNS if columns is None or c.key in columns]
    if columns and len(chosen) != len(set(columns)):
        known = [c.key for c in COLUMNS]
        raise ValueError(f"columns: unknown column in {columns}; known: {known}")
    t_all = time.perf_counter()
    if q_source not in Q_SOURCES:
        raise ValueError(f"q: {q_source!r} is not one of {', '.join(Q_SOURCES)}")
    out = {"experiment": "table1", "preset": preset, "family": family, "runs": n_runs, "settings": cfg,
           "columns": {}}
    if q_source != "lwl":
        out["q"] = q_source
    for col in chosen:
        records = []
        for r in range(n_runs):
            spec = parse_job_spec(column_spec(col, seed=r, family=family, q=q_source, **cfg))
            res = run_job(spec)
            records.append({
                "seed": r,
                "err": res["evaluation"]["err"],
                "err_vs_n": res["evaluation"]["err_vs_n"],
                # per iteration: Err of the inner objective (KRR with the annealed nugget
                # sigma_k^2 on the iteration's batch); per check: Err of the evaluation's model
                "validation_err": [h["validation_err"] for h in res["history"]],
                "checks": [[c["iteration"], c["err"]] for c in res["checks"]],
                "distribution": res["distribution"],
                "kept_iteration": res["selected"]["iteration"],
                "design_seconds": res["timings"]["design_seconds"],
                "evaluation_seconds": res["timings"]["evaluation_seconds"],
            })
            if progress:
                progress(col.key, r, res)
        q = MetaTestSamples.from_spec(spec.test_distributions, 0)
        names = list(records[0]["err"])
        summary = {n: mean_2sd([rec["err"][n] for rec in records]) for n in names}
        out["columns"][col.key] = {
            "title": col.title, "oracle": col.oracle, "dim": col.dim, "lengthscale": col.lengthscale,
            "initial_mean": initial_mean(col, q_source),
            "learning_rate": AUTHORS_LR[col.key] if cfg.get("literal") else col.learning_rate,
            "sizes": res["evaluation"]["sizes"],
            "summary": {n: {"mean": m, "two_sd": s} for n, (m, s) in summary.items()},
            "paper": {"optimized": col.paper_ours, **col.paper_baselines},
            "barycenter_cov": bl.barycenter(q).cov.tolist(),
            "mixture_cov": bl.mixture(q).mean_and_cov()[1].tolist(),
            "runs": records,
        }
    out["wall_seconds"] = time.perf_counter() - t_all
    return out


ROW_NAMES = {"optimized": "Ours (bilevel)", "initial": "Initial (θ⁰)", "normal": "Normal", "barycenter": "Barycenter",
             "mixture": "Mixture", "uniform": "Uniform", "ncoreset": "nCoreSet", "acoreset": "aCoreSet"}


def row_names(doc: dict) -> dict[str, str]:
    """Row labels of a results document: one design row per family, then the baselines."""
    family = doc.get("family", "gaussian")
    if "families" in doc:  # a merged document (:func:`merge`)
        designs = {design_key(f): f"Ours ({f} family)" for f in doc["families"]}
    else:
        designs = {"optimized": "Ours (bilevel)" if family == "gaussian" else f"Ours ({family} family)"}
    names = {**designs, **{k: v for k, v in ROW_NAMES.items() if k != "optimized"}}
    if family != "gaussian" and "families" not in doc:  # the normal baseline is Q's moment-matched Gaussian
        names["normal"] = "Normal (Q's moments)"
    return names


def design_key(family: str) -> str:
    return "optimized" if family == "gaussian" else f"optimized_{family}"


def markdown(doc: dict) -> str:
    cols = doc["columns"]
    keys = list(cols)
    families = doc.get("families", [doc.get("family", "gaussian")])
    lines = [f"# Table 1 — bilevel design for function approximation ({doc['preset']} preset, "
             f"{', '.join(families)} famil{'ies' if len(families) > 1 else 'y'})", "",
             f"Err = sqrt(E_Q(G)/E_Q(0)) on held-out Q samples, KRR with N = "
             f"{doc['settings'].get('train_size', 1024)} training samples; "
             f"mean ± 2 sd over {doc['runs']} independent runs (seeds 0..{doc['runs'] - 1}). "
             "In brackets: the paper's value.", "",
             "| | " + " | ".join(cols[k]["title"] for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for name, label in row_names(doc).items():
        if name not in cols[keys[0]]["summary"]:
            continue
        cells = []
        for k in keys:
            s = cols[k]["summary"][name]
            p = cols[k]["paper"].get(name)
            best = min(v["mean"] for v in cols[k]["summary"].values())
            val = f"{s['mean']:.3f} ± {s['two_sd']:.3f}"
            cells.append((f"**{val}**" if s["mean"] == best else val) + (f" ({p[0]:.3f})" if p else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if len(families) > 1:
        lines += ["", "Best lwl family per column against the six baselines (Normal, Barycenter, Mixture, "
                  "Uniform, nCoreSet, aCoreSet): *separated* when the design's mean + 2 sd lies below "
                  "every baseline's mean − 2 sd.", ""]
        lines += [f"- {cols[k]['title']}: {separation(cols[k]['summary'], families)}" for k in keys]
    for f in families:
        runs = [r for k in keys for r in cols[k]["runs_by_family"][f]] if len(families) > 1 else \
            [r for k in keys for r in cols[k]["runs"]]
        lines += ["", f"Runtime ({f} family): bilevel design {np.mean([r['design_seconds'] for r in runs]):.2f} s "
                  f"per run on average (at most {doc['settings']['iterations']} iterations)."]
    if "wall_seconds" in doc:
        parts = doc.get("parts", 1)
        side = f" ({parts} processes side by side over --columns, joined)" if parts > 1 else ""
        lines += [f"{doc['wall_seconds']:.0f} s wall for the whole preset on this machine{side}.", ""]
    lines += ["Settings per column (lwl departs from the paper where marked):", "",
              "| column | oracle | d | paper l | spec lengthscale | m0 | step size t_0 |",
              "|---|---|---|---|---|---|---|"]
    adaptive = doc["settings"].get("optimizer", "adaptive") == "adaptive"
    for k in keys:
        c = cols[k]
        literal = doc["settings"].get("literal", False)
        step = ("lwl default (adaptive)" if adaptive else
                f"{c['learning_rate']:g} (the authors', raw gradient)" if literal else f"{c['learning_rate']:g} (relative)*")
        lines.append(f"| {c['title']} | {c['oracle']} | {c['dim']} | {c['lengthscale']:.4g} | "
                     f"{c['lengthscale'] * SQRT2:.4g}* | {c['initial_mean']} | {step} |")
    notes = DEPARTURES if adaptive else DEPARTURES_LITERAL if doc["settings"].get("literal") else DEPARTURES_SCHEDULE
    if doc.get("q") == "authors":
        notes = notes.replace(_LWL_Q, _AUTHORS_Q)
    lines += ["", notes]
    return "\n".join(lines) + "\n"


_LWL_Q = """- **Q.** The paper's 10 test Gaussians cannot be had; lwl draws its own (means N(0, I),
  covariances Wishart_d(I, d+1), fixed per column from seed 2025), so baseline errors differ
  from the paper's where Q is easier or harder."""

_AUTHORS_Q = """- **Q: the authors'.** The 10 test Gaussians of the authors' driver.py, regenerated with their
  seed (42) and torch's samplers in float32 (means randn, Wishart_d(I, d+1) covariances; for g4
  after the draws of their RKHS function); lwl samples its own 5,000 points from each. Their m0
  per function (1/2; 0 for g4, where lwl's own table uses 0 for g1 and 1/2 for g4). g4's function
  is lwl's realisation of the same construction (1,000 centres), not theirs."""

_Q_NOTE = _LWL_Q + """
- **Kernel convention.** The paper writes k(x, x') = exp(-||x - x'||^2 / l^2) with
  l = 1, 3, 2/1.1, 5; the authors' code evaluates exp(-||x - x'||^2 / (2 l^2)) with those
  numbers, and the paper's table comes from that code. lwl's kernel is the paper's formula,
  so Table 1 passes lengthscale sqrt(2) l (the code's kernel; g4's oracle too, which uses the
  same kernel)."""

DEPARTURES_LITERAL_HEAD = """\\* The authors' schedule literally (``--preset paper-literal``): N_k = 250, 1,000 plain steps
theta <- theta - t_k grad on their raw gradient with their step size per function (cosine to 0),
nugget sigma^2 1e-3 -> 1e-7, the last iterate returned (lwl's validation checks are recorded, not
used). What still departs:
"""

_RUNS_NOTE = """- **Runs.** Each run re-draws everything random (Q's samples, design samples, baselines,
  coresets' random starts, final training sets) from its own seed.
"""

DEPARTURES = """\\* Departures from the paper's stated settings:

- **Optimiser: one configuration for all six columns.** Every run is the job spec with no
  ``algorithm`` block: lwl's adaptive optimiser (Adam in Q's whitened coordinates, validation
  checks, best iterate; docs/method/bilevel.md) with N_k = 1024, the final training size (the paper:
  N_k = 250 and plain steps, in the authors' code with a step size per column).
  ``--preset paper-schedule`` runs the paper's plain schedule with the per-column step sizes
  of lwl's earlier table.
""" + _Q_NOTE + "\n" + _RUNS_NOTE

DEPARTURES_SCHEDULE = """\\* Departures from the paper's stated settings:

- **Step size.** The paper states one cosine-annealed step size 1e-2 -> 0 for every column,
  while the authors' code uses per-function rates (1e-2, 5e-4, 2.5e-7, 5.0) because the raw
  gradient of E_Q scales with the square of the oracle's outputs (g3 is O(10^3)). lwl descends
  1/2 Err^2 instead (``gradient_scale: relative``: the gradient divided by E_Q(0) on the
  validation samples), so one scale-free step size serves every column; the value used per
  column is in the table above. ``gradient_scale: absolute`` gives the paper's raw gradient.
""" + _Q_NOTE + """ At l itself every distribution is worse on lwl's Q (seed 0, 1000 iterations:
  g1 mixture 0.449 and ours 0.092; g2 d=5 mixture 0.526 and ours 0.329).
""" + _RUNS_NOTE




def separation(summary: dict, families: list[str]) -> str:
    """Which family is best in a column and whether its 2-sd interval clears every baseline's."""
    best = min(families, key=lambda f: summary[design_key(f)]["mean"])
    d = summary[design_key(best)]
    top = d["mean"] + d["two_sd"]
    closest = min((b for b in TABLE1_BASELINES if b in summary), key=lambda b: summary[b]["mean"] - summary[b]["two_sd"])
    c = summary[closest]
    verdict = "separated" if top < c["mean"] - c["two_sd"] else "NOT separated"
    return (f"{best} {d['mean']:.3f} ± {d['two_sd']:.3f} against the closest baseline, "
            f"{ROW_NAMES[closest]} {c['mean']:.3f} ± {c['two_sd']:.3f}: {verdict}")


def merge(docs: list[dict]) -> dict:
    """One table from single-family documents of the same preset, runs and columns.

    The baselines are taken from the Gaussian document (its Normal is the paper's N(m0 1, I));
    every other baseline must agree between documents run by run, since a run's baselines depend
    only on its seed and Q (checked, so tables made by different code are never mixed)."""
    by_family = {d.get("family", "gaussian"): d for d in docs}
    if len(by_family) != len(docs):
        raise ValueError("merge: two documents of the same family")
    if "gaussian" not in by_family:
        raise ValueError("merge: the Gaussian family's document is needed (its baselines are the table's)")
    base = by_family["gaussian"]
    keys = [k for k in base["columns"] if all(k in d["columns"] for d in docs)]
    for d in docs:
        if (d["preset"], d["runs"]) != (base["preset"], base["runs"]):
            raise ValueError("merge: documents of different presets or run counts")
    out = {"experiment": "table1", "preset": base["preset"], "families": list(by_family), "runs": base["runs"],
           "settings": base["settings"], "columns": {}}
    for k in keys:
        col = {key: v for key, v in base["columns"][k].items() if key != "runs"}
        col["summary"] = dict(base["columns"][k]["summary"])
        col["runs_by_family"] = {f: d["columns"][k]["runs"] for f, d in by_family.items()}
        for f, d in by_family.items():
            for r0, r in zip(base["columns"][k]["runs"], d["columns"][k]["runs"]):
                for b in TABLE1_BASELINES:
                    if b != "normal" and b in r0["err"] and not np.isclose(r0["err"][b], r["err"][b], rtol=1e-9):
                        raise ValueError(f"merge: column {k} seed {r['seed']}: baseline {b} differs between "
                                         f"the gaussian and {f} documents ({r0['err'][b]} vs {r['err'][b]})")
            col["summary"][design_key(f)] = d["columns"][k]["summary"]["optimized"]
        out["columns"][k] = col
    return out


def join(docs: list[dict]) -> dict:
    """One document from runs of the same family, preset and run count over different columns
    (a preset split across processes with ``--columns``), columns in the table's order. The
    wall time is the longest part's (the parts ran side by side)."""
    first = docs[0]
    for d in docs[1:]:
        for key in ("preset", "runs", "settings"):
            if d.get(key) != first.get(key):
                raise ValueError(f"join: documents of different {key}")
        if d.get("family", "gaussian") != first.get("family", "gaussian"):
            raise ValueError("join: documents of different families (use merge)")
    seen: dict[str, int] = {}
    for i, d in enumerate(docs):
        for k in d["columns"]:
            if k in seen:
                raise ValueError(f"join: column {k} is in documents {seen[k]} and {i}")
            seen[k] = i
    cols = {c.key: docs[seen[c.key]]["columns"][c.key] for c in COLUMNS if c.key in seen}
    return {**{k: v for k, v in first.items() if k != "columns"}, "columns": cols,
            "wall_seconds": max(d.get("wall_seconds", 0.0) for d in docs),
            "parts": sum(d.get("parts", 1) for d in docs)}


def design_figure(doc: dict, path) -> None:
    """The designed distribution of each column's first run against Q, in the two leading
    principal directions of Q: Q's samples (grey), the design's samples, and for a mixture its
    component means (area ~ weight), for a pool the 200 heaviest pool points (area ~ weight)."""
    from lwl.experiments.report import pyplot
    from lwl.measures import Mixture, WeightedPool, from_spec

    plt = pyplot()
    cols = doc["columns"]
    fig, axes = plt.subplots(1, len(cols), figsize=(3.2 * len(cols), 3.3), squeeze=False)
    for ax, (k, c) in zip(axes[0], cols.items()):
        col = next(x for x in COLUMNS if x.key == k)
        rng = np.random.default_rng(0)
        q = np.concatenate([rng.multivariate_normal(m, C, 300)
                            for m, C in q_members(col, doc["settings"].get("members", 10))])
        centre = q.mean(0)
        _, vecs = np.linalg.eigh(np.cov(q, rowvar=False))
        basis = vecs[:, ::-1][:, :2] if col.dim > 1 else np.ones((1, 1))
        proj = (lambda x: (np.asarray(x) - centre) @ basis)
        ax.scatter(*proj(q).T[:2], s=2, color="0.7", label="Q")
        design = from_spec(c["runs"][0]["distribution"])
        ax.scatter(*proj(design.sample(1000, 0)).T[:2], s=2, color="C0", alpha=0.5, label="design")
        if isinstance(design, Mixture):
            means = np.array([comp.mean_and_cov()[0] for comp in design.components])
            ax.scatter(*proj(means).T[:2], s=400 * design.weights, color="C3", edgecolor="k", label="components")
        elif isinstance(design, WeightedPool):
            top = np.argsort(design.weights)[::-1][:200]
            ax.scatter(*proj(design.points[top]).T[:2], s=2000 * design.weights[top], color="C3",
                       edgecolor="k", lw=0.3, label="pool weights")
        ax.set_title(c["title"], fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][0].legend(fontsize=6, markerscale=2)
    fig.suptitle(f"{doc.get('family', 'gaussian')} family: design (run 0) against Q, leading principal plane",
                 fontsize=9)
    save_figure(fig, path)


def write_outputs(doc: dict, out_dir) -> list:
    """results.json, results.md and the PNG figures; returns the written paths."""
    from lwl.experiments.report import pyplot, write_tables
    from lwl.measures import from_spec

    out, _, _ = write_tables(doc, out_dir, markdown)
    plt = pyplot()
    cols = doc["columns"]
    keys = list(cols)
    paths = [out / "results.json", out / "results.md"]

    # convergence of the validation Err over iterations (paper Fig. 2 left, Fig. 9 left): the
    # inner objective at the annealed nugget (what the gradient descends; it falls with the
    # nugget) and, where recorded, the checks (the evaluation's model: what the run keeps)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3), squeeze=False)
    for ax, k in zip(axes[0], keys):
        # one curve per run: the adaptive optimiser stops runs at different iterations
        for i, r in enumerate(cols[k]["runs"]):
            ax.plot(np.arange(len(r["validation_err"])), r["validation_err"], color="C0", lw=0.6, alpha=0.5,
                    label="inner objective (σ_k²)" if i == 0 else None)
            checks = np.array([c for c in r.get("checks", []) if c[0] > 0], dtype=float).reshape(-1, 2)
            ax.plot(checks[:, 0], checks[:, 1], color="C3", lw=0.8, alpha=0.7, marker=".", ms=2,
                    label="checks" if i == 0 and len(checks) else None)
        ax.set_title(cols[k]["title"])
        ax.set_xlabel("iteration")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("validation Err")
    axes[0][0].legend(fontsize=6)
    paths.append(save_figure(fig, out / "convergence.png"))

    # Err vs N for every distribution (paper Fig. 2 centre, Figs. 9-10)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.2), squeeze=False)
    for ax, k in zip(axes[0], keys):
        sizes = cols[k]["sizes"]
        for i, name in enumerate(cols[k]["runs"][0]["err_vs_n"]):
            curves = np.array([r["err_vs_n"][name] for r in cols[k]["runs"]])
            m = curves.mean(0)
            s = 2 * curves.std(0, ddof=1) if len(curves) > 1 else 0 * m
            ax.plot(sizes, m, marker="o", ms=3, color=f"C{i}", label=row_names(doc)[name])
            ax.fill_between(sizes, m - s, m + s, color=f"C{i}", alpha=0.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(cols[k]["title"])
        ax.set_xlabel("N")
    axes[0][0].set_ylabel("Err")
    axes[0][-1].legend(fontsize=6)
    paths.append(save_figure(fig, out / "err_vs_n.png"))

    # learned covariance vs barycenter and mixture covariances (paper Figs. 11-14)
    fig, axes = plt.subplots(3, len(keys), figsize=(2.6 * len(keys), 7.5), squeeze=False)
    for j, k in enumerate(keys):
        mats = [("learned", from_spec(cols[k]["runs"][0]["distribution"]).mean_and_cov()[1]),
                ("barycenter", np.array(cols[k]["barycenter_cov"])),
                ("mixture", np.array(cols[k]["mixture_cov"]))]
        for i, (label, mat) in enumerate(mats):
            ax = axes[i][j]
            im = ax.imshow(mat, cmap="viridis")
            fig.colorbar(im, ax=ax, fraction=0.046)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{cols[k]['title']}\n{label}" if i == 0 else label, fontsize=8)
    paths.append(save_figure(fig, out / "covariances.png"))
    design_figure(doc, out / "design.png")
    paths.append(out / "design.png")
    return paths


def write_merged(docs: list[dict], out_dir) -> list:
    """results.json and results.md of :func:`merge`."""

    from lwl.experiments.report import write_tables

    return write_tables(merge(docs), out_dir, markdown)[2]


DEPARTURES_LITERAL = DEPARTURES_LITERAL_HEAD + "\n" + _Q_NOTE + "\n" + _RUNS_NOTE
