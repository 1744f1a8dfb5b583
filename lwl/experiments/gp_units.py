"""Model against model, in the problem's units and in a lab's (issue #83): lwl's served GP
against scikit-learn's standardised ARD GP on the same points, posed three ways.

``lwl experiment gp-units --preset full`` (``--problems a,b``, ``--workers N``, ``--resume``).

**Problems**: the gp budget study's 22 (:func:`lwl.experiments.budget.problem_specs` of its
``full-2000`` preset: Table 1's six columns and the 16 robustness problems), each with its oracle
and its Q (``test_distributions``, the job's seed 0).

**Training points**: for draw r = 0..draws-1, n inputs of Q's mixture (the Gaussians fitted to
Q's members at the problem's own Q size, :func:`lwl.evaluation.baselines.mixture`), from the
stream of the equal-labels verdict's mixture draw r ([0, STREAM_AUDIT, r],
:mod:`lwl.evaluation.equal_labels`), labelled by the oracle. Both models get exactly the same
points. No budgeted job runs here (its cost is the budget study's); the points are what a lab
with Q's mixture would label. The ``jobs-*`` presets (``training: job``) take instead each
draw's points from a budgeted job (:func:`posed_job`: the budget study's spec at budget n, seed r,
the default model gp) posed in the posing's units, and judge that job's served GP against
scikit-learn's on the job's training set: the gate of issue #83.

**Three posings of the same points** (:func:`physical_map`):

- ``standard``: the inputs and labels as the problem poses them, deterministic labels;
- ``physical``: every input mapped x_phys = offset + scale * x, the scales spread evenly in log
  from 1e-3 to 1e5 over the inputs (which input gets which scale: a permutation seeded by the
  problem key's CRC-32), the input of scale 1e-3 offset by 1e6 (a billion times its spread, as
  a wavelength in nm or an absolute time stamp is), the others by a moderate offset (uniform in
  +-20 of their scale, from the same seed); labels y_phys = 1e3 + 50 y;
- ``physical-noisy``: ``physical`` with Gaussian noise of sd 1% of the training labels' standard
  deviation added to the training labels (seeded per draw).

**Models**: lwl's served GP, ``lwl.models.train(GPSpec(), X, y, ridge=1e-3, seed=r)`` (a job's
defaults), and the lab's scikit-learn recipe: ``StandardScaler`` on X, ``normalize_y=True``,
kernel ``ConstantKernel(1, (1e-3, 1e3)) * K(length_scale=ones(d), (1e-3, 1e3)) +
WhiteKernel(1e-6, (1e-12, 1))``, alpha 1e-10, ``n_restarts_optimizer=1``, ``random_state=r``; K
both Matern(nu=2.5) and RBF, the fit of higher log marginal likelihood kept (a LinAlgError is
recorded and the fit retried once with alpha 1e-8).

**Judged** on held-out points of Q (``heldout_per_member`` per member, from Q's own stream after
its validation points, :func:`lwl.experiments.budget.heldout_population`), labelled without noise,
in the problem's own units: a physical posing's predictions are mapped back, (pred - 1e3) / 50,
so a model invariant to the units reads the same Err in all three posings. Err is the paper's
relative OOD error (members weighted as in the budget study).

**Verdict** per (problem, posing): :func:`lwl.evaluation.comparison.compare` of lwl's squared
errors against scikit-learn's on the same held-out points, draw r paired with draw r: the 95%
interval of the log of Err_lwl^2 / Err_sklearn^2 over the draws and the held-out points together
(Student's t with Satterthwaite's degrees of freedom; the project's rule for every verdict).
``ahead`` when the ratio's interval lies below 1, ``behind`` above, ``tie`` otherwise, and a tie
too where the ratio is within 2% of 1 (ties at a measured floor are ties). A model whose fit
raises, or whose predictions are not finite, on any draw loses the row (both: ``failed``).

**Calibration**: the share of held-out points whose fresh measurement (the noise-free label in
the deterministic posings, the label plus fresh noise of the training noise's sd in the noisy
one) lies within +-1 and +-2 ``std`` of the prediction, ``std`` as each model's
``predict(X, return_std=True)`` returns it (lwl's: as the GP's document states, the latent f's or a
new measurement's; scikit-learn's includes the fitted WhiteKernel), mapped back with / 50. A
calibrated predictive sd covers 68% and 95%.
"""

from __future__ import annotations

import time
import zlib

import numpy as np

from lwl.experiments.report import machine_words

POSINGS = ("standard", "physical", "physical-noisy")
SCALE_EXPONENTS = (-3.0, 5.0)  # the inputs' scales, 10^-3 .. 10^5, evenly in log
FAR_OFFSET = 1e6  # the offset of the input of the smallest scale
MODERATE_OFFSET = 20.0  # the other inputs' offsets: uniform in +-this times their scale
LABEL_OFFSET, LABEL_SCALE = 1e3, 50.0  # y_phys = LABEL_OFFSET + LABEL_SCALE * y
NOISE_SHARE = 0.01  # physical-noisy: noise sd / the training labels' sd
TIE_BAND = 0.02  # a ratio within 2% of 1 is a tie
NOISE_STREAM = 83  # the noisy posing's draws: [r, STREAM_AUDIT, 83, 0] training, [..., 1] held-out
SOURCE_PRESET = "full-2000"  # the budget study's preset whose problems these are
PREDICT_CHUNK = 5000  # held-out points per predict call (memory of scikit-learn's std)

