"""The paper's radiative-transport study (SM RTE; Table 3, Fig. 5 and the runtime figure).

For each Knudsen number eps in {1/8, 2, 8}: Q = K = 3 log-GPs a' = exp(f_k + KLE(alpha=2, tau=1,
sigma_k)), sigma_k = 1, 2, 3, with means f_k drawn once from KLE(2, 1, 1) and fixed; the
training distribution is N particles a_q = exp(L c_q) moved by
:class:`lwl.design.particles.ParticleAMADesign` from c ~ N(0, 1e-6). Reported per eps and N, over
``runs`` trials (seeds 0..runs-1), with 95% Student-t intervals: the relative OOD error of the
DeepONet trained on the initial particles, on the optimised particles, and the benchmark trained
on N samples of the Q mixture; and the wall time of the particle AMA.

lwl's choices (docs/method/particles.md): the OOD error is measured on fresh held-out samples of each
member (the paper reuses the N optimisation samples); the initial step size is a preset value
(``step_size``) instead of the paper's 1e-6, which in lwl's normalisation of the bound (L^2 norms
with trapezoid weights) would not move the particles; it is halved on failure and stays reduced,
as in the paper.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from lwl.design.particles import ParticleAMADesign
from lwl.experiments.operators import bound_rows, bound_table, relative_ood_error, t_interval, zero_error
from lwl.experiments.report import pyplot, save_figure, write_tables
from lwl.measures import KLEGaussian
from lwl.models import DeepONetRegressor
from lwl.oracles import make_oracle
from lwl.runner import iterate

Q_SEED = 2025
KNUDSEN = {"1/8": 0.125, "2": 2.0, "8": 8.0}
PAPER = {"1/8": (8.65e-2, 1.55e-2, 1.62e-2), "2": (8.76e-2, 1.29e-2, 1.24e-2), "8": (9.09e-2, 1.13e-2, 1.16e-2)}

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(grid=11, modes=5, sizes=[10], runs=2, iterations=2, epochs=150, n_test=20, step_size=0.01,
                 knudsen=["2"], branch=[64, 32], trunk=[64, 32], validation=0.0),
    "quick": dict(grid=21, modes=10, sizes=[20, 40], runs=2, iterations=3, epochs=500, n_test=50, step_size=0.01,
                  knudsen=["1/8", "2", "8"], branch=[100, 100, 100, 64, 32], trunk=[100, 100, 100, 64, 32],
                  validation=0.0),
    "paper": dict(grid=51, modes=20, sizes=[30, 60, 90, 120], runs=10, iterations=10, epochs=5000, n_test=120,
                  step_size=0.01, knudsen=["1/8", "2", "8"], branch=[100, 100, 100, 64, 32],
                  trunk=[100, 100, 100, 64, 32], validation=0.2),
}


class TestMeasure:
    """The K = 3 fixed-mean log-GP test members of SM RTE on the grid's nodes."""

    def __init__(self, grid: int, sigmas=(1.0, 2.0, 3.0)):
        self.members = [KLEGaussian("sine2d", grid, alpha=2.0, tau=1.0, sigma=s, endpoints=True) for s in sigmas]
        self.means = KLEGaussian("sine2d", grid, alpha=2.0, tau=1.0, sigma=1.0, endpoints=True).sample(
            len(sigmas), [Q_SEED, 0])

    def sample(self, k: int, n: int, seed) -> np.ndarray:
        return np.exp(self.means[k] + self.members[k].sample(n, seed))

    def mixture(self, n: int, seed) -> np.ndarray:
        rng = np.random.default_rng(seed)
        which = rng.integers(0, len(self.members), size=n)
        return np.stack([self.sample(int(k), 1, rng)[0] for k in which])


def _factory(cfg, grid):
    def make(seed):
        return DeepONetRegressor([grid * grid, *cfg["branch"]], [2, *cfg["trunk"]], lr=1e-3, max_iters=cfg["epochs"],
                                 validation_fraction=cfg["validation"], patience=cfg["epochs"],
                                 validation_every=10, seed=seed)
    return make


