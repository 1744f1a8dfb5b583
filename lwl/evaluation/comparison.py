"""Held-out comparisons over several training draws: Err with an interval, and better / tie / worse.

A trained model's held-out error has two sources of randomness: the training draw (which N
points the distribution happened to give) and the held-out points (which Q samples it is
scored on). A verdict from one training draw, with an interval over the held-out points only,
says "better" on a lucky draw. Here every candidate is trained on R draws and scored on the
same n held-out points, giving squared errors e[r, i]; the quantity of interest is

    Err^2 = E_draw E_Q |G_hat - G*|^2 / E_Q |G*|^2,

estimated by sum_i a_i mean_r e[r, i] / sum_i a_i y_i^2 (a_i = w_k / n_k for point i of member
k, the paper's weighting, :mod:`lwl.evaluation`).

**Variance** (a two-way crossed design: draws x points, points stratified by Q's members). For
a per-cell statistic t[r, i] (a squared error, or the difference of two candidates' squared
errors on the same point), write t = mu + alpha_r + beta_i + gamma_ri. The weighted grand mean
has variance

    Var = s_alpha^2 / R + sum_k w_k^2 (s_beta,k^2 + s_gamma,k^2 / R) / n_k,

estimated without bias by the ANOVA moments: the spread of the R draw means (each over all
points) gives s_alpha^2 + (point-noise of the interaction)/n, the stratified spread of the n
point means (each over all draws) gives s_beta^2 + s_gamma^2 / R, and the residual mean square
gives s_gamma^2, whose share counted twice is subtracted once. The interval uses Student's t
with Satterthwaite's degrees of freedom: with R = 5 draws the draw term has only 4, and a
normal quantile would cover ~88% instead of 95%.

Two candidates are compared point by point on the same held-out points, so the points' own
difficulty cancels; with common random numbers (the same draw index from the same seed,
:mod:`lwl.streams`) so does much of the training draw's. Distributions that cannot share draws
are compared the same way: pairing independent draws by index leaves the estimator unbiased,
only wider.

**The interval is on the log of the ratio** Err_a^2 / Err_b^2 (``scale="log"``, the default):
the delta method with the influence z[r, i] = e_a[r, i] / num_a - e_b[r, i] / num_b (num: the
weighted mean squared error; the normalisation by E_Q |G*|^2 cancels), its variance from
:func:`two_way_variance` and Student's t with Satterthwaite's df, as :func:`error_interval` does for
one Err. Squared errors of a fitted model are heavy-tailed across training draws (one draw with a
poorly fitted lengthscale carries most of the mean), and a symmetric interval on the linear
difference Err_a^2 - Err_b^2 (``scale="linear"``, the rule before issue #46's calibration) then
reaches below -Err_b^2, an impossible value: a design 3.7-16x below every one of five mixture draws
was called a tie. On the gp budget study's own problems (docs/results/comparison-coverage,
docs/method/evaluation.md "Comparisons: the verdict's interval is on the log of the Err ratio") the log rule
covers the population's ratio 92-93% where the design clearly wins and calls every such
replication better, where the linear rule's interval reaches ratio 0 and ties 7-21% of them; the
two agree where the draws barely spread. Where the labels themselves are extremely heavy-tailed
(Sobol G at d >= 7) neither rule covers (p12: about half the time): the held-out points' term
rests on a few tail points.

The outcome is ``better`` when the interval of the ratio lies below 1, ``worse`` when above,
``tie`` otherwise (identical candidates give a zero-width interval at 1: a tie). A candidate with
zero error on every point (an exact interpolant) has no log: the linear rule decides then.
Non-finite squared errors (a model whose predictions diverged) or held-out labels (a failed solve)
are refused with :class:`NonFiniteErrors`, naming the candidate or the labels: there is no Err to
compare, and a verdict of `tie` (what NaN gave before) would hide it.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95


class Outcome(str, enum.Enum):
    """The three-valued verdict of a comparison of held-out Err."""

    BETTER = "better"
    TIE = "tie"
    WORSE = "worse"


class NonFiniteErrors(ValueError):
    """A candidate's squared errors are not all finite (its model's predictions diverged)."""


def _finite(name: str, sq: np.ndarray) -> None:
    bad = ~np.isfinite(sq)
    if bad.any():
        raise NonFiniteErrors(f"{name}: {int(bad.any(0).sum())} of {sq.shape[1]} held-out points have "
                              f"non-finite squared errors in {int(bad.any(1).sum())} of {len(sq)} training "
                              "draws (the model's predictions diverged, or a held-out label is not finite); "
                              "no verdict is given")


@dataclass(frozen=True)
class Comparison:
    """Candidate a against candidate b on the same held-out points (Err of each over the draws).

    ``ratio`` = Err_a / Err_b and its interval; ``diff_sq`` = Err_a^2 - Err_b^2 and the interval
    the ratio's implies for it with Err_b at its estimate (on the log scale; on the linear scale the
    ratio's is derived from the difference's the same way); ``outcome`` from either, they agree in
    sign."""

    outcome: Outcome
    err: float
    other_err: float
    ratio: float | None
    ratio_interval: tuple[float, float] | None
    diff_sq: float
    diff_sq_interval: tuple[float, float]
    draws: int
    level: float = LEVEL

    def to_json(self) -> dict:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        # lists, as JSON reads them back: a stored result equals the library's
        for key in ("ratio_interval", "diff_sq_interval"):
            if out[key] is not None:
                out[key] = list(out[key])
        return out


def _strata(sizes) -> list[slice]:
    bounds = np.cumsum([0, *sizes])
    return [slice(int(bounds[k]), int(bounds[k + 1])) for k in range(len(sizes))]


def two_way_variance(t: np.ndarray, sizes, weights) -> tuple[float, float]:
    """(variance, degrees of freedom) of mean_weighted(t) for t of shape (R, n): draws x held-out
    points, the points in strata of ``sizes`` (Q's members, in order) weighted ``weights``
    (normalised here); the weighted mean is sum_k w_k mean_{r, i in k} t[r, i]. See the module
    docstring for the estimator."""
    t = np.asarray(t, dtype=np.float64)
    if t.ndim == 1:
        t = t[None, :]
    R, n = t.shape
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    parts = _strata(sizes)
    if parts[-1].stop != n:
        raise ValueError(f"strata sizes sum to {parts[-1].stop}, but t has {n} points")
    # draw term: the weighted mean of each draw over all points, spread across draws
    row = sum(wk * t[:, p].mean(1) for wk, p in zip(w, parts))
    var_row = float(row.var(ddof=1)) / R if R > 1 else 0.0
    # point term, per stratum: each point's mean over draws; residual: the interaction
    var_col, resid_overlap, df_col_terms = 0.0, 0.0, 0.0
    col_means = t.mean(0)
    for wk, p in zip(w, parts):
        nk = p.stop - p.start
        if nk < 2:
            continue
        vk = wk**2 * float(col_means[p].var(ddof=1)) / nk
        var_col += vk
        df_col_terms += vk**2 / (nk - 1)
        if R > 1:
            block = t[:, p]
            resid = block - block.mean(1, keepdims=True) - block.mean(0, keepdims=True) + block.mean()
            s2_gamma = float((resid**2).sum()) / ((R - 1) * (nk - 1))
            resid_overlap += wk**2 * s2_gamma / (R * nk)
    var = var_row + var_col - resid_overlap
    # the subtraction can undershoot in small samples; never below either main term alone
    var = max(var, var_row, var_col - resid_overlap, 0.0)
    terms = (var_row**2 / (R - 1) if R > 1 else 0.0) + df_col_terms
    df = var**2 / terms if terms > 0 else float("inf")
    return var, max(df, 1.0)


def _quantile(df: float, level: float) -> float:
    return float(stats.t.ppf(0.5 + level / 2, df)) if np.isfinite(df) else float(stats.norm.ppf(0.5 + level / 2))


def _weighted_mean(t: np.ndarray, sizes, weights) -> float:
    """sum_k w_k mean_{r, i in k} t[r, i] (w normalised; the last axis holds the points)."""
    w = np.asarray(weights, dtype=np.float64)
    return float(sum(wk * t[..., p].mean() for wk, p in zip(w / w.sum(), _strata(sizes))))


def err_squared(sq: np.ndarray, y2: np.ndarray, sizes, weights) -> float:
    """Err^2 = sum_k w_k mean_{r, i in k} e[r, i] / sum_k w_k mean_{i in k} y_i^2."""
    sq = np.atleast_2d(np.asarray(sq, dtype=np.float64))
    return _weighted_mean(sq, sizes, weights) / _weighted_mean(np.asarray(y2, dtype=np.float64), sizes, weights)


def error_interval(sq: np.ndarray, y2: np.ndarray, sizes, weights, level: float = LEVEL) -> tuple[float, float]:
    """Interval of Err over training draws and held-out points together (rows of ``sq`` are
    draws). The delta method on log Err^2 with the influence z = (e - Err^2 y^2) / den, whose
    variance is :func:`two_way_variance`; Err = sqrt(R exp(-/+ q se / R))."""
    sq = np.atleast_2d(np.asarray(sq, dtype=np.float64))
    y2 = np.asarray(y2, dtype=np.float64)
    r2 = err_squared(sq, y2, sizes, weights)
    if r2 <= 0:
        return 0.0, 0.0
    den = _weighted_mean(y2, sizes, weights)
    var, df = two_way_variance((sq - r2 * y2[None, :]) / den, sizes, weights)
    half = _quantile(df, level) * np.sqrt(var) / r2
    return float(np.sqrt(r2 * np.exp(-half))), float(np.sqrt(r2 * np.exp(half)))


ROUNDING = 1e-9  # relative size of differences in Err^2 that are rounding, not a difference


def _linear(sq_a, sq_b, ea: float, eb: float, den: float, sizes, weights, level) -> tuple[float, float]:
    """(lo, hi) of the difference Err_a^2 - Err_b^2 (module docstring)."""
    var, df = two_way_variance((sq_a - sq_b) / den, sizes, weights)
    # a floor of floating-point noise: the same distribution drawn through two code paths (Q's
    # mixture returned by the design, and the mixture baseline) differs in the last digits, and
    # a near-zero variance must not turn that into "worse"
    half = _quantile(df, level) * np.sqrt(var) + ROUNDING * (ea + eb)
    return ea - eb - half, ea - eb + half


def _log_ratio(sq_a, sq_b, ea: float, eb: float, den: float, sizes, weights, level) -> tuple[float, float]:
    """(lo, hi) of log(Err_a^2 / Err_b^2) by the delta method (module docstring); ea, eb > 0."""
    var, df = two_way_variance(sq_a / (ea * den) - sq_b / (eb * den), sizes, weights)
    log_ratio = float(np.log(ea / eb))
    half = _quantile(df, level) * np.sqrt(var) + 2 * ROUNDING  # the rounding floor, on the log scale
    return log_ratio - half, log_ratio + half


SCALES = ("log", "linear")


def compare(sq_a: np.ndarray, sq_b: np.ndarray, y2: np.ndarray, sizes, weights,
            level: float = LEVEL, scale: str = "log") -> Comparison:
    """Candidate a against b: per-point squared errors (draws x points) on the same held-out
    points, draw r of a paired with draw r of b (the fewer draws of the two are used); the
    interval on ``scale`` (module docstring: ``"log"`` of the ratio, or the ``"linear"``
    difference of Err^2)."""
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {SCALES}, got {scale!r}")
    sq_a = np.atleast_2d(np.asarray(sq_a, dtype=np.float64))
    sq_b = np.atleast_2d(np.asarray(sq_b, dtype=np.float64))
    R = min(len(sq_a), len(sq_b))
    sq_a, sq_b = sq_a[:R], sq_b[:R]
    _finite("candidate a", sq_a)
    _finite("candidate b", sq_b)
    y2 = np.asarray(y2, dtype=np.float64)
    if not np.isfinite(y2).all():
        raise NonFiniteErrors(f"held-out labels: {int((~np.isfinite(y2)).sum())} of {len(y2)} are not finite "
                              "(a failed solve or measurement); no verdict is given")
    ea, eb = err_squared(sq_a, y2, sizes, weights), err_squared(sq_b, y2, sizes, weights)
    den = _weighted_mean(y2, sizes, weights)
    if scale == "log" and ea > 0 and eb > 0:
        llo, lhi = _log_ratio(sq_a, sq_b, ea, eb, den, sizes, weights, level)
        # the difference's interval as the ratio's implies it (Err_b^2 at its estimate)
        lo, hi = eb * float(np.expm1(llo)), eb * float(np.expm1(lhi))
        ratio_interval = (float(np.exp(llo / 2)), float(np.exp(lhi / 2)))
    else:
        lo, hi = _linear(sq_a, sq_b, ea, eb, den, sizes, weights, level)
        ratio_interval = ((float(np.sqrt(max(eb + lo, 0.0) / eb)), float(np.sqrt(max(eb + hi, 0.0) / eb)))
                          if eb > 0 else None)
    outcome = Outcome.BETTER if hi < 0 else Outcome.WORSE if lo > 0 else Outcome.TIE
    ratio = float(np.sqrt(ea / eb)) if eb > 0 else None
    return Comparison(outcome=outcome, err=float(np.sqrt(ea)), other_err=float(np.sqrt(eb)), ratio=ratio,
                      ratio_interval=ratio_interval, diff_sq=float(ea - eb), diff_sq_interval=(float(lo), float(hi)),
                      draws=R, level=level)


@dataclass(frozen=True)
class OverSeeds:
    """Candidate a against b replicated over independent seeds (each seed its own training draw of
    a, its own draws of b and its own held-out points): ``ratio`` is the geometric mean of the
    seeds' Err ratios Err_a / Err_b, ``ratio_interval`` its interval (:func:`compare_over_seeds`)."""

    outcome: Outcome
    ratio: float
    ratio_interval: tuple[float, float]
    ratios: tuple[float, ...]
    level: float = LEVEL

    def to_json(self) -> dict:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        out["ratio_interval"], out["ratios"] = list(self.ratio_interval), list(self.ratios)
        return out


def compare_over_seeds(ratios, level: float = LEVEL) -> OverSeeds:
    """The verdict of a over b from S >= 2 seeds' Err ratios r_s = Err_a,s / Err_b,s: Student's t
    interval of the mean of log r_s with S - 1 degrees of freedom, exp'd (the geometric mean of the
    ratios). Why: a comparison within one seed (:func:`compare`) holds one of the candidates' training
    sets fixed (a job's training set is one product), so its interval covers b's draws and the held-out
    points but not a's own draw; repeated over seeds, the spread of log r_s carries every source of
    randomness at once (a's draw, b's, Q's samples, the held-out points). Better / worse when the
    interval lies below / above 1, tie otherwise."""
    r = np.asarray(ratios, dtype=np.float64).ravel()
    if len(r) < 2:
        raise ValueError(f"ratios: a verdict over seeds needs at least two seeds' ratios, got {len(r)}")
    if not np.all(np.isfinite(r) & (r > 0)):
        raise ValueError(f"ratios: every seed's Err ratio must be a positive finite number, got {r.tolist()}")
    logs = np.log(r)
    half = _quantile(len(r) - 1, level) * float(logs.std(ddof=1)) / np.sqrt(len(r))
    lo, hi = float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))
    outcome = Outcome.BETTER if hi < 1 else Outcome.WORSE if lo > 1 else Outcome.TIE
    return OverSeeds(outcome=outcome, ratio=float(np.exp(logs.mean())), ratio_interval=(lo, hi),
                     ratios=tuple(float(x) for x in r), level=level)
