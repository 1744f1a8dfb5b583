"""The paper's OOD upper bound (Prop. 3.1 / Cor. 3.2) of a trained model, with its constants.

For Lipschitz maps G* and G and any training law nu,

    E_Q(G) <= E_nu ||G* - G||^2 + sqrt(E_Q c^2) sqrt(E_Q W2^2(nu, nu')),
    c^2 = (L + R)^2 (4 (L + R)^2 (m2(nu) + m2(nu')) + 16 (||G*(0)||^2 + ||G(0)||^2)),

L = Lip(G*), R = Lip(G). The bound is *rigorous* only when every constant is: W2 by the Bures
formula (Gaussian design and Gaussian members), m2 in closed form, R <= sqrt(2)/l ||G||_H for
kernel ridge regression with the squared-exponential kernel k = exp(-r^2 / l^2) (|f(x) - f(y)| <=
||f||_H ||k_x - k_y||_H = ||f||_H sqrt(2 - 2 k(x, y)) <= ||f||_H sqrt(2) r / l), and L analytic
(``Oracle.lipschitz_bound``; the kernel expansion g4 has one). Otherwise the missing constant is
estimated (sampled Lipschitz ratios, empirical W2 between samples, Monte Carlo second moments)
and the result says which. E_nu ||G* - G||^2 is always a Monte Carlo mean on fresh samples of nu
(reported with its standard error).

The bound is usually *vacuous* for the relative error (err_bound = sqrt(bound / E_Q(0)) >= 1):
its second term measures how far nu is from Q times the maps' Lipschitz constants and carries no
information about how well G fits G*. docs/method/evaluation.md says when it is informative.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def bound_constant_squared(L: float, R: float, m2_nu, m2_q, zero_sq):
    """c^2 = (L + R)^2 (4 (L + R)^2 (m2(nu) + m2(nu')) + 16 (||G*(0)||^2 + ||G(0)||^2))."""
    s = L + R
    return s * s * (4 * s * s * (m2_nu + m2_q) + 16 * zero_sq)


def ood_upper_bound(train_error: float, lip_true: float, lip_model: float, m2_design: float,
                    m2_members, w2_sq_members, zero_sq: float, weights) -> dict[str, float]:
    """Cor. 3.2 over Q = sum_k w_k delta_{nu'_k}: the bound and its two terms."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    c2 = bound_constant_squared(lip_true, lip_model, m2_design, np.asarray(m2_members, dtype=np.float64), zero_sq)
    shift = float(np.sqrt(w @ c2) * np.sqrt(w @ np.asarray(w2_sq_members, dtype=np.float64)))
    return {"bound": train_error + shift, "train_error": train_error, "shift_term": shift,
            "c_sq_q": float(w @ c2), "w2_sq_q": float(w @ np.asarray(w2_sq_members, dtype=np.float64))}


def krr_lipschitz(model) -> float:
    """sqrt(2)/l ||G||_H for a fitted :class:`lwl.models.KernelRidge` with the squared-exponential
    kernel, ||G||_H^2 = beta' K beta; the Laplace kernel's functions need not be Lipschitz (inf)."""
    if model.kernel != "squared_exponential":
        return float("inf")
    import torch

    with torch.no_grad():
        K = model.kernel_matrix(model.X_, model.X_)
        norm_sq = float(model.coef_ @ (K @ model.coef_))
    return float(np.sqrt(2.0) / model.lengthscale * np.sqrt(max(norm_sq, 0.0)))


def second_moment(measure, origin=None) -> float:
    """m2 = E||u - origin||^2 = ||mean - origin||^2 + tr(cov), exact for any law with those moments."""
    m, C = measure.mean_and_cov()
    if origin is not None:
        m = m - origin
    return float(m @ m + np.trace(C))


def bilevel_bound(spec, q, design, oracle, model, heldout_err_sq: float, zero_q: float,
                  n_mc: int = 2000, pairs: int = 250) -> dict[str, Any]:
    """The bound for a bilevel job's evaluated model (KRR trained on the design), next to its
    measured held-out E_Q(G) = ``heldout_err_sq`` (squared, absolute) and E_Q(0) = ``zero_q``."""
    from lwl.lipschitz import lipschitz_pairs, lipschitz_ratio
    from lwl.measures import Gaussian
    from lwl.oracles import as_numpy
    from lwl.streams import STREAM_BOUND
    from lwl.transport import empirical_w2_squared, gaussian_w2_squared

    from lwl.measures import constrain

    exact: dict[str, bool] = {}
    # with an input domain the oracle is asked inside it only: the bound is taken about a point x0
    # of the domain instead of 0 (Prop. 3.1 for u -> G(u + x0): W2 and the Lipschitz constants are
    # unchanged, m2 becomes E||u - x0||^2 and G(0) becomes G(x0))
    domain = spec.domain.build() if getattr(spec, "domain", None) is not None else None
    x0 = domain.reference_point() if domain is not None else np.zeros(q.dim)
    x = design.sample(n_mc, [spec.seed, STREAM_BOUND, 0])
    r2 = (as_numpy(oracle.label(x)) - model.predict(x)) ** 2
    train_error = float(r2.mean())
    members = spec.test_distributions.members
    gaussians = [Gaussian(m.gaussian.mean, cov=m.gaussian.cov) if m.gaussian is not None else None for m in members]
    m2_members, w2 = [], []
    for k, (g, samples) in enumerate(zip(gaussians, q.members)):
        if g is not None and domain is None:
            m2_members.append(second_moment(g, x0))
        else:  # (a Gaussian member restricted to the domain is known by its samples)
            m2_members.append(float(((samples - x0) ** 2).sum(1).mean()))
        if g is not None and isinstance(design, Gaussian):
            w2.append(float(gaussian_w2_squared(design.mean, design.cov, g.mean, g.cov)))
        else:
            held = q.heldout[k]
            w2.append(empirical_w2_squared(design.sample(len(held), [spec.seed, STREAM_BOUND, 1, k]), held))
    exact["w2"] = isinstance(design, Gaussian) and all(g is not None for g in gaussians)
    exact["m2"] = all(g is not None for g in gaussians) and domain is None
    lip_model = krr_lipschitz(model)
    exact["lipschitz_model"] = bool(np.isfinite(lip_model))
    analytic = getattr(oracle, "lipschitz_bound", None)
    lip_true = analytic() if callable(analytic) else None
    exact["lipschitz_oracle"] = lip_true is not None
    if lip_true is None:
        a, b = lipschitz_pairs([design, *[constrain(_gaussian(s), domain) for s in q.validation]], pairs,
                               [spec.seed, STREAM_BOUND, 2])
        lip_true = lipschitz_ratio(as_numpy(oracle.label(a)).reshape(len(a), -1),
                                   as_numpy(oracle.label(b)).reshape(len(b), -1), a, b)
    zero = x0[None, :]
    zero_sq = float(np.sum(as_numpy(oracle.label(zero)) ** 2) + np.sum(model.predict(zero) ** 2))
    out = ood_upper_bound(train_error, lip_true, lip_model, second_moment(design, x0), m2_members, w2, zero_sq,
                          q.weights)
    out.update(train_error_se=float(r2.std(ddof=1) / np.sqrt(len(r2))), lipschitz_oracle=float(lip_true),
               lipschitz_model=lip_model, heldout_error=heldout_err_sq, zero_error=zero_q,
               err=float(np.sqrt(heldout_err_sq / zero_q)), err_bound=float(np.sqrt(out["bound"] / zero_q)),
               ratio_to_heldout=float(out["bound"] / heldout_err_sq) if heldout_err_sq > 0 else None,
               exact=exact, rigorous=bool(all(exact.values())))
    if domain is not None:
        out["origin"] = x0.tolist()  # the bound's reference point x0 (module docstring of bilevel_bound)
    out["vacuous"] = out["err_bound"] >= 1.0  # no better than predicting 0
    return out


def _gaussian(x: np.ndarray):
    """The moment-matched Gaussian of samples (where the Lipschitz pairs are drawn)."""
    from lwl.measures.gaussian import moment_matched, regularised_cholesky
    from lwl.measures import Gaussian

    m, C = moment_matched(x, np.ones(len(x)))
    return Gaussian(m, regularised_cholesky(C))
