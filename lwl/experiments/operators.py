"""The paper's AMA operator-learning studies (SM NtD, Darcy, Burgers; Figs. 3, 4, 6, 8).

Each study fixes a meta test distribution Q of KLE Gaussians, a KLE training family with its
free parameters, a DeepONet and an oracle, runs :class:`lwl.design.ama.AMADesign` ``runs``
times (seeds 0..runs-1) and reports, per AMA iteration, the relative OOD error (SM eqn
app_ntd_rel_ood_error) of the model trained on that iteration's distribution, with a 95%
Student-t interval over runs, and the AMA objective relative to its first value. Burgers adds
error vs N for AMA against QbC and CoreSet on a fixed pool.

lwl's choices where the paper is silent or not reproducible here (also in docs/method/operators.md):
- NtD test members use sigma_k = tau_k^(3/2), the training family's scaling (the paper does not
  state sigma_k); the NtD input is parametrised by arc length t in [0, 1] on the 4M-4 nodes.
- Darcy inputs live on the solver's M x M nodes, boundary included: the sine KLE has M - 2
  modes per axis (the discretely orthonormal ones) instead of the paper's M + 1.
- Burgers' Q is lwl's own (the paper's pool file is not available): K = 8 Fourier KLEs with
  alpha ~ U[2, 2.5], tau ~ U[1.5, 3], sigma ~ U[5, 10]; the QbC/CoreSet pool is drawn from Q.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy import stats

from lwl.design.active import active_learning
from lwl.design.ama import AMADesign
from lwl.measures.kle_family import KLEFamily
from lwl.evaluation.metrics import member_relative_error
from lwl.experiments.report import pyplot, save_figure, write_tables
from lwl.measures import KLEGaussian, cosine_law
from lwl.measures.kle import darcy_test_member
from lwl.models import DeepONetRegressor
from lwl.oracles import make_oracle
from lwl.runner import iterate

Q_SEED = 2025
LAW_STUDIES = ("ntd", "darcy")  # studies whose test parameters come from a q_law (lwl.measures.cosine_law)


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "ntd": {
        "tiny": dict(grid=10, members=8, runs=2, iterations=2, n_train=100, n_opt=100, n_test=50,
                     branch=[64, 64, 32], trunk=[64, 64, 32], train_iters=300, model_rounds=1, maxiter=20),
        "quick": dict(grid=24, members=16, runs=3, iterations=3, n_train=300, n_opt=300, n_test=200,
                      branch=[128, 128, 128], trunk=[128, 128, 128], train_iters=800, model_rounds=2, maxiter=50),
        "paper": dict(grid=128, members=64, runs=80, iterations=10, n_train=500, n_opt=500, n_test=500,
                      branch=[512, 512, 512, 200], trunk=[128, 128, 128, 200], train_iters=2000, model_rounds=10,
                      maxiter=1000),
        # The paper's grid, Q and DeepONet with a training budget a 2-core CPU finishes in ~30 min.
        "paper-cpu": dict(grid=128, members=64, runs=3, iterations=5, n_train=500, n_opt=500, n_test=500,
                          branch=[512, 512, 512, 200], trunk=[128, 128, 128, 200], train_iters=1000,
                          model_rounds=2, maxiter=100),
    },
    "darcy": {
        "tiny": dict(grid=12, members=6, runs=2, iterations=2, n_train=60, n_opt=3, n_test=30,
                     branch=[64, 32], trunk=[64, 32], train_iters=300, model_rounds=1, steps=50, rounds=2),
        "quick": dict(grid=24, members=20, runs=3, iterations=4, n_train=200, n_opt=3, n_test=100,
                      branch=[128, 128, 128], trunk=[128, 128, 128], train_iters=1500, model_rounds=2,
                      steps=500, rounds=3),
        "paper": dict(grid=64, members=20, runs=13, iterations=8, n_train=200, n_opt=3, n_test=200,
                      branch=[256, 256, 128, 200], trunk=[128, 128, 128, 200], train_iters=5000, model_rounds=3,
                      steps=500, rounds=3),
        "paper-cpu": dict(grid=64, members=20, runs=3, iterations=4, n_train=200, n_opt=3, n_test=200,
                          branch=[256, 256, 128, 200], trunk=[128, 128, 128, 200], train_iters=1000,
                          model_rounds=2, steps=300, rounds=3),
    },
    "burgers": {
        "tiny": dict(grid=64, members=4, runs=2, iterations=2, n_train=60, n_opt=30, n_test=40, pool=200,
                     sizes=[10, 30, 60], branch=[64, 32], trunk=[64, 32], train_iters=300, model_rounds=1,
                     maxiter=10),
        "quick": dict(grid=128, members=8, runs=2, iterations=3, n_train=200, n_opt=100, n_test=100, pool=1000,
                      sizes=[10, 50, 100, 200], branch=[128, 128, 128], trunk=[128, 128, 128],
                      train_iters=800, model_rounds=1, maxiter=30),
        "paper": dict(grid=8192, members=8, runs=10, iterations=5, n_train=1000, n_opt=200, n_test=200, pool=10000,
                      sizes=[10] + list(range(50, 1001, 50)), branch=[1024, 512, 256, 128, 128],
                      trunk=[128, 128, 128, 128, 128], train_iters=10000, model_rounds=1, maxiter=100),
        # The mid size: n = 1024 (paper 8192) with the paper's network.
        "paper-cpu": dict(grid=1024, members=8, runs=2, iterations=3, n_train=500, n_opt=64, n_test=200,
                          pool=2000, sizes=[10, 50, 100, 200, 400], branch=[1024, 512, 256, 128, 128],
                          trunk=[128, 128, 128, 128, 128], train_iters=1000, model_rounds=1, maxiter=10),
    },
}


@dataclass
class Study:
    name: str
    oracle: Any
    family: KLEFamily
    members: list[KLEGaussian]
    z: np.ndarray
    output_weights: Any
    factory: Callable[[int], DeepONetRegressor]
    ama: dict[str, Any]
    cfg: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


def _factory(cfg: dict, n_in: int, n_z: int, **kw) -> Callable[[int], DeepONetRegressor]:
    def make(seed: int) -> DeepONetRegressor:
        return DeepONetRegressor([n_in, *cfg["branch"]], [n_z, *cfg["trunk"]], lr=1e-3, max_iters=cfg["train_iters"],
                                 validation_fraction=0.0, seed=seed, warm_start=True, **kw)
    return make


def ntd_study(cfg: dict) -> Study:
    """SM NtD: omega of 10 sin(omega (t - 1/2)) + KLE(2, 3, 3^1.5) by differential evolution from 8 pi."""
    from lwl.oracles.ntd import boundary_points

    M = cfg["grid"]
    G = 4 * M - 4
    oracle = make_oracle({"name": "ntd", "params": {"grid": M}})
    tmpl = KLEGaussian("sine1d", G, alpha=2.0, tau=3.0, sigma=3.0 ** 1.5, amplitude=10.0, omega=8 * math.pi)
    family = KLEFamily(tmpl, ["omega"], {"omega": (-8 * math.pi, 8 * math.pi)})
    rng = np.random.default_rng(Q_SEED)
    rho = cosine_law.law(cfg.get("q_law", cosine_law.DEFAULT_LAW))  # the paper's eqn customdist
    members = []
    for _ in range(cfg["members"]):
        w, t = rho(rng, -2 * math.pi, 2 * math.pi), rho(rng, 0.0, 50.0)
        members.append(KLEGaussian("sine1d", G, alpha=1.5, tau=t, sigma=t ** 1.5, amplitude=10.0, omega=w))
    h = 1.0 / (M - 1)  # boundary arc length per node
    ama = dict(optimizer="differential_evolution", tol=1e-7, maxiter=cfg["maxiter"])
    return Study("ntd", oracle, family, members, boundary_points(M), h, _factory(cfg, G, 2), ama, cfg,
                 extra={"matrix": oracle.matrix})


def darcy_study(cfg: dict) -> Study:
    """SM Darcy: the mean shift m of log a = m + KLE(2, 3, 3) by Adam (lr 1e-3) from 0."""
    M = cfg["grid"]
    oracle = make_oracle({"name": "darcy"})
    tmpl = KLEGaussian("sine2d", M, alpha=2.0, tau=3.0, sigma=3.0, shift=0.0, endpoints=True)
    family = KLEFamily(tmpl, ["shift"], {"shift": (-5.0, 5.0)})
    rng = np.random.default_rng(Q_SEED)
    rho = cosine_law.law(cfg.get("q_law", cosine_law.DEFAULT_LAW))
    members = [darcy_test_member(rng, M, endpoints=True, rho=rho) for _ in range(cfg["members"])]
    x = np.linspace(0, 1, M)
    z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    ama = dict(optimizer="adam", learning_rate=1e-3, steps=cfg["steps"], rounds=cfg["rounds"])
    return Study("darcy", oracle, family, members, z, tmpl.quadrature_weights(), _factory(cfg, M * M, 2), ama, cfg)


def burgers_study(cfg: dict) -> Study:
    """SM Burgers: (alpha, tau, sigma) of the Fourier KLE by L-BFGS-B from (3, 1.4, 5)."""
    n = cfg["grid"]
    oracle = make_oracle({"name": "burgers", "params": {"viscosity": 0.1, "length": 2 * math.pi, "time": 1.0}})
    tmpl = KLEGaussian("fourier", n, alpha=3.0, tau=1.4, sigma=5.0)
    family = KLEFamily(tmpl, ["alpha", "tau", "sigma"], {"alpha": (1.5, 5.0), "tau": (0.5, 5.0), "sigma": (1.0, 15.0)})
    rng = np.random.default_rng(Q_SEED)
    members = [KLEGaussian("fourier", n, alpha=rng.uniform(2.0, 2.5), tau=rng.uniform(1.5, 3.0),
                           sigma=rng.uniform(5.0, 10.0)) for _ in range(cfg["members"])]
    z = (2 * math.pi * np.arange(n) / n)[:, None]
    ama = dict(optimizer="lbfgsb", tol=1e-9, maxiter=cfg["maxiter"])
    return Study("burgers", oracle, family, members, z, tmpl.quadrature_weights(), _factory(cfg, n, 1), ama, cfg)


STUDIES = {"ntd": ntd_study, "darcy": darcy_study, "burgers": burgers_study}


def test_set(study: Study) -> list[tuple[np.ndarray, np.ndarray]]:
    """n_test labelled samples of every member of Q (fixed seeds)."""
    out = []
    for k, m in enumerate(study.members):
        U = m.sample(study.cfg["n_test"], [Q_SEED, 1, k])
        out.append((U, np.asarray(study.oracle.label(U)).reshape(len(U), -1)))
    return out


def relative_ood_error(model, tests, output_weights) -> float:
    """The model's relative OOD error on the members' test sets, members weighted equally
    (:func:`lwl.evaluation.metrics.member_relative_error`)."""
    return member_relative_error(((Y, model.predict(U)) for U, Y in tests), None, output_weights)


def zero_error(tests, output_weights) -> float:
    """E_Q(0) = mean over Q's test inputs of ||G*(u)||^2 (members weighted equally): the scale that
    turns the relative error back into E_Q(G) = err^2 E_Q(0), comparable with the bound."""
    return float(np.mean([np.mean(((np.asarray(Y).reshape(len(U), -1) ** 2) * output_weights).sum(1))
                          for U, Y in tests]))


def bound_rows(runs: list[dict], zero: float) -> list[dict[str, float]]:
    """Per iteration, mean over ``runs`` (each with per-iteration ``errors`` and ``objectives``): the
    AMA bound J (an upper bound of E_Q(G) when its constants hold), the measured
    E_Q(G) = err^2 E_Q(0), and the ratios J / E_Q(G) and J / E_Q(0). Runs that stopped early
    carry their last values."""
    n = max(len(r["errors"]) for r in runs)
    rows = []
    for k in range(n):
        J, E = [], []
        for r in runs:
            J.append(_carried(r["objectives"])[min(k, len(r["objectives"]) - 1)])
            E.append(r["errors"][min(k, len(r["errors"]) - 1)] ** 2 * zero)
        J, E = np.asarray(J), np.asarray(E)
        rows.append({"bound": float(J.mean()), "measured": float(E.mean()), "zero": zero,
                     "bound_over_measured": float(np.mean(J / E)), "bound_over_zero": float(np.mean(J / zero))})
    return rows


def bound_report(doc: dict) -> list[dict[str, float]]:
    """:func:`bound_rows` of an operator study's runs."""
    return bound_rows(doc["per_run"], doc["zero_error"])


