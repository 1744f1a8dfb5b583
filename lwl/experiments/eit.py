"""The paper's EIT study (Fig. 1, Table 2, SM "AMINO for learning EIT"), then the designed omega law.

Four AMINO models are trained on Dirichlet data with omega ~ U[pi/2, pi], U[7pi/2, 4pi],
U[5pi, 11pi/2], U[13pi/2, 7pi] and tested in distribution (ID: omega from the model's own law)
and out of distribution (OOD: omega ~ U[pi/2, 7pi]) by the mean relative L^1 error of the
reconstructed conductivity +- one standard deviation over the test conductivities (paper eqn
app_amino_error).

Beyond the paper, the interval's position is designed (:mod:`lwl.design.interval_search`): a
grid of 13 positions of the width-pi/2 interval over [pi/2, 7pi] (it contains the four paper
intervals, which are therefore trained once, as grid points) and one refinement round, scored on
Q's *validation* set (its own conductivities and omegas ~ U[pi/2, 7pi]); the test set is used
only to report. A reference model trained on Q's own law U[pi/2, 7pi] (the unconstrained choice
the paper mentions) is reported too.

Data are generated once and cached (npz, no pickle): the prior's conductivities of the training,
validation and test sets with their DtN matrices (float32), and the common uniform draws; any
omega law's Neumann data are then g = Lambda f. All candidates train on the same conductivities
and uniforms u (omega = l + w u) from the same initial weights, so they differ only in l.

How omega enters (a reading of the paper, docs/method/eit.md): every pair l of a sample draws its own
omega_l from the law (the pairs are i.i.d. draws of (Id, Lambda_a)#mu, paper eqn app_amino_error),
at the fixed angle theta_l = 2 pi l / L.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lwl.design.interval_search import IntervalSearch
from lwl.experiments.report import pyplot, save_figure, write_tables
from lwl.models.amino import AMINORegressor
from lwl.oracles.eit import DirichletSolver, angles, conductivity, dirichlet_data, draw_coefficients

PI = np.pi
WIDTH = PI / 2
RANGE = (PI / 2, 7 * PI)
PAPER_MODELS = {"Model 1": PI / 2, "Model 2": 7 * PI / 2, "Model 3": 5 * PI, "Model 4": 13 * PI / 2}
#: Table 2: (ID mean, sd), (OOD mean, sd)
PAPER_TABLE = {"Model 1": ((0.034, 0.019), (0.796, 0.251)), "Model 2": ((0.081, 0.028), (0.078, 0.047)),
               "Model 3": ((0.021, 0.010), (0.066, 0.038)), "Model 4": ((0.017, 0.009), (0.132, 0.047))}
DATA_VERSION = 1

SMALL_MODEL = dict(channels=(4, 8, 8, 8, 8, 8, 8, 8), trunk_layers=2, trunk_width=16, latent=8, fno_channels=4,
                   fno_modes=3)
QUICK_MODEL = dict(channels=(16, 32, 32, 64, 64, 128, 128, 128), trunk_layers=4, trunk_width=128, latent=64,
                   fno_channels=32, fno_modes=12)
PAPER_MODEL = dict(channels=(64, 128, 128, 256, 256, 512, 512, 512), trunk_layers=8, trunk_width=512, latent=100,
                   fno_channels=128, fno_modes=32)

PRESETS: dict[str, dict[str, Any]] = {
    # CI: every code path in seconds (the numbers mean nothing)
    "smoke": dict(grid=9, pairs=4, n_train=24, n_val=12, n_test=12, epochs=2, batch_size=8, model=SMALL_MODEL,
                  candidates=4, refine=0, reference=True),
    # this machine, about half an hour on 2 cores: grid 24 (not 70), L = 16 (not 100), 512 training
    # conductivities (not 4096), 256 test (not 1024), 40 epochs (not 500), a quarter of the channels
    "quick": dict(grid=24, pairs=16, n_train=512, n_val=128, n_test=256, epochs=40, batch_size=16,
                  model=QUICK_MODEL, candidates=13, refine=1, reference=True),
    # the paper's sizes (SM AMINO): a GPU job
    "paper": dict(grid=70, pairs=100, n_train=4096, n_val=256, n_test=1024, epochs=500, batch_size=32,
                  model=PAPER_MODEL, candidates=13, refine=1, reference=True),
}


# -- data -------------------------------------------------------------------------------------------
def data_key(cfg: dict, seed: int) -> str:
    keys = ("grid", "pairs", "n_train", "n_val", "n_test")
    doc = json.dumps({"v": DATA_VERSION, "seed": seed, **{k: cfg[k] for k in keys}}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def generate_data(cfg: dict, seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """Conductivity coefficients, DtN matrices and the common random draws of the three sets."""
    M, L = cfg["grid"], cfg["pairs"]
    data: dict[str, np.ndarray] = {}
    for k, part in enumerate(("train", "val", "test")):
        c = draw_coefficients(cfg[f"n_{part}"], np.random.default_rng([seed, 22, k]))
        data[f"c_{part}"] = c
        dtn = np.empty((len(c), 4 * M - 4, 4 * M - 4), dtype=np.float32)
        for i, ci in enumerate(c):
            dtn[i] = DirichletSolver(conductivity(ci, M)).dtn()
        data[f"dtn_{part}"] = dtn
        if progress is not None:
            progress(f"data: {len(c)} {part} conductivities")
    rng = np.random.default_rng([seed, 11])
    data["u_train"] = rng.random((cfg["n_train"], L))  # omega = low + width * u for every candidate law
    data["u_test"] = rng.random((cfg["n_test"], L))  # ID test omegas of each law
    lo, hi = RANGE
    data["omega_val"] = lo + (hi - lo) * np.random.default_rng([seed, 21]).random((cfg["n_val"], L))  # Q's validation
    data["omega_ood"] = lo + (hi - lo) * np.random.default_rng([seed, 23]).random((cfg["n_test"], L))  # Q's test
    return data


def load_data(cfg: dict, seed: int, cache: Path | None, progress=None) -> tuple[dict[str, np.ndarray], dict]:
    """The cached data of this configuration (generated and written on first use)."""
    path = None if cache is None else Path(cache) / f"eit-{data_key(cfg, seed)}.npz"
    if path is not None and path.is_file():
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}, {"cache": str(path), "generated": False, "seconds": 0.0}
    t0 = time.perf_counter()
    data = generate_data(cfg, seed, progress)
    seconds = time.perf_counter() - t0
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **data)
        tmp.replace(path)
    return data, {"cache": str(path) if path else None, "generated": True, "seconds": seconds}


def pairs(dtn: np.ndarray, omega: np.ndarray, M: int) -> tuple[np.ndarray, np.ndarray]:
    """(f, g = Lambda f), each (n, L, 4M-4), for per-pair frequencies omega (n, L)."""
    f = dirichlet_data(omega, angles(omega.shape[1]), M)
    g = np.einsum("nbk,nlk->nlb", dtn, f.astype(np.float32)).astype(np.float64)
    return f, g


# -- the study --------------------------------------------------------------------------------------
def _summary(err: np.ndarray) -> dict[str, float]:
    return {"mean": float(err.mean()), "sd": float(err.std(ddof=1)) if err.size > 1 else 0.0}


MODEL_SETS = ("all", "paper")


def run(preset: str = "quick", *, seed: int = 0, cache: Path | None = None, device: str = "auto",
        progress: Callable[[str], None] | None = None, models: str = "all", checkpoints: Path | None = None,
        precision: str = "float32") -> dict[str, Any]:
    """The study at ``preset``. ``models``: ``all`` (the interval search and Q's own law beside the
    paper's four models) or ``paper`` (the paper's four models only: a GPU's paper-size run).
    ``checkpoints``: a folder where each model's training state is kept every epoch
    (``<name>.pt``); a rerun with the same settings resumes each model where it stopped and skips
    the finished ones. ``precision``: AMINO's float32 or tf32 products (lwl.models.precision)."""
    if models not in MODEL_SETS:
        raise ValueError(f"models: {models!r} is not one of {', '.join(MODEL_SETS)}")
    cfg = PRESETS[preset]
    M = cfg["grid"]
    say = progress or (lambda msg: None)
    data, data_info = load_data(cfg, seed, cache, say)
    a_train, a_val, a_test = (conductivity(data[f"c_{p}"], M) for p in ("train", "val", "test"))
    f_val, g_val = pairs(data["dtn_val"], data["omega_val"], M)
    f_ood, g_ood = pairs(data["dtn_test"], data["omega_ood"], M)
    shown = [0, 1]  # the test conductivities of the Fig.-1-style panels

    def train_and_test(lo: float, hi: float, name: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        f, g = pairs(data["dtn_train"], lo + (hi - lo) * data["u_train"], M)
        ckpt = None if checkpoints is None else Path(checkpoints) / (re.sub(r"[^A-Za-z0-9]+", "_", name) + ".pt")
        model = AMINORegressor(M, **cfg["model"], epochs=cfg["epochs"], batch_size=cfg["batch_size"], seed=seed,
                               device=device, precision=precision, checkpoint=ckpt).fit(f, g, a_train)
        f_id, g_id = pairs(data["dtn_test"], lo + (hi - lo) * data["u_test"], M)
        err_val = model.errors(f_val, g_val, a_val)
        err_id, err_ood = model.errors(f_id, g_id, a_test), model.errors(f_ood, g_ood, a_test)
        row = {"name": name, "low": float(lo), "high": float(hi), "validation": _summary(err_val),
               "id": _summary(err_id), "ood": _summary(err_ood), "final_train_loss": model.loss_history_[-1],
               "seconds": time.perf_counter() - t0,
               "_panels": {"id": model.predict(f_id[shown], g_id[shown]), "ood": model.predict(f_ood[shown], g_ood[shown])}}
        say(f"{name} [{lo / PI:.3g}pi, {hi / PI:.3g}pi]: validation {row['validation']['mean']:.3f}, "
            f"ID {row['id']['mean']:.3f}, OOD {row['ood']['mean']:.3f}")
        return row

    refine = cfg["refine"] if models == "all" else 0
    search = IntervalSearch(*RANGE, WIDTH, cfg["candidates"], refine)
    rows: dict[float, dict] = {}
    queue = search.grid() if models == "all" else sorted(PAPER_MODELS.values())
    for r in range(refine + 1):
        for low in queue:
            paper_name = next((n for n, lo in PAPER_MODELS.items() if abs(lo - low) < 1e-9), None)
            rows[low] = train_and_test(low, low + WIDTH, paper_name or f"candidate {len(rows)}")
            rows[low]["paper_model"] = paper_name
        if r < refine:
            queue = search.refinement({lo: row["validation"]["mean"] for lo, row in rows.items()})
    best = min(rows, key=lambda lo: (rows[lo]["validation"]["mean"], lo))
    for lo, row in rows.items():
        row["selected"] = lo == best
    reference = train_and_test(*RANGE, "Q's own law") if cfg["reference"] and models == "all" else None
    panels = {row["name"]: row.pop("_panels") for row in [*rows.values(), *([reference] if reference else [])]}
    doc = {"preset": preset, "seed": seed, "models": models, "precision": precision,
           "config": {k: (list(v) if isinstance(v, tuple) else v)
                      for k, v in cfg.items() if k != "model"},
           "model": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg["model"].items()},
           "data": data_info, "paper": {k: {"id": v[0], "ood": v[1]} for k, v in PAPER_TABLE.items()},
           "candidates": sorted(rows.values(), key=lambda r: r["low"]),
           "designed": {k: v for k, v in rows[best].items()}, "reference": reference,
           "_figures": {"panels": panels, "truth": a_test[shown], "grid": M}}
    doc["checks"] = checks(doc)
    return doc


def checks(doc: dict) -> dict[str, bool]:
    """The qualitative claims of the paper's Table 2 and of the design, on this run's numbers."""
    models = {r["paper_model"]: r for r in doc["candidates"] if r.get("paper_model")}
    ood = {n: r["ood"]["mean"] for n, r in models.items()}
    others = [v for n, v in ood.items() if n != "Model 1"]
    return {
        "model1_ood_worst_by_wide_margin": bool(others) and ood.get("Model 1", 0.0) > 2.0 * max(others),
        "id_below_ood_for_every_model": all(r["id"]["mean"] < r["ood"]["mean"] for r in models.values()),
        "designed_ood_at_most_best_paper_model": bool(ood) and doc["designed"]["ood"]["mean"] <= min(ood.values()),
    }


# -- outputs ----------------------------------------------------------------------------------------
def _pm(s: dict) -> str:
    return f"{s['mean']:.3f} ± {s['sd']:.3f}"


def markdown(doc: dict) -> str:
    cfg = doc["config"]
    models = {r["paper_model"]: r for r in doc["candidates"] if r.get("paper_model")}
    d = doc["designed"]
    paper_only = doc.get("models", "all") == "paper"
    label = "best of the four on validation" if paper_only else "designed"
    flags = (" --models paper" if paper_only else "") + \
        (f" --precision {doc['precision']}" if doc.get("precision", "float32") != "float32" else "")
    lines = [f"# EIT with AMINO: Table 2 and the designed ω law (preset `{doc['preset']}`)", "",
             f"Command: `lwl experiment eit --preset {doc['preset']}{flags}`. Grid {cfg['grid']}×{cfg['grid']}, "
             f"L = {cfg['pairs']} pairs, {cfg['n_train']} training / {cfg['n_val']} validation / {cfg['n_test']} "
             f"test conductivities, {cfg['epochs']} epochs, AMINO channels {doc['model']['channels']}, trunk "
             f"{doc['model']['trunk_layers']}×{doc['model']['trunk_width']}, p = {doc['model']['latent']}, FNO "
             f"{doc['model']['fno_channels']} channels × {doc['model']['fno_modes']} modes.", "",
             "Metric: the paper's, mean relative L¹ error of the conductivity over the test conductivities ± one "
             "standard deviation (over conductivities), Riemann sums on the grid. ID: ω from the model's own "
             "law; OOD: ω ~ U[π/2, 7π]. Same metric as the paper's Table 2; the sizes differ (above).", "",
             "| | " + " | ".join(models) + f" | {label}: U[{d['low'] / PI:.3g}π, {d['high'] / PI:.3g}π] |",
             "|---|" + "---|" * (len(models) + 1),
             "| training law | " + " | ".join(f"U[{r['low'] / PI:.3g}π, {r['high'] / PI:.3g}π]" for r in models.values())
             + " | selected on validation |",
             "| ID (lwl) | " + " | ".join(_pm(r["id"]) for r in models.values()) + f" | {_pm(d['id'])} |",
             "| OOD (lwl) | " + " | ".join(_pm(r["ood"]) for r in models.values()) + f" | {_pm(d['ood'])} |",
             "| ID (paper) | " + " | ".join(f"{doc['paper'][n]['id'][0]:.3f} ± {doc['paper'][n]['id'][1]:.3f}"
                                          for n in models) + " | — |",
             "| OOD (paper) | " + " | ".join(f"{doc['paper'][n]['ood'][0]:.3f} ± {doc['paper'][n]['ood'][1]:.3f}"
                                           for n in models) + " | — |", ""]
    if doc.get("reference"):
        r = doc["reference"]
        lines += [f"Reference, not constrained to a width-π/2 interval: trained on Q's own law U[π/2, 7π]: "
                  f"OOD {_pm(r['ood'])}.", ""]
    lines += ["Checks: " + ", ".join(f"{k}: **{'yes' if v else 'NO'}**" for k, v in doc["checks"].items()), "",
              "## Every candidate of the design (validation selects, test reports)", "",
              "| interval | validation | ID | OOD | seconds | |", "|---|---|---|---|---|---|"]
    for r in doc["candidates"]:
        tag = ", ".join(t for t in (r.get("paper_model"), "**selected**" if r["selected"] else None) if t)
        lines.append(f"| U[{r['low'] / PI:.3g}π, {r['high'] / PI:.3g}π] | {_pm(r['validation'])} | {_pm(r['id'])} | "
                     f"{_pm(r['ood'])} | {r['seconds']:.0f} | {tag} |")
    info = doc["data"]
    trained = [*doc["candidates"], *([doc["reference"]] if doc.get("reference") else [])]
    cache = Path(info["cache"]).name if info["cache"] else "none"
    lines += ["", f"Wall time: {sum(r['seconds'] for r in trained):.0f} s for {len(trained)} trained models on this "
              f"machine (2 cores); data {'generated in ' + format(info['seconds'], '.1f') + ' s and cached' if info['generated'] else 'read from the cache'} "
              f"({cache}).", ""]
    return "\n".join(lines)


def write_outputs(doc: dict, out_dir) -> list[Path]:
    out, figs, paths = write_tables(doc, out_dir, markdown)
    plt = pyplot()
    rows = doc["candidates"]
    x = np.array([r["low"] for r in rows]) / PI
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, style in (("validation", "validation (Q's ω, selects)", "o-"), ("ood", "OOD test", "s-"),
                              ("id", "ID test", "^--")):
        ax.plot(x, [r[key]["mean"] for r in rows], style, label=label, ms=4)
    for r in rows:
        if r.get("paper_model"):
            ax.annotate(r["paper_model"], (r["low"] / PI, r["ood"]["mean"]), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=8)
    d = doc["designed"]
    ax.plot([d["low"] / PI], [d["ood"]["mean"]], "*", ms=14, color="k", label="designed (OOD)")
    if doc.get("reference"):
        ax.axhline(doc["reference"]["ood"]["mean"], color="grey", lw=1, ls=":", label="trained on Q's law (OOD)")
    ax.set(xlabel="lower end l of the training law U[l, l + π/2]  [× π]", ylabel="relative L¹ error", yscale="log",
           title="EIT: error of AMINO against the position of its training law")
    ax.legend(fontsize=8)
    paths.append(save_figure(fig, out / "positions.png"))
    if figs is not None:
        M = figs["grid"]
        names = [r["name"] for r in rows if r.get("paper_model")] + [d["name"]]
        titles = [*names[:-1], f"designed ({d['name']})"]
        truth = figs["truth"]
        fig, ax = plt.subplots(4, len(names) + 1, figsize=(2.2 * (len(names) + 1), 8.6), squeeze=False)
        for s in range(2):
            vmin, vmax = truth[s].min(), truth[s].max()
            for k, setting in enumerate(("id", "ood")):
                row = 2 * s + k
                ax[row, 0].imshow(truth[s].T, origin="lower", vmin=vmin, vmax=vmax, cmap="viridis")
                ax[row, 0].set_title(f"truth, sample {s + 1}", fontsize=8)
                for j, name in enumerate(names):
                    pred = figs["panels"][name][setting][s]
                    ax[row, j + 1].imshow(pred.T, origin="lower", vmin=vmin, vmax=vmax, cmap="viridis")
                    err = np.abs(pred - truth[s]).sum() / np.abs(truth[s]).sum()
                    ax[row, j + 1].set_title(f"{titles[j]} {setting.upper()}\nrel. L¹ {err:.3f}", fontsize=8)
        for a in ax.ravel():
            a.axis("off")
        fig.suptitle(f"Reconstructed conductivities ({M}×{M}), ID (own ω law) and OOD (ω ~ U[π/2, 7π])", fontsize=10)
        paths.append(save_figure(fig, out / "reconstructions.png", dpi=110))
    return paths
