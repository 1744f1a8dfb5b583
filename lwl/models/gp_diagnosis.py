"""What a fitted Gaussian process says about the problem it was fitted to (docs/method.md, "What the
served GP says about the problem").

The fitted noise variance sigma_n^2 is the part of the labels the GP does not explain by the
function. A prediction at a new point misses at least that part, so the relative error
Err = sqrt(E_Q (f_hat - y)^2 / E_Q y^2) of the served model on Q has about the floor

    Err >= sqrt(sigma_n^2 / E_Q y^2) = sqrt(noise share),

E_Q y^2 estimated on labelled points of Q (a budgeted job's validation labels, each member
weighted by its w_k). It is a floor when the noise is independent of the point: with a simulator
whose labels carry no measurement noise, a noise share well above the noise's lower bound
(1e-6 Var(y)) is structure of the function the GP could not resolve from these labels, e.g. an
oscillation faster than the points are spaced, which more labels of the same kind lower and a
richer prediction of the same labels usually does not (Friedman 1 with a wide Q: docs/method.md).
At that lower bound the noise is a nugget, the GP interpolates, and the reading is no floor
(a smooth function's Err falls below it); the warning threshold, a 1% floor, is far above it.

The lengthscales are not read as a list of irrelevant inputs: a term linear in an input is fitted
with a lengthscale as long as that of an input the function ignores (and a large output scale),
so neither the lengthscale nor s ell_d^-1 separates the two (measured on Friedman 1: the linear
x_5 and the unused x_6 both at 0.1 of the labels' spread per input spread).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

NOISE_FLOOR_WARNING = 0.01  # a floor on Err this high is worth a warning (a 1% relative error)


@dataclass(frozen=True)
class OutputDiagnosis:
    """One output's reading of the fitted hyperparameters."""

    noise_share: float  # sigma_n^2 / E_Q y^2
    err_floor: float  # sqrt(noise_share): the relative Err the noise alone costs


def diagnose(noise, labels, weights=None) -> list[OutputDiagnosis]:
    """The reading of each output (module docstring): ``noise`` the fitted sigma_n^2 per output,
    ``labels`` (n,) or (n, p) labels of points of Q, ``weights`` theirs in E_Q (None: equal)."""
    noise = np.atleast_1d(np.asarray(noise, dtype=np.float64))
    y = np.asarray(labels, dtype=np.float64).reshape(len(labels), -1)
    if y.shape[1] != len(noise):
        raise ValueError(f"labels: {y.shape[1]} output(s) for {len(noise)} noise value(s)")
    w = np.full(len(y), 1.0) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(y),):
        raise ValueError(f"weights: {w.shape} for {len(y)} labels")
    out = []
    for j in range(len(noise)):
        square = float(w @ y[:, j] ** 2 / w.sum()) or 1.0
        share = float(noise[j]) / square
        out.append(OutputDiagnosis(noise_share=share, err_floor=float(np.sqrt(share))))
    return out


def diagnose_document(doc: dict, labels, weights=None) -> list[OutputDiagnosis] | None:
    """:func:`diagnose` of a model document (:meth:`lwl.models.GaussianProcess.to_spec`) on
    labels of Q; None for a model without a fitted noise (KRR, operator networks)."""
    if not doc or doc.get("model") != "gp":
        return None
    return diagnose([o["noise"] for o in doc["outputs"]], labels, weights)


def to_json(diagnosis: list[OutputDiagnosis]) -> dict:
    """The result's ``model_diagnosis`` block."""
    return {"outputs": [asdict(d) for d in diagnosis],
            "equation": "err_floor = sqrt(noise / E_Q y^2), E_Q over Q's validation labels, members weighted"}


def warnings(diagnosis: list[OutputDiagnosis]) -> list[str]:
    """A warning for each output whose Err floor is at least :data:`NOISE_FLOOR_WARNING`."""
    out = []
    many = len(diagnosis) > 1
    for j, d in enumerate(diagnosis):
        if d.err_floor < NOISE_FLOOR_WARNING:
            continue
        where = f" (output {j})" if many else ""
        out.append(f"the served GP takes {d.noise_share:.2%} of Q's mean square label for noise{where}, so its "
                   f"held-out Err on Q will not go much below {d.err_floor:.3g}: if the oracle's labels carry no "
                   f"measurement noise, that part of the function is unresolved at this budget")
    return out