def bound_table(rows: list[dict[str, float]], zero: float) -> list[str]:
    """The markdown of :func:`bound_rows`, with the sentence that says how to read it."""
    lines = ["J is the AMA objective (training error + sqrt(E_Q c_R^2) sqrt(E_Q W2^2), an upper bound of "
             "E_Q(G) when its Lipschitz constants hold; here they are sampled estimates); E_Q(G) = err^2 E_Q(0) "
             f"is measured on the test inputs; E_Q(0) = {zero:.4g}. A ratio J / E_Q(0) >= 1 "
             "means the bound is vacuous (no better than predicting 0).", "",
             "| iteration | J | E_Q(G) measured | J / E_Q(G) | J / E_Q(0) |", "|---|---|---|---|---|"]
    for k, b in enumerate(rows):
        lines.append(f"| {k} | {b['bound']:.4g} | {b['measured']:.4g} | {b['bound_over_measured']:.3g} | "
                     f"{b['bound_over_zero']:.3g} |")
    return lines


def mean_squared_ratio(model, tests, output_weights) -> float:
    """The metric the authors' code reports (paper's Darcy "≈4%"): the mean over test inputs of
    ||G*(u) - G(u)||^2 / ||G*(u)||^2, no root, members pooled. lwl's own metric is
    :func:`relative_ood_error` (root of the ratio of means)."""
    ratios = []
    for U, Y in tests:
        Y = np.asarray(Y).reshape(len(U), -1)
        P = np.asarray(model.predict(U)).reshape(Y.shape)
        ratios.append((((Y - P) ** 2) * output_weights).sum(1) / ((Y**2) * output_weights).sum(1))
    return float(np.mean(np.concatenate(ratios)))


