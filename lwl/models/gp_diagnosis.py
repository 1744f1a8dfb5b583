"""What a fitted Gaussian process says about the problem it was fitted to (docs/method/gp-diagnosis.md, "What the
served GP says about the problem").

The fitted noise variance sigma_n^2 is the part of the labels the GP does not explain by the
function. A prediction at a new point misses at least that part, so the relative error
Err = sqrt(E_Q (f_hat - y)^2 / E_Q y^2) of the served model on Q has about the floor

    Err >= sqrt(sigma_n^2 / E_Q y^2) = sqrt(noise share),

E_Q y^2 estimated on labelled points of Q (a budgeted job's validation labels, each member
weighted by its w_k). It is a floor when the noise is independent of the point: with a simulator
whose labels carry no measurement noise, a noise share well above the noise's lower bound
(1e-10 Var(y), or what float64 resolves; lwl.models.gp.GaussianProcess.noise_floor) is structure of the function the GP could not resolve from these labels, e.g. an
oscillation faster than the points are spaced, which more labels of the same kind lower and a
richer prediction of the same labels usually does not (Friedman 1 with a wide Q: docs/method/gp-diagnosis.md).
At that lower bound the noise is a nugget, the GP interpolates, and the reading is no floor
(a smooth function's Err falls below it); the warning threshold, a 1% floor, is far above it.

The lengthscales are not read as a list of irrelevant inputs: a term linear in an input is fitted
with a lengthscale as long as that of an input the function ignores (and a large output scale),
so neither the lengthscale nor s ell_d^-1 separates the two (measured on Friedman 1: the linear
x_5 and the unused x_6 both at 0.1 of the labels' spread per input spread).

**The served model's Err on Q, estimated from its own labels** (``loo_err``). Q's validation
points are training points of the served GP, drawn from Q's members, so the closed-form
leave-one-out residuals there (:meth:`lwl.models.GaussianProcess.loo_residuals`, R&W eq. 5.12)
estimate what a fresh point of Q costs:

    loo_err = sqrt(sum_i a_i r_i^2 / sum_i a_i y_i^2),   a_i = w_k / M_k,

the relative Err of the study's held-out judge with r_i the residual of point i predicted from the
others. It can read low (the hyperparameters were fitted with point i, and the fit kept the
optimum of lowest leave-one-out error) or high (heavy-tailed labels: a few points far from the
rest dominate both sums): on the 22 problems of the gp study at 2,000 labels it was 0.52-1.82 times
the held-out Err (docs/method/gp-diagnosis.md, "What the served GP says about the problem"). Where the model
explains little of the labels, the noise floor above can read low (on Sobol G at d = 7 the GP
interpolates heavy-tailed labels with a small noise, floor 0.009, held-out Err 0.83) while this
reads high (1.51 there), so a ``loo_err`` of :data:`POOR_FIT_WARNING` or more is a warning of its own.

**Is the error bar honest?** (``loo_coverage_1sd``, ``loo_coverage_2sd``). The same closed form
gives the std of each left-out prediction of the measurement y_i, 1 / sqrt([K_y^{-1}]_ii)
(R&W eq. 5.12: the latent variance plus the noise), so the share of Q's validation labels within
1 and 2 of those stds of their left-out prediction, members weighted as above, is the coverage a
lab will see of fresh measurements by the served ``std`` (a calibrated Gaussian: 68% and 95%). A
2-sd coverage below :data:`COVERAGE_WARNING` is a warning: the served ``std`` is too narrow there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from lwl.models.diagnosis import FIT_ERRORS, ModelDiagnosis

NOISE_FLOOR_WARNING = 0.01  # a floor on Err this high is worth a warning (a 1% relative error)
# an estimated Err this high says the served model explains little of the labels on Q: the gp study's
# problems read <= 0.025 except Sobol G at d >= 7 (0.43-1.51, held-out 0.79-1.0; docs/method/gp-diagnosis.md)
POOR_FIT_WARNING = 0.25
# a share of Q's validation labels within 2 served sd (left out in turn) below this: the error bar is too narrow
COVERAGE_WARNING = 0.85


@dataclass(frozen=True)
class OutputDiagnosis:
    """One output's reading of the fitted hyperparameters."""

    noise_share: float  # sigma_n^2 / E_Q y^2
    err_floor: float  # sqrt(noise_share): the relative Err the noise alone costs
    loo_err: float | None = None  # the served model's Err on Q estimated by leave-one-out (module docstring)
    loo_coverage_1sd: float | None = None  # share of Q's validation labels within 1 served sd, left out in turn
    loo_coverage_2sd: float | None = None  # ... within 2 (module docstring)