PRESETS = {
    # the issue's: every problem, 1,000 labels, three draws, 2,000 held-out points per member of Q.
    # Cost, from the trial at 300 labels (one core, AMD EPYC): lwl's fit 1.2-2.4 s, scikit-learn's 2.4-4.0 s
    # (both kernels); at 1,000 labels scikit-learn's likelihood costs 15-27x more per step (d = 2..10): about
    # 1-3 min a fit, lwl's 5-20 s (its likelihood on a subset of 300, refined on all 1,000): 5-11 core-hours
    "full": dict(n=1000, draws=3, heldout_per_member=2000, problems=None),
    # the issue's problems and draws at 500 labels: what one session's two cores run beside the gp budget
    # study (about an hour with two workers; scikit-learn's fits are most of it)
    "full-500": dict(n=500, draws=3, heldout_per_member=2000, problems=None),
    # issue #83's gate: the points are each job's own training set (a budgeted gp job posed in the posing's
    # units, its budget n, seed r), lwl's model is the job's served GP. Cost per draw: the job (its design
    # and its fits) plus scikit-learn's two fits on n points
    "jobs-1000": dict(n=1000, draws=3, heldout_per_member=2000, problems=None, training="job"),
    "jobs-500": dict(n=500, draws=3, heldout_per_member=2000, problems=None, training="job"),
    "jobs-smoke": dict(n=80, draws=1, heldout_per_member=200, problems=("p07-kernel_expansion-d3-K5",),
                       training="job"),
    # a timing trial: one problem, one draw, 300 labels
    "trial-300": dict(n=300, draws=1, heldout_per_member=2000, problems=("table1-g1",)),
    # for the test suite: a smooth problem (a Gaussian kernel expansion in d = 3) and Sobol G in d = 2
    "smoke": dict(n=60, draws=1, heldout_per_member=200,
                  problems=("p07-kernel_expansion-d3-K5", "table1-g1")),
}


def _settings(cfg: dict) -> dict:
    """A preset as results.json stores it, with the posings' and the recipe's constants."""
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}
    out.update(source_preset=SOURCE_PRESET, scale_exponents=list(SCALE_EXPONENTS), far_offset=FAR_OFFSET,
               moderate_offset=MODERATE_OFFSET, label_offset=LABEL_OFFSET, label_scale=LABEL_SCALE,
               noise_share=NOISE_SHARE, tie_band=TIE_BAND, ridge=1e-3)
    return out


def problem_specs(cfg: dict) -> list[tuple[str, dict]]:
    """(key, spec) of the preset's problems, in the budget study's order."""
    from lwl.experiments import budget

    specs = budget.problem_specs(budget.PRESETS[SOURCE_PRESET])
    wanted = cfg.get("problems")
    if wanted:
        unknown = sorted(set(wanted) - {k for k, _ in specs})
        if unknown:
            raise ValueError(f"problems: no {', '.join(unknown)} among the gp budget study's problems; known: "
                             f"{', '.join(k for k, _ in specs)}")
        specs = [(k, s) for k, s in specs if k in wanted]
    return specs


def physical_map(key: str, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(offset, scale) of the physical posing's inputs, x_phys = offset + scale * x (module
    docstring): deterministic from the problem key."""
    rng = np.random.default_rng([zlib.crc32(key.encode()), NOISE_STREAM])
    exps = np.linspace(*SCALE_EXPONENTS, d) if d > 1 else np.array([SCALE_EXPONENTS[0]])
    scale = 10.0 ** rng.permutation(exps)
    offset = scale * rng.uniform(-MODERATE_OFFSET, MODERATE_OFFSET, d)
    offset[int(np.argmin(scale))] = FAR_OFFSET
    return offset, scale


def pose(posing: str, key: str, X: np.ndarray, y: np.ndarray | None = None):
    """The inputs (and labels) of ``posing``, noise aside: (X_posed, y_posed)."""
    if posing not in POSINGS:
        raise ValueError(f"posing: {posing!r} is not one of {', '.join(POSINGS)}")
    if posing == "standard":
        return X, y
    offset, scale = physical_map(key, X.shape[1])
    return offset + scale * X, (None if y is None else LABEL_OFFSET + LABEL_SCALE * y)


def unpose(posing: str, value: np.ndarray, std: bool = False) -> np.ndarray:
    """A prediction (``std``: a standard deviation) of ``posing`` in the problem's own units."""
    if posing == "standard":
        return value
    return value / LABEL_SCALE if std else (value - LABEL_OFFSET) / LABEL_SCALE


# -- the two models ----------------------------------------------------------------------------------
def fit_lwl(X, y, seed: int):
    """lwl's served GP at a job's defaults: (model, record)."""
    from lwl.models import train
    from lwl.models.gp import GPSpec

    t0 = time.perf_counter()
    gp = train(GPSpec(), X, y, ridge=1e-3, seed=seed)
    seconds = time.perf_counter() - t0
    return gp, _document_record(gp.to_spec(training_set=False), y, gp, seconds)