def t_interval(values) -> tuple[float, float]:
    """Mean and half-width of the 95% Student-t interval."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return float(v.mean()), 0.0
    return float(v.mean()), float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))


def run_ama(study: Study, seed: int, tests, watch: np.ndarray | None = None, progress=None,
            select: str = "bound") -> dict[str, Any]:
    """One AMA run; the relative OOD error of each iteration's model (and its predictions on
    ``watch``) and of the model the run returns (the last one, or the best validated one with
    ``select="validation"``, on ``n_test`` validation samples per member)."""
    design = AMADesign(study.family, study.members, study.oracle, study.factory, study.z,
                       output_weights=study.output_weights, iterations=study.cfg["iterations"],
                       n_train=study.cfg["n_train"], n_opt=study.cfg["n_opt"],
                       model_rounds=study.cfg["model_rounds"], seed=seed, select=select,
                       validation_size=study.cfg["n_test"], **study.ama)
    errors, watched = [], []

    def record(state) -> None:  # after each model step: the new model's error
        if len(state.history) > len(errors):
            model = design.model(state)
            errors.append(relative_ood_error(model, tests, study.output_weights))
            if watch is not None:
                watched.append(model.predict(watch[None])[0])
            if progress:
                progress(f"run {seed} iteration {len(errors) - 1}: rel. OOD error {errors[-1]:.4f}")

    state = iterate(design, study.oracle, design.init(), after_step=record)
    hist = state.history
    returned = design.result(state)
    chosen = design.selected_model(state)
    final = relative_ood_error(chosen, tests, study.output_weights)
    return {"seed": seed, "errors": errors, "final_error": final, "selected": returned.get("selected"),
            "final_mean_squared_ratio": mean_squared_ratio(chosen, tests, study.output_weights),
            "validation_errors": [r.get("validation_error") for r in hist],
            "validation_actions": [r.get("validation_action") for r in hist],
            "objectives": [r["objective"] for r in hist],
            "thetas": [r["theta"] for r in hist],
            "final_theta": np.asarray(state.best.params["theta"] if select == "validation" and state.best
                                      else state.theta).tolist(),
            "accepted": [r.get("accepted") for r in hist], "labels_used": state.labels_used,
            "lipschitz": design.result(state)["lipschitz"], "watched": watched,
            "model": design.model(state), "design": design, "state": state}


def burgers_err_vs_n(study: Study, run: dict, tests, seed: int) -> dict[str, list[float]]:
    """Error vs N: AMA's final and initial distributions (fresh samples), QbC and CoreSet (pool)."""
    cfg, fam = study.cfg, study.family
    rng = np.random.default_rng([Q_SEED, 2, seed])
    pool = np.concatenate([m.sample(cfg["pool"] // len(study.members) + 1, rng) for m in study.members])
    pool = pool[rng.permutation(len(pool))[:cfg["pool"]]]
    out: dict[str, list[float]] = {}
    for name, theta in (("ama", run["final_theta"]), ("initial", fam.theta0())):
        measure, errs = fam.measure(theta), []
        for n in cfg["sizes"]:
            U = measure.sample(n, [seed, 3, n])
            model = study.factory(seed).fit(U, np.asarray(study.oracle.label(U)).reshape(n, -1), study.z)
            errs.append(relative_ood_error(model, tests, study.output_weights))
        out[name] = errs
    for method in ("qbc", "coreset"):
        trained = active_learning(method, pool, study.oracle, study.factory, study.z, cfg["sizes"], seed=seed,
                                  output_weights=study.output_weights)
        out[method] = [relative_ood_error(m, tests, study.output_weights) for _, m in trained]
    return out


def _carried(values: list[float | None]) -> np.ndarray:
    """Objectives with the unknown ones (None: the bound after a validated backtrack is not
    evaluated) carried forward from the last known value."""
    out, last = [], values[0]
    for v in values:
        last = v if v is not None else last
        out.append(last)
    return np.asarray(out, dtype=np.float64)


def _padded(rows: list) -> np.ndarray:
    """Runs of unequal length (a validated run that stopped early) padded with their last value."""
    n = max(len(r) for r in rows)
    return np.array([list(r) + [r[-1]] * (n - len(r)) for r in rows], dtype=np.float64)


def reusable_runs(previous: dict | None, name: str, cfg: dict, select: str) -> dict[int, dict]:
    """Runs of an earlier results.json (``previous``) keyed by seed, if it was made for the same
    study with the same settings (everything but the number of runs) and selection rule; else
    none. Lets a paper-size study grow by runs, or resume after an interruption."""
    if not previous or previous.get("study") != name or previous.get("select", "bound") != select:
        return {}
    before, now = dict(previous.get("config", {})), dict(cfg)
    if name in LAW_STUDIES:
        before.setdefault("q_law", "unit")  # results made before the paper's law was restored
        now.setdefault("q_law", cosine_law.DEFAULT_LAW)
    same = {k: v for k, v in before.items() if k != "runs"} == {k: v for k, v in now.items() if k != "runs"}
    return {int(r["seed"]): r for r in previous.get("per_run", [])} if same else {}


def run(name: str, preset: str = "quick", *, runs: int | None = None, progress=None,
        select: str = "bound", previous: dict | None = None, checkpoint=None, q_law: str | None = None) -> dict[str, Any]:
    """Run study ``name`` at ``preset``; returns the results document. Runs found in
    ``previous`` (an earlier results.json, same settings) are reused; ``checkpoint(doc)`` is
    called after every new run with the results so far. ``q_law`` (ntd, darcy): the law of the
    test members' parameters (:mod:`lwl.measures.cosine_law`; the paper's by default, ``unit``
    for results made before it was restored)."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; known: {', '.join(STUDIES)}")
    if preset not in PRESETS[name]:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS[name])}")
    cfg = dict(PRESETS[name][preset])
    if runs is not None:
        cfg["runs"] = runs
    if name in LAW_STUDIES:
        cfg["q_law"] = q_law or cosine_law.DEFAULT_LAW
        cosine_law.law(cfg["q_law"])  # an unknown name fails here, before any run
    elif q_law is not None:
        raise ValueError(f"q_law: only the ntd and darcy studies draw their test parameters from a law, not {name}")
    reuse = reusable_runs(previous, name, cfg, select)
    study = STUDIES[name](cfg)
    t0 = time.perf_counter()
    seconds = sum(float(r.get("seconds", 0.0)) for r in reuse.values())
    tests = test_set(study)
    watch = tests[0][0][0] if name == "darcy" else None
    results = []
    for r in range(cfg["runs"]):
        if r in reuse:
            results.append(reuse[r])
            if progress:
                for _ in reuse[r]["errors"]:
                    progress(f"run {r}: reused from the earlier results")
            continue
        t_run = time.perf_counter()
        res = run_ama(study, r, tests, watch, progress, select=select)
        if name == "burgers":
            res["err_vs_n"] = burgers_err_vs_n(study, res, tests, r)
            if progress:
                progress(f"run {r}: error vs N done")
        res["seconds"] = time.perf_counter() - t_run
        results.append(res)
        if checkpoint and r + 1 < cfg["runs"]:
            checkpoint(_document(name, preset, select, cfg, study, tests, watch, results,
                                 seconds + time.perf_counter() - t0))
    return _document(name, preset, select, cfg, study, tests, watch, results, seconds + time.perf_counter() - t0)


def _document(name, preset, select, cfg, study, tests, watch, results, seconds) -> dict[str, Any]:
    """The results document of the runs done so far (``runs`` says how many)."""
    errs = _padded([r["errors"] for r in results])
    objs = _padded([_carried(r["objectives"]) / r["objectives"][0] for r in results])
    doc: dict[str, Any] = {
        "study": name, "preset": preset, "select": select, "config": cfg, "runs": len(results),
        "zero_error": zero_error(tests, study.output_weights),
        "returned_error": dict(zip(("mean", "ci95"), t_interval([r["final_error"] for r in results]))),
        "returned_mean_squared_ratio": dict(zip(("mean", "ci95"), t_interval(
            [r["final_mean_squared_ratio"] for r in results]))),
        "seconds": seconds, "free": study.family.free,
        "initial_theta": study.family.theta0().tolist(),
        "members": [m.to_spec() for m in study.members],
        "relative_ood_error": [dict(zip(("mean", "ci95"), t_interval(errs[:, k]))) for k in range(errs.shape[1])],
        "relative_ama_loss": [dict(zip(("mean", "ci95"), t_interval(objs[:, k]))) for k in range(objs.shape[1])],
        "per_run": [{k: v for k, v in r.items() if k not in ("model", "design", "state", "watched")} for r in results],
    }
    if name == "burgers":
        doc["sizes"] = cfg["sizes"]
        doc["err_vs_n"] = {m: [dict(zip(("mean", "ci95"), t_interval([r["err_vs_n"][m][i] for r in results])))
                               for i in range(len(cfg["sizes"]))] for m in ("ama", "initial", "qbc", "coreset")}
    doc["_figures"] = {"study": study, "results": results, "tests": tests, "watch": watch}
    return doc


# -- outputs -------------------------------------------------------------------------------------
def _law_line(doc: dict) -> list[str]:
    """Which law drew the test members' parameters (ntd, darcy; lwl.measures.cosine_law)."""
    if doc["study"] not in LAW_STUDIES:
        return []
    if doc["config"].get("q_law", "unit") == "paper":
        return ["Test members' parameters from the paper's law, density ∝ 1 − cos x on each raw interval "
                "(eqn customdist)."]
    return ["Test members' parameters from lwl's earlier law (1 − cos 2πu on [0, 1], rescaled: not the paper's; "
            "`--q-law unit` reproduces these numbers, the paper's law is the default now)."]


def markdown(doc: dict) -> str:
    name, cfg = doc["study"], doc["config"]
    lines = [f"# AMA study `{name}` (preset `{doc['preset']}`)", "",
             f"{doc['runs']} runs (seeds 0..{doc['runs'] - 1}), {cfg['iterations']} AMA iterations, "
             f"{cfg['n_train']} training samples per model step, wall {doc['seconds']:.0f} s on this machine.",
             f"Free parameters {doc['free']} from {np.round(doc['initial_theta'], 4).tolist()}.",
             *_law_line(doc), *_departures(doc), "",
             "| iteration | relative OOD error (mean ± 95% CI) | relative AMA loss | mean theta |",
             "|---|---|---|---|"]
    n_it = len(doc["relative_ood_error"])
    thetas = np.array([r["thetas"] + [r["thetas"][-1]] * (n_it - len(r["thetas"])) for r in doc["per_run"]])
    for k, (e, o) in enumerate(zip(doc["relative_ood_error"], doc["relative_ama_loss"])):
        lines.append(f"| {k} | {e['mean']:.4f} ± {e['ci95']:.4f} | {o['mean']:.4f} ± {o['ci95']:.4f} | "
                     f"{np.round(thetas[:, k].mean(0), 4).tolist()} |")
    first, last = doc["relative_ood_error"][0]["mean"], doc["relative_ood_error"][-1]["mean"]
    select = doc.get("select", "bound")
    ret = doc.get("returned_error")
    lines += ["", f"Relative OOD error {first:.4f} -> {last:.4f} ({100 * (1 - last / first):.1f}% lower); "
              + ("the AMA loss never rises within a run (rejected steps keep the previous distribution)."
                 if select == "bound" else "validated AMA (Q's validation samples accept steps and select the "
                                           "returned model; the loss may rise after a backtrack)."),
              *([f"Returned model ({'the last' if select == 'bound' else 'best validated'}): relative OOD error "
                 f"{ret['mean']:.4f} ± {ret['ci95']:.4f}."] if ret else []),
              *([f"Metrics compared: lwl's relative OOD error above is sqrt(mean ||e||^2 / mean ||G*||^2) over Q's "
                 f"test inputs (SM eqn app_ntd_rel_ood_error, rooted); the authors' code reports the mean of "
                 f"||e||^2 / ||G*||^2 without the root: {doc['returned_mean_squared_ratio']['mean']:.4f} ± "
                 f"{doc['returned_mean_squared_ratio']['ci95']:.4f} for the returned model. Compare that number "
                 f"with the paper's quoted percentages."] if doc.get("returned_mean_squared_ratio") else []),
              f"Labels used per run (training + distribution steps + Lipschitz pairs): "
              f"{int(np.mean([r['labels_used'] for r in doc['per_run']]))}."]
    if doc.get("zero_error"):
        lines += ["", "## The bound against the error it bounds (mean over runs)", "",
                  *bound_table(bound_report(doc), doc["zero_error"])]
    if name == "burgers":
        lines += ["", "## Error vs N (mean ± 95% CI)", "", "| N | AMA | initial | QbC | CoreSet |", "|---|---|---|---|---|"]
        for i, n in enumerate(doc["sizes"]):
            cells = [f"{doc['err_vs_n'][m][i]['mean']:.4f} ± {doc['err_vs_n'][m][i]['ci95']:.4f}"
                     for m in ("ama", "initial", "qbc", "coreset")]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _departures(doc: dict) -> list[str]:
    """A sentence listing where a non-paper preset's settings differ from the paper preset's."""
    paper = PRESETS[doc["study"]]["paper"]
    diff = [f"{k} {doc['config'][k]} (paper {paper[k]})" for k in paper
            if k in doc["config"] and doc["config"][k] != paper[k]]
    if doc["preset"] == "paper" or not diff:
        return []
    return [f"Settings that differ from the paper's (preset `paper`): {'; '.join(diff)}."]


def _convergence(doc, plt, path):
    e = doc["relative_ood_error"]
    o = doc["relative_ama_loss"]
    k = np.arange(len(e))
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    m, c = np.array([x["mean"] for x in e]), np.array([x["ci95"] for x in e])
    ax[0].plot(k, m, "o-")
    ax[0].fill_between(k, m - c, m + c, alpha=0.3, label="95% CI")
    ax[0].set(xlabel="AMA iteration", ylabel="relative OOD error", title=f"{doc['study']}: OOD error")
    ax[0].legend()
    m, c = np.array([x["mean"] for x in o]), np.array([x["ci95"] for x in o])
    ax[1].plot(k, m, "s-", color="C1")
    ax[1].fill_between(k, m - c, m + c, alpha=0.3, color="C1")
    ax[1].set(xlabel="AMA iteration", ylabel="AMA loss / initial", title="relative AMA loss")
    save_figure(fig, path)


def write_outputs(doc: dict, out_dir) -> list[Path]:
    out, figs, paths = write_tables(doc, out_dir, markdown)
    plt = pyplot()
    _convergence(doc, plt, out / "convergence.png")
    paths.append(out / "convergence.png")
    if figs is None:
        return paths
    study, results, tests = figs["study"], figs["results"], figs["tests"]
    if doc["study"] == "ntd":
        fig, ax = plt.subplots(figsize=(4.5, 4))
        im = ax.imshow(study.extra["matrix"], cmap="RdBu_r")
        fig.colorbar(im)
        ax.set_title(f"NtD matrix (M = {doc['config']['grid']})")
        paths.append(save_figure(fig, out / "ntd_matrix.png"))
    watched = next((r["watched"] for r in results if r.get("watched")), None)  # reused runs have none
    if doc["study"] == "darcy" and watched:
        M = doc["config"]["grid"]
        U, Y = tests[0]
        picks = sorted({0, 1, 2, len(watched) - 1} & set(range(len(watched))))
        fig, ax = plt.subplots(1, 2 + len(picks), figsize=(3 * (2 + len(picks)), 3))
        ax[0].imshow(U[0].reshape(M, M), cmap="viridis")
        ax[0].set_title("test log a")
        ax[1].imshow(Y[0].reshape(M, M), cmap="viridis")
        ax[1].set_title("true u")
        vmax = max(np.abs(watched[i] - Y[0]).max() for i in picks)
        for a, i in zip(ax[2:], picks):
            a.imshow(np.abs(watched[i] - Y[0]).reshape(M, M), cmap="magma", vmin=0, vmax=vmax)
            a.set_title(f"|error|, iteration {i + 1}")
        for a in ax:
            a.axis("off")
        paths.append(save_figure(fig, out / "error_fields.png"))
    if doc["study"] == "burgers":
        U, Y = tests[0]
        x = study.z[:, 0]
        fig, ax = plt.subplots(1, 3, figsize=(14, 3.8))
        ax[0].plot(x, U[0])
        ax[0].set(title="initial condition u(x, 0)", xlabel="x")
        ax[1].plot(x, Y[0], color="C1")
        ax[1].set(title="solution u(x, 1)", xlabel="x")
        n = np.array(doc["sizes"])
        for m, label in (("ama", "AMA"), ("qbc", "QbC"), ("coreset", "CoreSet"), ("initial", "initial nu")):
            mean = np.array([v["mean"] for v in doc["err_vs_n"][m]])
            ci = np.array([v["ci95"] for v in doc["err_vs_n"][m]])
            ax[2].plot(n, mean, "o-", label=label)
            ax[2].fill_between(n, mean - ci, mean + ci, alpha=0.2)
        ax[2].set(xlabel="N", ylabel="relative OOD error", yscale="log", title="error vs N")
        ax[2].legend()
        paths.append(save_figure(fig, out / "err_vs_n.png"))
    return paths