def diagnose(noise, labels, weights=None, loo_residuals=None, loo_std=None) -> list[OutputDiagnosis]:
    """The reading of each output (module docstring): ``noise`` the fitted sigma_n^2 per output,
    ``labels`` (n,) or (n, p) labels of points of Q, ``weights`` theirs in E_Q (None: equal),
    ``loo_residuals`` the served model's leave-one-out residuals at those points and ``loo_std``
    the std of those predictions of the measurement, each shaped as ``labels`` (None: no
    ``loo_err``, no coverage)."""
    noise = np.atleast_1d(np.asarray(noise, dtype=np.float64))
    y = np.asarray(labels, dtype=np.float64).reshape(len(labels), -1)
    if y.shape[1] != len(noise):
        raise ValueError(f"labels: {y.shape[1]} output(s) for {len(noise)} noise value(s)")
    w = np.full(len(y), 1.0) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(y),):
        raise ValueError(f"weights: {w.shape} for {len(y)} labels")
    r = None if loo_residuals is None else np.asarray(loo_residuals, dtype=np.float64)
    if r is not None and r.ndim == 1 and y.shape[1] == 1:  # (n,) for one output; (p, n) is refused, not reshaped
        r = r[:, None]
    if r is not None and r.shape != y.shape:
        raise ValueError(f"loo_residuals: {r.shape} for labels {y.shape}")
    sd = None if loo_std is None else np.asarray(loo_std, dtype=np.float64)
    if sd is not None and sd.ndim == 1 and y.shape[1] == 1:
        sd = sd[:, None]
    if sd is not None and (r is None or sd.shape != y.shape):
        raise ValueError(f"loo_std: {sd.shape} for labels {y.shape} (and residuals beside it)")
    out = []
    for j in range(len(noise)):
        square = float(w @ y[:, j] ** 2 / w.sum()) or 1.0
        share = float(noise[j]) / square
        loo = None if r is None else float(np.sqrt(w @ r[:, j] ** 2 / w.sum() / square))
        cover = [None, None]
        if sd is not None:
            z = np.abs(r[:, j]) / np.maximum(sd[:, j], np.finfo(np.float64).tiny)
            cover = [float(w @ (z <= k) / w.sum()) for k in (1.0, 2.0)]
        out.append(OutputDiagnosis(noise_share=share, err_floor=float(np.sqrt(share)), loo_err=loo,
                                   loo_coverage_1sd=cover[0], loo_coverage_2sd=cover[1]))
    return out


def diagnose_document(doc: dict, labels, weights=None, loo_residuals=None,
                      loo_std=None) -> list[OutputDiagnosis] | None:
    """:func:`diagnose` of a model document (:meth:`lwl.models.GaussianProcess.to_spec`) on
    labels of Q; None for a model without a fitted noise (KRR, operator networks)."""
    if not doc or doc.get("model") != "gp":
        return None
    return diagnose([o["noise"] for o in doc["outputs"]], labels, weights, loo_residuals, loo_std)


def to_json(diagnosis: list[OutputDiagnosis], loo_residuals=None, loo_std=None) -> dict:
    """The result's ``model_diagnosis`` block. With ``loo_residuals`` and ``loo_std`` (as given to
    :func:`diagnose`), each output also carries them as lists (``loo_residuals``, ``loo_sd``: one per
    validation label of Q, in the labels' units): the dashboard's leave-one-out chart."""
    outputs = [asdict(d) for d in diagnosis]
    if loo_residuals is not None and loo_std is not None:
        r = np.asarray(loo_residuals, dtype=np.float64).reshape(len(loo_residuals), -1)
        sd = np.asarray(loo_std, dtype=np.float64).reshape(len(loo_std), -1)
        for j, out in enumerate(outputs):
            out["loo_residuals"] = r[:, j].tolist()
            out["loo_sd"] = sd[:, j].tolist()
    return {"outputs": outputs,
            "equation": "err_floor = sqrt(noise / E_Q y^2), E_Q over Q's validation labels, members weighted; "
                        "loo_err = sqrt(E_Q r^2 / E_Q y^2), r the served model's leave-one-out residual at each of "
                        "them (an estimate of its held-out Err on Q from its own labels); loo_coverage_ksd = E_Q "
                        "[|r| <= k sd], sd the std of that left-out prediction of the measurement (latent + noise)"}