def posed_job(key: str, spec: dict, posing: str, n: int, seed: int, oracle, noise_sd: float) -> dict:
    """The gp budget study's job of a problem (budget ``n``, seed ``seed``, the default model gp) as a
    lab in ``posing`` sends it: Q's Gaussians and the family's start mapped to the posing's inputs
    (mean -> offset + scale * mean, cov -> S cov S), labels by the problem's oracle in the posing's
    units through an ``external`` oracle, with Gaussian noise of sd ``noise_sd`` (posing units,
    seeded by the draw). Returns the job's training set X, y (None where the job raised), a fit
    function serving the job's GP from its document, and the job's record."""
    import json

    from lwl.experiments.budget import _with
    from lwl.models import from_spec, model_document
    from lwl.oracles import Oracle, as_numpy
    from lwl.runner import run_job

    d = len(spec["test_distributions"]["members"][0]["gaussian"]["mean"])
    offset, scale = physical_map(key, d) if posing != "standard" else (np.zeros(d), np.ones(d))

    def gaussian(block: dict) -> dict:
        mean, cov = np.asarray(block["mean"], dtype=float), np.asarray(block["cov"], dtype=float)
        return {**block, "mean": (offset + scale * mean).tolist(), "cov": (cov * np.outer(scale, scale)).tolist()}

    posed = _with(spec, seed, algorithm={"name": "bilevel"}, budget=n, oracle={"name": "external"},
                  model={"name": "gp"}, device="cpu")
    posed["test_distributions"] = {**spec["test_distributions"], "members": [
        {**m, "gaussian": gaussian(m["gaussian"])} for m in spec["test_distributions"]["members"]]}
    if isinstance(spec.get("family"), dict) and "mean" in spec["family"]:
        posed["family"] = gaussian(spec["family"])
    noise = np.random.default_rng([seed, NOISE_STREAM, 2])
    problem, unit = oracle, posing != "standard"

    class Instrument(Oracle):
        name = "instrument"

        def __init__(self):
            super().__init__(d)

        def _label(self, x):
            u = (np.asarray(x, dtype=np.float64) - offset) / scale
            y = np.asarray(as_numpy(problem.label(u)), dtype=np.float64).reshape(-1)
            y = LABEL_OFFSET + LABEL_SCALE * y if unit else y
            return y + noise_sd * noise.standard_normal(len(y)) if noise_sd else y

    t0 = time.perf_counter()
    try:
        res = run_job(posed, oracle=Instrument(), evaluate=False)
    except (np.linalg.LinAlgError, ValueError, RuntimeError) as exc:
        return {"X": None, "y": None, "served": None,
                "record": {"error": f"{type(exc).__name__}: {exc}"[:400], "seconds": time.perf_counter() - t0}}
    record = {"seconds": time.perf_counter() - t0, "labels_used": int(res["labels_used"]),
              "selected": res.get("selected"), "model_fallback": res.get("model_fallback"),
              "warnings": [str(w)[:200] for w in res.get("warnings") or []]}
    document = json.loads(json.dumps(model_document(res)))

    def served(X, y, _seed):
        """The job's served GP (its document, as ``GET /model`` serves it): (model, record)."""
        gp = from_spec(document)
        return gp, _document_record(document, y, gp, record["seconds"])

    return {"X": np.asarray(res["training_set"]["inputs"], dtype=np.float64),
            "y": np.asarray(res["training_set"]["labels"], dtype=np.float64).reshape(-1),
            "served": served, "record": record}


def _document_record(doc: dict, y, gp, seconds: float) -> dict:
    """A GP document's fitted hyperparameters as the study records them (absent ones None), the
    noise sd also over the training labels' sd (comparable across posings)."""
    sd_y = float(np.std(y)) or 1.0
    outs = [{k: o.get(k) for k in ("lengthscale", "output_scale", "noise", "mean", "log_marginal_likelihood")}
            for o in doc.get("outputs", [])]
    for o in outs:
        o["noise_sd_over_label_sd"] = None if o["noise"] is None else float(np.sqrt(max(o["noise"], 0.0)) / sd_y)
    return {"kernel": doc.get("kernel"), "std": doc.get("std"), "outputs": outs, "fit_seconds": seconds,
            "fit_points": int(getattr(gp, "fit_points_", len(y)))}


