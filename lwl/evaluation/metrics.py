"""The paper's accuracy metric, Err = sqrt(E_Q(G) / E_Q(0)) (SM eqn app_err_eval_bilevel), and
the KRR error every verdict is built from.

Numerator and denominator are both averaged over all K members (weights w_k) and each
member's held-out samples, then the root is taken.
"""

from __future__ import annotations

import numpy as np

from lwl.models import KernelRidge


def relative_ood_error(pred: np.ndarray, truth: np.ndarray, point_weights: np.ndarray) -> float:
    """sqrt(sum_i a_i |truth_i - pred_i|^2 / sum_i a_i |truth_i|^2) over stacked Q samples.

    ``pred`` and ``truth`` are matched row by row whatever their shapes ((n,), (n, 1), (n, m)):
    an (n, 1) truth against an (n,) prediction must not broadcast to an (n, n) difference."""
    truth = np.asarray(truth).reshape(len(point_weights), -1)
    pred = np.asarray(pred)
    if pred.size != truth.size:
        raise ValueError(f"pred: {pred.size} values for {truth.size} labels")
    diff = truth - pred.reshape(truth.shape)
    num = float(point_weights @ (diff**2).sum(1))
    den = float(point_weights @ (truth**2).sum(1))
    return float(np.sqrt(num / den))


def relative_error_interval(pred: np.ndarray, truth: np.ndarray, members: list[int], member_weights,
                            level: float = 0.95) -> tuple[float, float]:
    """A confidence interval for the model's Err on Q from its held-out samples.

    Err^2 = R = N / D with N = sum_k w_k mean_{i in k} e_i, D = sum_k w_k mean_{i in k} y_i^2
    (e_i the squared error, y_i the label of held-out point i; the points of member k are i.i.d.
    draws of nu'_k, ``members`` gives how many points each member has, in order). The delta
    method on log R, with the linearised influence z_i = (e_i - R y_i^2) / D, gives
    Var(log R) = sum_k w_k^2 Var_k(z) / (n_k R^2) and the interval
    sqrt(R exp(-/+ q se)), q the normal quantile. It covers the error of *this trained model*
    (the randomness of the held-out points), not the spread over training sets."""
    from scipy.stats import norm

    truth = np.asarray(truth, dtype=np.float64).reshape(sum(members), -1)
    e = ((truth - np.asarray(pred, dtype=np.float64).reshape(truth.shape)) ** 2).sum(1)
    y2 = (truth**2).sum(1)
    w = np.asarray(member_weights, dtype=np.float64)
    w = w / w.sum()
    bounds = np.cumsum([0, *members])
    parts = [slice(bounds[k], bounds[k + 1]) for k in range(len(members))]
    num = sum(wk * e[p].mean() for wk, p in zip(w, parts))
    den = sum(wk * y2[p].mean() for wk, p in zip(w, parts))
    R = num / den
    if R <= 0:
        return 0.0, 0.0
    z = (e - R * y2) / den
    var = sum(wk**2 * z[p].var(ddof=1) / (p.stop - p.start) for wk, p in zip(w, parts) if p.stop - p.start > 1)
    half = norm.ppf(0.5 + level / 2) * np.sqrt(var) / R
    return float(np.sqrt(R * np.exp(-half))), float(np.sqrt(R * np.exp(half)))


def member_relative_error(pairs, member_weights=None, output_weights=1.0) -> float:
    """Relative OOD error of an operator model (SM eqn app_ntd_rel_ood_error): with (Y_k, P_k)
    the oracle's and the model's outputs on samples of member k and ||.||_w the output grid's
    quadrature norm, sqrt(sum_k w_k mean_n ||Y_k - P_k||_w^2 / sum_k w_k mean_n ||Y_k||_w^2);
    ``member_weights=None`` weights the members equally (1/K)."""
    num, den = [], []
    for truth, pred in pairs:
        truth = np.asarray(truth).reshape(len(truth), -1)
        num.append(np.mean(((truth - np.asarray(pred).reshape(truth.shape)) ** 2 * output_weights).sum(1)))
        den.append(np.mean((truth**2 * output_weights).sum(1)))
    if member_weights is None:
        return float(np.sqrt(np.mean(num) / np.mean(den)))
    n = d = 0.0
    for w, a, b in zip(member_weights, num, den):  # accumulated in member order, as before
        n += w * a
        d += w * b
    return float(np.sqrt(n / d))


def krr_error(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray,
              point_weights: np.ndarray, *, kernel: str, lengthscale: float, ridge: float,
              device: str = "cpu", keep: dict | None = None) -> float:
    """Err of kernel ridge regression trained on (train_x, train_y) with N sigma^2 = ridge.

    The paper's final models use sigma^2 = 1e-3 / N, i.e. ``ridge = 1e-3``. ``keep``, if given,
    receives the fitted ``model`` and its predictions ``pred`` on ``test_x``.
    """
    n = len(train_x)
    model = KernelRidge(kernel, lengthscale, sigma2=ridge / n, device=device).fit(train_x, train_y)
    pred = model.predict(test_x)
    if keep is not None:
        keep.update(model=model, pred=pred)
    return relative_ood_error(pred, test_y, point_weights)


def sq_errors(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per held-out point squared error |G_hat - G*|^2 (summed over output components)."""
    truth = np.asarray(truth, dtype=np.float64)
    diff = truth.reshape(len(truth), -1) - np.asarray(pred, dtype=np.float64).reshape(len(truth), -1)
    return (diff**2).sum(1)