def warnings(diagnosis: list[OutputDiagnosis]) -> list[str]:
    """A warning for each output whose Err floor is at least :data:`NOISE_FLOOR_WARNING`, and for
    each whose estimated Err (``loo_err``) is at least :data:`POOR_FIT_WARNING`."""
    out = []
    many = len(diagnosis) > 1
    for j, d in enumerate(diagnosis):
        where = f" (output {j})" if many else ""
        if d.loo_err is not None and d.loo_err >= POOR_FIT_WARNING:
            out.append(f"The model explains little of the labels on Q at this budget{where}: predicting each of Q's "
                       f"validation labels from all the others, it misses by a relative Err of {d.loo_err:.3g} "
                       f"(0 is perfect, 1 is no better than predicting 0). Its error on new points of Q is likely "
                       f"of that size: check it on labels of your own before relying on its predictions; more labels "
                       f"or another model may do better.")
        if d.loo_coverage_2sd is not None and d.loo_coverage_2sd < COVERAGE_WARNING:
            out.append(f"The model's error bar is too narrow on Q{where}: only {d.loo_coverage_2sd:.0%} of Q's "
                       f"validation labels lie within 2 standard deviations of its prediction made without them "
                       f"({d.loo_coverage_1sd:.0%} within 1; an honest error bar covers about 95% and 68%). Widen "
                       f"the served std before using it as an error bar.")
        if d.err_floor < NOISE_FLOOR_WARNING:
            continue
        out.append(f"The model reads {d.noise_share:.2%} of the labels' mean square on Q as measurement "
                   f"noise{where}, so its relative Err on Q will not go much below {d.err_floor:.3g}. If your "
                   f"oracle's labels carry no measurement noise, that part of the function is unresolved at this "
                   f"budget (often a variation faster than the points are spaced): more labels lower it. If they "
                   f"do carry noise of about that size, this is expected and nothing needs doing.")
    return out


def stalled_search_warnings(stalled, kernel: str) -> list[str]:
    """One warning naming the outputs whose likelihood search never left its start
    (:meth:`lwl.models.GaussianProcess.search_stalled`; none if no output's did): their
    hyperparameters are the start's, not a fit to the labels."""
    stalled = np.asarray(stalled, dtype=bool)
    if not stalled.any():
        return []
    which = "" if len(stalled) == 1 else " of output " + ", ".join(str(j) for j in np.flatnonzero(stalled))
    return [f"The served GP's hyperparameters{which} ({kernel}) are the likelihood search's start, not a fit to the "
            "labels: the values given as the start or, by default, the data's scales (each input's spread as its "
            "lengthscale, Var(y) as the output scale, Var(y)/100 as the noise). The search's first step met a "
            "region where the kernel matrix does not factor and it stopped there, so the predictions and the std "
            "are those of these scales, not of the labels' best fit; more random starts (model.restarts) give "
            "the search other places to begin (docs/method/gp.md, \"The served GP in a lab's units\")."]


class LeaveOneOut(Protocol):
    """A conditioned GP's closed-form leave-one-out (:meth:`lwl.models.GaussianProcess.loo`)."""

    def loo(self, rows=None) -> tuple[np.ndarray, np.ndarray]: ...


def served_diagnosis(gp: LeaveOneOut, document: dict, labels, weights, loo_rows=None) -> ModelDiagnosis:
    """The served GP's :class:`lwl.models.diagnosis.Diagnosable` hook: :func:`diagnose_document` of
    its ``document`` on Q's validation ``labels``, with the leave-one-out residuals and stds at its
    training rows ``loo_rows`` (:meth:`lwl.models.GaussianProcess.loo`; None: none), as the result's
    ``model_diagnosis`` block (:func:`to_json`) and its :func:`warnings`. A reading that raises one of
    the fit errors is missing, and a warning says why: the model is served as fitted."""
    try:
        # residuals and the std of each left-out prediction of the measurement (its coverage)
        loo, loo_sd = gp.loo(loo_rows) if loo_rows is not None else (None, None)
        diagnosis = diagnose_document(document, labels, weights, loo, loo_sd)
        block = None if diagnosis is None else to_json(diagnosis, loo, loo_sd)
    except FIT_ERRORS as exc:
        failed = (f"the served GP's diagnosis (model_diagnosis) could not be computed "
                  f"({type(exc).__name__.lstrip('_')}: {exc}); the model is served as fitted")
        return ModelDiagnosis(None, [failed])
    return ModelDiagnosis(block, warnings(diagnosis) if diagnosis is not None else [])