def _sklearn_one(Xs, y, base, seed: int, alpha: float):
    import warnings

    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * base + WhiteKernel(1e-6, (1e-12, 1e0))
    gp = GaussianProcessRegressor(kernel, alpha=alpha, normalize_y=True, n_restarts_optimizer=1, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp.fit(Xs, y)
    return gp, sorted({str(w.message)[:160] for w in caught})


def fit_sklearn(X, y, seed: int):
    """The lab's scikit-learn recipe (module docstring): (predict(X, return_std) in the posing's
    units, record)."""
    from sklearn.gaussian_process.kernels import RBF, Matern
    from sklearn.preprocessing import StandardScaler

    d = X.shape[1]
    t0 = time.perf_counter()
    scaler = StandardScaler().fit(X)
    Xs = scaler.transform(X)
    fits, rec = {}, {"tried": {}, "errors": [], "retried": [], "warnings": []}
    for name, base in (("matern52", Matern(length_scale=np.ones(d), length_scale_bounds=(1e-3, 1e3), nu=2.5)),
                       ("rbf", RBF(length_scale=np.ones(d), length_scale_bounds=(1e-3, 1e3)))):
        try:
            gp, warned = _sklearn_one(Xs, y, base, seed, 1e-10)
        except np.linalg.LinAlgError as exc:
            rec["errors"].append(f"{name} alpha 1e-10: {exc}")
            rec["retried"].append(name)
            gp, warned = _sklearn_one(Xs, y, base, seed, 1e-8)  # a second failure raises: the draw fails
        fits[name] = gp
        rec["tried"][name] = float(gp.log_marginal_likelihood_value_)
        rec["warnings"] += [f"{name}: {w}" for w in warned]
    chosen = max(fits, key=lambda k: fits[k].log_marginal_likelihood_value_)
    gp = fits[chosen]
    rec["fit_seconds"] = time.perf_counter() - t0
    k = gp.kernel_
    rec.update(chosen=chosen, kernel=str(k), lengthscale=np.atleast_1d(k.k1.k2.length_scale).tolist(),
               output_scale=float(k.k1.k1.constant_value), noise=float(k.k2.noise_level),
               # normalize_y: the kernel is on labels scaled to unit variance
               noise_sd_over_label_sd=float(np.sqrt(k.k2.noise_level)),
               log_marginal_likelihood=float(gp.log_marginal_likelihood_value_))

    def predict(Z):
        return gp.predict(scaler.transform(Z), return_std=True)

    return predict, rec


def _chunked(predict, Z) -> tuple[np.ndarray, np.ndarray]:
    parts = [predict(Z[i:i + PREDICT_CHUNK]) for i in range(0, len(Z), PREDICT_CHUNK)]
    return (np.concatenate([np.asarray(m).reshape(-1) for m, _ in parts]),
            np.concatenate([np.asarray(s).reshape(-1) for _, s in parts]))


def coverage(measured: np.ndarray, mean: np.ndarray, std: np.ndarray) -> dict:
    """Shares of points whose measurement lies within +-1 and +-2 std of the prediction."""
    z = np.abs(measured - mean)
    return {"1sd": float(np.mean(z <= std)), "2sd": float(np.mean(z <= 2 * std))}


def _judge(predict, posing, test_x_posed, test_y, measured, a) -> tuple[dict, np.ndarray | None]:
    """Err, calibration and per-point squared errors of one fitted model on the held-out points
    (in the problem's units); squared errors None where a prediction is not finite."""
    from lwl.evaluation.metrics import relative_ood_error

    t0 = time.perf_counter()
    mu, sd = _chunked(predict, test_x_posed)
    mu, sd = unpose(posing, mu), unpose(posing, sd, std=True)
    out = {"predict_seconds": time.perf_counter() - t0}
    if not (np.isfinite(mu).all() and np.isfinite(sd).all()):
        out["error"] = (f"{int((~np.isfinite(mu)).sum())} non-finite predictions, {int((~np.isfinite(sd)).sum())} "
                        f"non-finite std of {len(mu)}")
        return out, None
    out["err"] = relative_ood_error(mu, test_y, a)
    out["coverage"] = coverage(measured, mu, sd)
    out["median_std_over_abs_error"] = float(np.median(sd / np.maximum(np.abs(mu - test_y), 1e-300)))
    return out, (mu - test_y) ** 2


# -- one row -----------------------------------------------------------------------------------------
def verdict_of(ratio: float | None, interval, outcome: str | None) -> str:
    """The row's verdict from its numbers (module docstring): ``outcome`` is the comparison's
    (better / tie / worse for lwl), ``interval`` the 95% interval of Err_lwl / Err_sklearn."""
    if outcome is None or ratio is None:
        return "failed"
    if abs(ratio - 1.0) <= TIE_BAND:
        return "tie"
    return {"better": "ahead", "worse": "behind", "tie": "tie"}[outcome]


def problem_data(key: str, spec: dict, cfg: dict) -> dict:
    """A problem's oracle, Q's mixture, its held-out points and labels (common to every posing)."""
    from lwl.evaluation.baselines import mixture
    from lwl.experiments.budget import heldout_population
    from lwl.measures import on_domain
    from lwl.oracles import as_numpy
    from lwl.q_samples import MetaTestSamples
    from lwl.spec import parse_job_spec

    rspec = parse_job_spec(spec)
    oracle = rspec.oracle.build()
    q_own = MetaTestSamples.from_spec(rspec.test_distributions, rspec.seed)
    q = MetaTestSamples.from_spec(heldout_population(rspec.test_distributions, cfg), rspec.seed)
    test_x = np.concatenate(q.heldout)
    test_y = as_numpy(oracle.label(test_x)).reshape(-1)
    return {"seed": rspec.seed, "oracle": oracle, "mixture": on_domain(mixture(q_own), rspec, q_own),
            "test_x": test_x, "test_y": test_y, "a": q.point_weights(q.heldout, q.weights),
            "sizes": [len(h) for h in q.heldout], "weights": q.weights}


def run_row(key: str, spec: dict, cfg: dict, posing: str) -> dict:
    """One (problem, posing): every draw's two fits, Errs and calibration, and the verdict."""
    from lwl.evaluation.comparison import compare
    from lwl.oracles import as_numpy
    from lwl.streams import STREAM_AUDIT

    t_row = time.perf_counter()
    P = problem_data(key, spec, cfg)
    test_x, test_y, a = P["test_x"], P["test_y"], P["a"]
    d = test_x.shape[1]
    test_x_posed, _ = pose(posing, key, test_x)
    row: dict = {"problem": key, "posing": posing, "d": d, "n": cfg["n"], "held_out": len(test_y), "draws": [],
                 "computed_on": machine_words()}
    if posing != "standard":
        offset, scale = physical_map(key, d)
        row["inputs"] = {"offset": offset.tolist(), "scale": scale.tolist()}
    sq = {"lwl": [], "sklearn": []}
    from_job = cfg.get("training", "mixture") == "job"
    for r in range(cfg["draws"]):
        measured = test_y
        draw: dict = {"draw": r}
        if from_job:
            # the instrument's noise: 1% of the labels' spread over Q (the job cannot know its labels' sd first)
            sd = NOISE_SHARE * LABEL_SCALE * float(np.std(test_y)) if posing == "physical-noisy" else 0.0
            job = posed_job(key, spec, posing, cfg["n"], r, P["oracle"], sd)
            draw["job"] = job["record"]
            Xp, yp = job["X"], job["y"]
        else:
            X = P["mixture"].sample(cfg["n"], [P["seed"], STREAM_AUDIT, r])
            y = as_numpy(P["oracle"].label(X)).reshape(-1)
            Xp, yp = pose(posing, key, X, y)
            sd = NOISE_SHARE * float(np.std(yp)) if posing == "physical-noisy" else 0.0
            if sd:
                yp = yp + sd * np.random.default_rng([r, STREAM_AUDIT, NOISE_STREAM, 0]).standard_normal(len(yp))
        if posing == "physical-noisy":
            # a fresh measurement of every held-out point, in the problem's units
            measured = test_y + (sd / LABEL_SCALE) * np.random.default_rng(
                [r, STREAM_AUDIT, NOISE_STREAM, 1]).standard_normal(len(test_y))
            draw["noise_sd"] = sd
        for name, fit in (("lwl", fit_lwl), ("sklearn", fit_sklearn)):
            t0 = time.perf_counter()
            if Xp is None:  # the job failed: no training set for either model
                draw[name], _ = {"error": f"no training set: {job['record']['error']}", "fit_seconds": 0.0}, None
                sq[name].append(None)
                continue
            if from_job and name == "lwl":
                fit = job["served"]
            try:
                model, rec = fit(Xp, yp, r)
                predict = (lambda Z, m=model: m.predict(Z, return_std=True)) if name == "lwl" else model
                judged, e = _judge(predict, posing, test_x_posed, test_y, measured, a)
                rec.update(judged)
            except (np.linalg.LinAlgError, ValueError, RuntimeError) as exc:  # torch's LinAlgError is a RuntimeError
                rec, e = {"error": f"{type(exc).__name__}: {exc}"[:400],
                          "fit_seconds": time.perf_counter() - t0}, None
            draw[name] = rec
            sq[name].append(e)
        ok = draw["lwl"].get("err") is not None and draw["sklearn"].get("err") is not None
        draw["ratio"] = (draw["lwl"]["err"] / draw["sklearn"]["err"]
                         if ok and draw["sklearn"]["err"] > 0 else None)
        row["draws"].append(draw)
    row.update(_row_verdict(sq, test_y, P["sizes"], P["weights"], compare))
    if any(x.get("job", {}).get("error") for x in row["draws"]):  # a job that fails is lwl's loss
        row.update(verdict="behind", why="the budgeted job failed on a draw (its error in the draw's job record)")
    ratios = [dr["ratio"] for dr in row["draws"] if dr.get("ratio")]
    row["geo_mean_ratio"] = (float(np.exp(np.mean(np.log(ratios)))) if ratios and len(ratios) == len(row["draws"])
                             else None)
    for name in ("lwl", "sklearn"):
        cov = [dr[name]["coverage"] for dr in row["draws"] if dr[name].get("coverage")]
        row[f"coverage_{name}"] = ({k: float(np.mean([c[k] for c in cov])) for k in ("1sd", "2sd")}
                                   if cov else None)
    row["seconds"] = time.perf_counter() - t_row
    return row


def _row_verdict(sq: dict, test_y, sizes, weights, compare) -> dict:
    lwl_failed = any(e is None for e in sq["lwl"])
    sk_failed = any(e is None for e in sq["sklearn"])
    out: dict = {"err_lwl": None, "err_sklearn": None, "ratio": None, "ratio_interval": None, "comparison": None}
    if lwl_failed or sk_failed:
        out["verdict"] = "failed" if lwl_failed and sk_failed else "behind" if lwl_failed else "ahead"
        out["why"] = ("both models failed on a draw" if lwl_failed and sk_failed else
                      f"{'lwl' if lwl_failed else 'sklearn'} failed on a draw (error in its draw record)")
        return out
    c = compare(np.stack(sq["lwl"]), np.stack(sq["sklearn"]), test_y**2, sizes, weights)
    out.update(err_lwl=c.err, err_sklearn=c.other_err, ratio=c.ratio,
               ratio_interval=list(c.ratio_interval) if c.ratio_interval else None,
               comparison=c.to_json())
    out["verdict"] = verdict_of(c.ratio, c.ratio_interval, c.outcome.value)
    return out


# -- the study ---------------------------------------------------------------------------------------
def summary(rows: list[dict]) -> dict:
    """Per posing: the verdicts' counts, the median ratio and median coverage."""
    out = {}
    for posing in POSINGS:
        rs = [r for r in rows if r["posing"] == posing]
        if not rs:
            continue
        ratios = [r["ratio"] for r in rs if r.get("ratio") is not None]
        out[posing] = {"rows": len(rs), **{v: sum(r["verdict"] == v for r in rs)
                                          for v in ("ahead", "tie", "behind", "failed")},
                       "median_ratio": float(np.median(ratios)) if ratios else None}
        for name in ("lwl", "sklearn"):
            for k in ("2sd", "1sd"):
                v = [r[f"coverage_{name}"][k] for r in rs if r.get(f"coverage_{name}")]
                out[posing][f"median_coverage_{k}_{name}"] = float(np.median(v)) if v else None
    return out


def _doc(preset, cfg, rows, seconds, workers, reused, problems) -> dict:
    doc = {"experiment": "gp-units", "preset": preset, "settings": _settings(cfg), "rows": rows,
           "summary": summary(rows), "wall_seconds": seconds, "workers": workers, "reused_rows": reused}
    if problems:
        doc["problems"] = list(problems)
    return doc


def reusable_rows(previous: dict | None, cfg: dict) -> dict[tuple[str, str], dict]:
    """Rows of an earlier results.json made with the same settings, by (problem, posing)."""
    if not previous or previous.get("experiment") != "gp-units" or previous.get("settings") != _settings(cfg):
        return {}
    return {(r["problem"], r["posing"]): r for r in previous.get("rows", [])}


def run(preset: str = "smoke", *, problems: list[str] | None = None, workers: int = 1, previous: dict | None = None,
        progress=None, checkpoint=None, posings=POSINGS) -> dict:
    """Every (problem, posing) row of the preset (``problems``: a subset by key); ``workers`` > 1
    runs rows in that many processes, each on one BLAS and one torch thread (as one process does:
    rows do not depend on it). Rows of ``previous`` made with the same settings are kept
    (``--resume``); ``checkpoint(doc)`` is called after every new row."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    cfg = dict(PRESETS[preset])
    specs = problem_specs({**cfg, "problems": problems} if problems else cfg)  # ValueError naming an unknown one
    todo = [(key, spec, cfg, posing) for key, spec in specs for posing in posings]
    order = {(t[0], t[3]): i for i, t in enumerate(todo)}
    reuse = reusable_rows(previous, cfg)
    done = {k: r for k, r in reuse.items() if k in order}
    fresh = [t for t in todo if (t[0], t[3]) not in done]
    t_all = time.perf_counter() - (previous.get("wall_seconds", 0.0) if done else 0.0)

    def rows() -> list[dict]:
        return sorted(done.values(), key=lambda r: order[(r["problem"], r["posing"])])

    def finished(row: dict) -> None:
        done[(row["problem"], row["posing"])] = row
        if progress:
            progress(row)
        if checkpoint:
            checkpoint(_doc(preset, cfg, rows(), time.perf_counter() - t_all, workers, len(todo) - len(fresh),
                            problems))

    if workers > 1:
        from lwl.experiments.report import as_finished

        for _, row in as_finished(run_row, fresh, workers):
            finished(row)
    else:
        from lwl.experiments.report import single_threaded

        for task in fresh:
            with single_threaded():
                row = run_row(*task)
            finished(row)
    return _doc(preset, cfg, rows(), time.perf_counter() - t_all, workers, len(todo) - len(fresh), problems)


# -- outputs -----------------------------------------------------------------------------------------
def _f(x, fmt=".4g") -> str:
    return "-" if x is None else format(x, fmt)


def _lwl_fit_words(rec: dict) -> str:
    if rec.get("error"):
        return "failed"
    noise = rec["outputs"][0].get("noise_sd_over_label_sd") if rec.get("outputs") else None
    return f"{rec.get('kernel')}, noise sd {_f(noise, '.2g')}"


def markdown(doc: dict) -> str:
    s = doc["settings"]
    lines = [f"# lwl's GP against scikit-learn's in the problem's units and a lab's ({doc['preset']}, "
             f"{len({r['problem'] for r in doc['rows']})} problems)", ""]
    if doc.get("problems"):
        lines += [f"Problems chosen with `--problems`: {', '.join(doc['problems'])} (not the whole preset).", ""]
    expected = len(problem_specs(PRESETS[doc["preset"]]) if not doc.get("problems") else doc["problems"]) * len(POSINGS)
    if len(doc["rows"]) < expected:
        lines += [f"**Partial: {len(doc['rows'])} of {expected} rows** (the study was stopped; `--resume` continues "
                  "it).", ""]
    lines += [
        "Issue #83's model-against-model study (lwl.experiments.gp_units). For each of the gp budget study's "
        f"problems ({s['source_preset']}'s 22: Table 1's columns and the robustness problems) and each of "
        f"{s['draws']} draws r, " + _training_words(s), "",
        "Three posings of the same points: **standard** (as the problem poses them); **physical** (input j "
        "mapped to offset_j + scale_j x_j, the scales spread evenly in log from 1e-3 to 1e5, assigned to the "
        "inputs by a permutation seeded by the problem key; the input of scale 1e-3 offset by 1e6, the others "
        f"by up to +-{s['moderate_offset']:g} of their scale; labels {s['label_offset']:g} + {s['label_scale']:g} y); "
        f"**physical-noisy** (physical, with Gaussian noise of sd {s['noise_share']:.0%} of the "
        + ("labels' sd over Q's held-out points added to every label the job asks for)."
           if s.get("training") == "job" else "training labels' sd added to the training labels).")
        + " The job's Q and family start are mapped with its inputs (mean to offset + scale mean, cov to S cov S)."
        * (s.get("training") == "job"), "",
        "Models: **lwl** is "
        + ("the job's served GP (its model document through `lwl.models.from_spec`, as `GET /v1/jobs/{id}/model` "
           "serves it)" if s.get("training") == "job" else
           "the served GP at a job's defaults (`lwl.models.train(GPSpec(), X, y, ridge=1e-3, seed=r)`)")
        + "; **sklearn** is the lab's recipe: StandardScaler on X, normalize_y, ConstantKernel(1, (1e-3, "
        "1e3)) * K(ones(d), (1e-3, 1e3)) + WhiteKernel(1e-6, (1e-12, 1)), alpha 1e-10, one restart, "
        "random_state r, K both Matern 5/2 and RBF, the fit of higher log marginal likelihood kept (a "
        "LinAlgError retried once at alpha 1e-8).", "",
        f"Judged on {s['heldout_per_member']:,} held-out points per member of Q (Q's own stream after its "
        "validation points), labelled without noise, in the problem's units: the physical posings' "
        f"predictions mapped back, (pred - {s['label_offset']:g}) / {s['label_scale']:g}, so a model "
        "invariant to the units reads one Err in all three posings. Err: the paper's relative OOD error.", "",
        "**Verdict** (lwl against sklearn): `lwl.evaluation.comparison.compare` of the two models' squared "
        "errors on the same held-out points, draw r paired with draw r: the 95% interval of log(Err_lwl^2 / "
        "Err_sklearn^2) over the draws and the held-out points together (Student's t, Satterthwaite's df), the "
        "rule of every verdict of the project. `ahead` where the ratio's interval lies below 1, `behind` above, "
        f"`tie` otherwise, and `tie` where the ratio is within {s['tie_band']:.0%} of 1 (ties at a measured "
        "floor are ties). A model whose fit raises or whose predictions are not finite on any draw loses the "
        "row. Ratio: Err_lwl / Err_sklearn over the draws (Err^2 averaged over draws); per draw: each draw's.", "",
        "**Calibration**: the share of held-out points whose fresh measurement (the noise-free label; in the "
        "noisy posing, the label plus fresh noise of the same sd) lies within +-1 and +-2 `std` of the "
        "prediction, `std` as `predict(X, return_std=True)` returns it, mapped back with / "
        f"{s['label_scale']:g} (a calibrated predictive sd covers 68% and 95%). lwl's std: "
        f"{_std_words(doc)}; sklearn's includes its fitted WhiteKernel.", "",
        f"Wall time {doc['wall_seconds'] / 60:.1f} min ({doc['wall_seconds']:.0f} s)"
        + (f" ({doc['workers']} processes)" if doc.get("workers", 1) > 1 else "") + ".", "",
        "| posing | rows | lwl ahead / tie / behind (failed) | median ratio lwl/sklearn | lwl: median share "
        "within 1 / 2 sd | sklearn: median share within 1 / 2 sd |",
        "|---|---:|---|---:|---|---|"]
    for posing, c in doc["summary"].items():
        lines.append(f"| {posing} | {c['rows']} | {c['ahead']} / {c['tie']} / {c['behind']} ({c['failed']}) | "
                     f"{_f(c['median_ratio'], '.3f')} | {_f(c['median_coverage_1sd_lwl'], '.2f')} / "
                     f"{_f(c['median_coverage_2sd_lwl'], '.2f')} | {_f(c['median_coverage_1sd_sklearn'], '.2f')} / "
                     f"{_f(c['median_coverage_2sd_sklearn'], '.2f')} |")
    lines += ["", "## Rows", "",
              "lwl fit: the kernel lwl's GP kept and its fitted noise sd over the training labels' sd (sklearn: "
              "the WhiteKernel's sd on the normalised labels, in results.json); fit s: each draw's fitting seconds "
              "(scikit-learn's: both kernels).", "",
              "| problem | posing | d | lwl Err (per draw) | sklearn Err (per draw) | ratio per draw | geo. mean "
              "ratio | ratio [95%] | verdict | lwl within 1 / 2 sd | sklearn within 1 / 2 sd | lwl fit | sklearn "
              "kernel | fit s lwl / sklearn |",
              "|---|---|---:|---|---|---|---:|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        dr, ci = r["draws"], r.get("ratio_interval")
        errs = {name: ", ".join("failed" if x[name].get("error") else _f(x[name].get("err")) for x in dr)
                for name in ("lwl", "sklearn")}
        cov = {name: (f"{r[f'coverage_{name}']['1sd']:.2f} / {r[f'coverage_{name}']['2sd']:.2f}"
                      if r.get(f"coverage_{name}") else "-") for name in ("lwl", "sklearn")}
        secs = "; ".join(f"{x['lwl'].get('fit_seconds', 0):.1f} / {x['sklearn'].get('fit_seconds', 0):.1f}" for x in dr)
        lines.append(f"| {r['problem']} | {r['posing']} | {r['d']} | {errs['lwl']} | {errs['sklearn']} | "
                     f"{', '.join(_f(x.get('ratio'), '.3f') for x in dr)} | {_f(r.get('geo_mean_ratio'), '.3f')} | "
                     + (f"{r['ratio']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else _f(r.get("ratio"), ".3f"))
                     + f" | {r['verdict']} | {cov['lwl']} | {cov['sklearn']} | "
                     f"{'; '.join(_lwl_fit_words(x['lwl']) for x in dr)} | "
                     f"{'; '.join(x['sklearn'].get('chosen', 'failed') for x in dr)} | {secs} |")
    failures = [(r["problem"], r["posing"], x["draw"], name, x[name]["error"]) for r in doc["rows"]
                for x in r["draws"] for name in ("lwl", "sklearn") if x[name].get("error")]
    if failures:
        lines += ["", "## Failures", ""] + [f"- {p} {pos} draw {k}, {name}: {why}" for p, pos, k, name, why in failures]
    lines += ["", "Figure: `log_ratio.png`, log10(Err_lwl / Err_sklearn) per problem, posing and draw "
              "(a failed draw is not drawn).", ""]
    return "\n".join(lines)


def _training_words(s: dict) -> str:
    """Where a study's training points come from (its preset's ``training``)."""
    if s.get("training") == "job":
        return (f"a budgeted job (the gp budget study's spec, budget {s['n']:,}, seed r, the default model gp) "
                "posed in the posing's units and labelled through an external oracle as a lab labels; both models "
                "get the job's training set (the points its served GP conditions on; its validation labels are paid "
                "but not among them).")
    return (f"{s['n']:,} inputs of Q's mixture (the equal-labels verdict's mixture draw r), labelled by the oracle; "
            "both models get exactly the same points. No budgeted job runs here (for cost): the points are what a "
            "lab holding Q's mixture would label.")


def _std_words(doc: dict) -> str:
    kinds = sorted({x["lwl"]["std"] for r in doc["rows"] for x in r["draws"] if x["lwl"].get("std")})
    return "; ".join(f'"{k}"' for k in kinds) if kinds else "not recorded"


def write_outputs(doc: dict, out_dir) -> list:
    from lwl.experiments.report import pyplot, save_figure, write_tables

    out, _, paths = write_tables(doc, out_dir, markdown)
    if not doc["rows"]:
        return paths
    plt = pyplot()
    problems = list(dict.fromkeys(r["problem"] for r in doc["rows"]))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(problems) + 2), 4.2))
    shift = {p: (i - 1) * 0.22 for i, p in enumerate(POSINGS)}
    marks = {"standard": "o", "physical": "s", "physical-noisy": "^"}
    for posing in POSINGS:
        xs, ys = [], []
        for r in doc["rows"]:
            if r["posing"] != posing:
                continue
            for x in r["draws"]:
                if x.get("ratio"):
                    xs.append(problems.index(r["problem"]) + shift[posing])
                    ys.append(np.log10(x["ratio"]))
        ax.plot(xs, ys, marks[posing], ms=4, alpha=0.8, label=posing, linestyle="none")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(range(len(problems)))
    ax.set_xticklabels(problems, rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("log10(Err lwl / Err sklearn)")
    ax.set_title(f"lwl's GP against scikit-learn's, by posing ({doc['preset']}); below 0: lwl lower", fontsize=9)
    ax.legend(fontsize=7)
    paths.append(save_figure(fig, out / "log_ratio.png", dpi=110))
    return paths


# -- the README's budgeted example: does its served std cover fresh measurements? -----------------

README_EXAMPLE = "examples/friedman1_budget.json"


def readme_calibration(heldout_per_member: int = 20_000, progress=None) -> dict:
    """The README's budgeted ask/tell job (``examples/friedman1_budget.json``, model gp, 2,000 labels)
    run with Friedman 1 as its lab, then its served GP judged on fresh points of Q (``heldout_per_member``
    per member, from the job's own Q stream after its validation points): held-out Err, and the shares of
    fresh measurements within 1 and 2 of the served ``std`` (a new measurement's) and of the latent std
    alone, beside the job's own closed-form estimate of them (``model_diagnosis``)."""
    import json
    from pathlib import Path

    from lwl.evaluation.metrics import relative_ood_error
    from lwl.experiments.budget import heldout_population
    from lwl.models import from_spec, model_document
    from lwl.oracles import as_numpy, make_oracle
    from lwl.q_samples import MetaTestSamples
    from lwl.runner import run_job
    from lwl.spec import parse_job_spec

    root = Path(__file__).resolve().parents[2]
    spec = json.loads((root / README_EXAMPLE).read_text())
    oracle = make_oracle({"name": "friedman1"})
    t0 = time.perf_counter()
    res = run_job(spec, oracle=oracle, evaluate=False)
    seconds = time.perf_counter() - t0
    rspec = parse_job_spec(res["spec"])
    q = MetaTestSamples.from_spec(heldout_population(rspec.test_distributions,
                                                     {"heldout_per_member": heldout_per_member}), rspec.seed)
    X = np.concatenate(q.heldout)
    y = np.asarray(as_numpy(oracle.label(X)), dtype=np.float64).reshape(-1)
    a = q.point_weights(q.heldout, q.weights)
    gp = from_spec(json.loads(json.dumps(model_document(res))))
    mean, measurement, latent = gp.predict_stds(X)
    within = {f"{name}_{k}sd": float(np.mean(np.abs(y - mean) <= k * sd))
              for name, sd in (("measurement", measurement), ("latent", latent)) for k in (1, 2)}
    out = {"example": README_EXAMPLE, "labels": int(res["labels_used"]), "heldout_points": int(len(X)),
           "err": float(relative_ood_error(mean, y, a)), "coverage": within,
           "median_abs_error": float(np.median(np.abs(y - mean))), "median_std": float(np.median(measurement)),
           "median_latent_std": float(np.median(latent)), "kernel": gp.kernel_, "noise": float(gp.noise_[0]),
           "model_diagnosis": res.get("model_diagnosis"), "warnings": res.get("warnings"),
           "verdict": (res.get("verdict") or {}).get("outcome"), "job_seconds": seconds,
           "computed_on": machine_words()}
    if progress:
        progress(out)
    return out


def readme_markdown(doc: dict) -> str:
    c = doc["coverage"]
    diag = ((doc.get("model_diagnosis") or {}).get("outputs") or [{}])[0]
    return "\n".join([
        "# The README's budgeted example: the served std against fresh measurements",
        "",
        f"`{doc['example']}` (model gp) run with Friedman 1 as its lab ({doc['labels']} labels, "
        f"{doc['job_seconds']:.0f} s), its served GP (`{doc['kernel']}`, noise {doc['noise']:.4g}) judged on "
        f"{doc['heldout_points']} fresh points of Q (the job's own Q stream after its validation points).",
        "",
        "| held-out Err | within 1 sd | within 2 sd | within 2 latent sd | median abs error | median sd | median latent sd "
        "| job's LOO estimate: within 1 / 2 sd |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {doc['err']:.4g} | {c['measurement_1sd']:.1%} | {c['measurement_2sd']:.1%} | {c['latent_2sd']:.1%} "
        f"| {doc['median_abs_error']:.3g} | {doc['median_std']:.3g} | {doc['median_latent_std']:.3g} "
        f"| {_f(diag.get('loo_coverage_1sd'), '.1%')} / {_f(diag.get('loo_coverage_2sd'), '.1%')} |",
        "",
        f"Verdict of the job: {doc['verdict']}. Computed on {doc['computed_on']}.",
        ""])