def test_set(oracle, tq: TestMeasure, n_test: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_test`` labelled held-out samples of each member of Q (fixed seeds)."""
    out = []
    for k in range(len(tq.members)):
        U = tq.sample(k, n_test, [Q_SEED, 7, k])
        out.append((U, np.asarray(oracle.label(U))))
    return out


def run_one(oracle, tq: TestMeasure, tests, cfg, N: int, seed: int, progress=None) -> dict[str, Any]:
    grid = cfg["grid"]
    z, w = oracle.output_grid(grid * grid)  # the nodes and their trapezoid weights
    factory = _factory(cfg, grid)
    q = [tq.sample(k, N, [seed, 5, k]) for k in range(len(tq.members))]
    design = ParticleAMADesign(oracle, q, factory, z, particles=N, modes=cfg["modes"], iterations=cfg["iterations"],
                               step_size=cfg["step_size"], seed=seed, select=cfg.get("select", "bound"))
    t0 = time.perf_counter()
    errors = []

    def record(state) -> None:
        errors.append(relative_ood_error(design.model(state), tests, w))
        if progress:
            progress(f"eps {oracle.knudsen:g} N {N} run {seed} iteration {len(errors) - 1}: {errors[-1]:.4f}")

    state = iterate(design, oracle, design.init(), after_step=record)
    seconds = time.perf_counter() - t0
    U = tq.mixture(N, [seed, 6])
    bench = factory(seed).fit(U, np.asarray(oracle.label(U)), z)
    # the returned model: the last (the paper's) or the best validated one (select="validation")
    optimized = relative_ood_error(design.selected_model(state), tests, w)
    return {"seed": seed, "N": N, "errors": errors, "initial": errors[0], "optimized": optimized,
            "selected": design.result(state).get("selected"),
            "benchmark": relative_ood_error(bench, tests, w), "seconds": seconds,
            "objectives": [r["objective"] for r in state.history],
            "step_sizes": [r.get("step_size") for r in state.history], "labels_used": state.labels_used,
            "particles": design.queries(state)[:4] if seed == 0 else None}


# the settings a trial's numbers depend on: trials of an earlier run with the same ones are reused
TRIAL_SETTINGS = ("grid", "modes", "iterations", "epochs", "n_test", "step_size", "branch", "trunk", "validation",
                  "select")
SETTING_DEFAULTS = {"select": "bound"}  # settings added later: what earlier results were made with


def reusable_trials(previous: dict | None, cfg: dict) -> dict[tuple[str, int, int], dict]:
    """Trials of an earlier results.json (``previous``) keyed by (eps name, N, seed), if it was
    made with the same :data:`TRIAL_SETTINGS`; else none. Lets a paper-size study, days on two
    cores, grow by trials or be resumed after an interruption."""
    if not previous or previous.get("study") != "rte":
        return {}
    if any(previous.get("config", {}).get(k, SETTING_DEFAULTS.get(k)) != cfg.get(k, SETTING_DEFAULTS.get(k))
           for k in TRIAL_SETTINGS):
        return {}
    return {(name, int(n), int(t["seed"])): t for name, per_n in previous.get("results", {}).items()
            for n, r in per_n.items() for t in r.get("trials", [])}


def summarise(trials: list[dict]) -> dict[str, Any]:
    """Means and 95% Student-t half-widths over trials (half-width None for a single trial)."""
    def interval(key):
        mean, ci = t_interval([t[key] for t in trials])
        return {"mean": mean, "ci95": ci if len(trials) > 1 else None}

    return {**{k: interval(k) for k in ("initial", "optimized", "benchmark", "seconds")},
            "trials": [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in t.items()
                        if k != "particles"} for t in trials]}


def run(preset: str = "quick", *, runs: int | None = None, knudsen: list[str] | None = None,
        sizes: list[int] | None = None, progress=None, previous: dict | None = None,
        checkpoint=None, select: str = "bound") -> dict[str, Any]:
    """Table 3 for ``preset`` (optionally a subset of eps and N, or another number of trials).
    Trials found in ``previous`` (an earlier results.json, same settings) are reused;
    ``checkpoint(doc)`` is called after every trial with the results so far."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    cfg = dict(PRESETS[preset])
    cfg["select"] = select
    if runs is not None:
        cfg["runs"] = runs
    if sizes:
        cfg["sizes"] = sorted(sizes)
    if knudsen:
        unknown = [k for k in knudsen if k not in KNUDSEN]
        if unknown:
            raise ValueError(f"knudsen: choose from {', '.join(KNUDSEN)}, got {unknown}")
        cfg["knudsen"] = list(knudsen)
    reuse = reusable_trials(previous, cfg)
    eps_list = cfg["knudsen"]
    tq = TestMeasure(cfg["grid"])
    doc: dict[str, Any] = {"study": "rte", "preset": preset, "config": cfg, "results": {}, "paper": PAPER,
                           "seconds": 0.0}
    t0 = time.perf_counter()
    figures: dict[str, Any] = {"tq": tq, "examples": {}}
    for name in eps_list:
        oracle = make_oracle({"name": "rte", "params": {"knudsen": KNUDSEN[name], "grid": cfg["grid"],
                                                        "directions": 12}})
        tests = test_set(oracle, tq, cfg["n_test"])
        figures["examples"][name] = tests[2][0][0], tests[2][1][0]
        doc.setdefault("zero_error", {})[name] = zero_error(tests, oracle.output_grid(cfg["grid"] ** 2)[1])
        doc["results"][name] = per_n = {}
        for N in cfg["sizes"]:
            trials = []
            for r in range(cfg["runs"]):
                trial = reuse.get((name, N, r))
                if trial is None:
                    trial = run_one(oracle, tq, tests, cfg, N, r, progress)
                else:
                    doc["reused_trials"] = doc.get("reused_trials", 0) + 1
                    for _ in trial["errors"]:  # the ticks its iterations would have taken
                        if progress:
                            progress(f"eps {name} N {N} run {r}: reused from the earlier results")
                trials.append(trial)
                if trial.get("particles") is not None:
                    figures.setdefault("particles", {})[f"{name}/{N}"] = trial["particles"]
                per_n[str(N)] = summarise(trials)
                doc["seconds"] = time.perf_counter() - t0
                if checkpoint:
                    checkpoint({**doc, "_figures": figures})
    doc["seconds"] = time.perf_counter() - t0
    doc["_figures"] = figures
    return doc


def markdown(doc: dict) -> str:
    cfg = doc["config"]
    N = str(max(cfg["sizes"]))
    lines = [f"# Particle AMA, radiative transport (Table 3), preset `{doc['preset']}`", "",
             f"Grid {cfg['grid']}^2 x 12 directions, {cfg['modes']}^2 sine coefficients per particle, "
             f"{cfg['runs']} trials asked (the table says how many are done), {cfg['iterations']} AMA iterations at most, DeepONet {cfg['epochs']} epochs; "
             f"wall {doc['seconds']:.0f} s on this machine. \"optimised\" is the model the run returns: "
             + ("the last iterate's (the paper's particle AMA)." if cfg.get("select", "bound") == "bound" else
                "the best validated iterate's (validated particle AMA, `--select validation`)."), "",
             "Metrics compared: the columns and the paper's Table 3 are the same rooted relative OOD error "
             "(SM eqn app_ntd_rel_ood_error, members weighted equally); lwl measures it on fresh held-out "
             "samples of each member, the paper on the N optimisation samples.", "",
             f"## Relative OOD error at N = {N} (mean ± 95% CI)", "",
             "| eps | trials | initial | optimised | benchmark (Q mixture) | reduction | paper (initial / optimised / "
             "benchmark) |",
             "|---|---|---|---|---|---|---|"]
    for name, per_n in doc["results"].items():
        if N not in per_n:  # a checkpoint written before this eps reached the largest N
            continue
        r = per_n[N]
        cell = lambda m: (f"{r[m]['mean']:.3e} ± {r[m]['ci95']:.1e}" if r[m]["ci95"] is not None  # noqa: E731
                          else f"{r[m]['mean']:.3e} (1 trial)")
        red = 100 * (1 - r["optimized"]["mean"] / r["initial"]["mean"])
        p = doc["paper"][name]
        lines.append(f"| {name} | {len(r['trials'])} | {cell('initial')} | {cell('optimized')} | {cell('benchmark')} | "
                     f"{red:.0f}% | "
                     f"{p[0]:.2e} / {p[1]:.2e} / {p[2]:.2e} |")
    lines += ["", "## Error vs N and runtime", "", "| eps | N | initial | optimised | benchmark | AMA seconds |",
              "|---|---|---|---|---|---|"]
    for name, per_n in doc["results"].items():
        for n, r in per_n.items():
            lines.append(f"| {name} | {n} | {r['initial']['mean']:.3e} | {r['optimized']['mean']:.3e} | "
                         f"{r['benchmark']['mean']:.3e} | {r['seconds']['mean']:.1f}"
                         + (f" ± {r['seconds']['ci95']:.1f} |" if r["seconds"]["ci95"] is not None else " |"))
    for name, zero in doc.get("zero_error", {}).items():
        trials = doc["results"].get(name, {}).get(N, {}).get("trials")
        if trials:
            lines += ["", f"## The bound against the error it bounds: eps = {name}, N = {N} (mean over "
                      f"{len(trials)} trials)", "", *bound_table(bound_rows(trials, zero), zero)]
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict, out_dir) -> list[Path]:
    out, figs, paths = write_tables(doc, out_dir, markdown)
    plt = pyplot()
    names = list(doc["results"])
    fig, ax = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.8), squeeze=False)
    for a, name in zip(ax[0], names):
        sizes = [int(n) for n in doc["results"][name]]
        for m, label in (("initial", "initial"), ("optimized", "particle AMA"), ("benchmark", "Q mixture")):
            mean = np.array([doc["results"][name][str(n)][m]["mean"] for n in sizes])
            ci = np.array([doc["results"][name][str(n)][m]["ci95"] or 0.0 for n in sizes])
            a.errorbar(sizes, mean, yerr=ci, marker="o", capsize=3, label=label)
        a.set(title=f"eps = {name}", xlabel="N", ylabel="relative OOD error", yscale="log")
        a.legend()
    save_figure(fig, out / "err_vs_n.png")
    fig, a = plt.subplots(figsize=(5, 3.8))
    for name in names:
        sizes = [int(n) for n in doc["results"][name]]
        mean = np.array([doc["results"][name][str(n)]["seconds"]["mean"] for n in sizes])
        ci = np.array([doc["results"][name][str(n)]["seconds"]["ci95"] or 0.0 for n in sizes])
        a.errorbar(sizes, mean, yerr=ci, marker="o", capsize=3, label=f"eps = {name}")
    a.set(xlabel="N", ylabel="particle AMA wall time [s]", title="runtime (this machine, 2 cores)")
    a.legend()
    save_figure(fig, out / "runtime.png")
    paths += [out / "err_vs_n.png", out / "runtime.png"]
    if figs is not None:
        G = doc["config"]["grid"]
        fig, ax = plt.subplots(2, len(names), figsize=(3.6 * len(names), 6.4), squeeze=False)
        for j, name in enumerate(names):
            a_in, rho = figs["examples"][name]
            ax[0, j].imshow(a_in.reshape(G, G).T, origin="lower", cmap="viridis")
            ax[0, j].set_title(f"scattering a (eps = {name})")
            ax[1, j].imshow(rho.reshape(G, G).T, origin="lower", cmap="magma")
            ax[1, j].set_title("density int u dv")
            for a in ax[:, j]:
                a.axis("off")
        paths.append(save_figure(fig, out / "input_output.png"))
    return paths
