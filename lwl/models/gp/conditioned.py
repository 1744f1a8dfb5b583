"""The GP conditioned on its training set at fixed hyperparameters: the factor of K_y (with the
jitter ladder), the profiled constant mean, prediction with the latent and the measurement std,
closed-form leave-one-out, the log marginal likelihood.

**Prediction** at fixed hyperparameters (R&W eqs. 2.25-2.26): with alpha = K_y^{-1}(y - c),

    mean(x*) = c + s^2 k(x*, X) alpha,
    var(x*)  = s^2 - s^2 k(x*, X) K_y^{-1} k(X, x*) s^2,

the variance of the latent f; ``predict``'s std is by default that of a new measurement,
sqrt(var + sigma_n^2), the error bar a lab reads (scikit-learn's with a ``WhiteKernel``), and
``std="latent"`` gives f's alone. The mean is kernel
ridge regression with the kernel s^2 k_ell and ridge sigma_n^2 on y - c: for fixed hyperparameters
the bilevel inner problem of the paper with this kernel.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lwl.models.gp.kernel import ard_kernel, split_theta, theta_scales
from lwl.models.gp.standardisation import StandardisedUnits

PREDICT_BLOCK = 4096  # test points per kernel block in predict (fewer where n is large: PREDICT_BLOCK_ELEMENTS)
PREDICT_BLOCK_ELEMENTS = 1 << 25  # n x test points of one predict block (268 MB of float64; two such temporaries)
STDS = ("measurement", "latent")  # what predict's std is of: a new measurement (latent + noise) or f alone
# where K_y does not factor, the noise is raised by these multiples of the output scale in turn (GaussianProcess._condition)
JITTER_LADDER = (1e-10, 1e-8, 1e-6, 1e-4)
LOO_BLOCK_ELEMENTS = 1 << 22  # n x columns of one block of loo_residuals (32 MB of float64)
FACTORS = ("chol_", "alpha_")  # a conditioned model's O(n^2) state (what fit_draws drops between draws)


def _lml_terms(kind: str, X: torch.Tensor, y: torch.Tensor, log_ell: torch.Tensor, log_s2: torch.Tensor,
               log_noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log marginal likelihood at the profiled mean, that mean c, the Cholesky factor L of K_y,
    alpha = K_y^{-1}(y - c)) for one output (R&W eq. 2.30, :mod:`lwl.models.gp.search`)."""
    n = X.shape[0]
    K = torch.exp(log_s2) * ard_kernel(kind, X, X, torch.exp(log_ell))
    K = K + torch.exp(log_noise) * torch.eye(n, dtype=X.dtype, device=X.device)
    L = torch.linalg.cholesky(K)
    lml, c, alpha = profiled_mean(L, y)
    return lml, c, L, alpha


def profiled_mean(L: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log p(y | X, theta) at the profiled mean, that mean c, alpha = K_y^{-1}(y - c)) from the
    Cholesky factor L of K_y: c = 1^T K_y^{-1} y / 1^T K_y^{-1} 1, the constant mean's maximum-
    likelihood value (generalised least squares; one solve for both)."""
    ones = torch.ones(len(y), 1, dtype=L.dtype, device=L.device)
    both = torch.cholesky_solve(torch.cat([y[:, None], ones], 1), L)  # K_y^{-1} [y, 1]
    c = both[:, 0].sum() / both[:, 1].sum()  # 1^T K^-1 y / 1^T K^-1 1
    alpha = both[:, 0] - c * both[:, 1]  # K_y^{-1} (y - c)
    return log_density(y - c, alpha, L), c, alpha


def log_density(residual: torch.Tensor, alpha: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """log N(residual; 0, K_y) = -1/2 r^T alpha - sum log diag L - n/2 log 2 pi (R&W eq. 2.30),
    with alpha = K_y^{-1} r and L the Cholesky factor of K_y."""
    return -0.5 * residual @ alpha - torch.log(torch.diagonal(L)).sum() - 0.5 * len(residual) * math.log(2 * math.pi)


def duplicate_groups(X: torch.Tensor | np.ndarray) -> list[np.ndarray]:
    """The row indices of each group of two or more equal rows of ``X`` (none: an empty list)."""
    a = X.cpu().numpy() if isinstance(X, torch.Tensor) else np.asarray(X)
    _, inverse, counts = np.unique(a, axis=0, return_inverse=True, return_counts=True)
    if counts.max(initial=0) < 2:
        return []
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(counts)[:-1]
    return [rows for rows in np.split(order, bounds) if len(rows) > 1]


def _factor_with_jitter(kind: str, Xs: torch.Tensor, ell: torch.Tensor, s2: float,
                        noise: float) -> tuple[torch.Tensor, float]:
    """(L, added): the Cholesky factor of K_y = s2 K_ell(Xs, Xs) + (noise + added) I, written over
    K (torch factors in a copy, so two n x n matrices while it factors, one after: at 20,000 points
    3.2 GB each; bench/gp_memory.py), with ``added`` the first rung of
    :data:`JITTER_LADDER` (times s2) at which it factors (0: at once). Raises
    ``numpy.linalg.LinAlgError`` past the last rung."""
    for rung in (0.0, *JITTER_LADDER):
        added = rung * s2
        with torch.no_grad():
            K = ard_kernel(kind, Xs, Xs, ell).mul_(s2)
            K.diagonal().add_(noise + added)
            info = torch.empty((), dtype=torch.int32, device=K.device)
            L, info = torch.linalg.cholesky_ex(K, out=(K, info))
        if int(info) == 0:
            return L, added
        del K, L
    raise np.linalg.LinAlgError(f"K_y is not positive definite even with a jitter of {JITTER_LADDER[-1]:g} times the "
                                f"output scale added to the noise")


def _solved_unit_columns(L: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """L^{-1} E, E the columns e_i of the n x n identity at ``rows``: [K_y^{-1}]_ij = (L^{-1} e_i) . (L^{-1} e_j)."""
    E = torch.zeros(L.shape[0], len(rows), dtype=L.dtype, device=L.device)
    E[rows, torch.arange(len(rows), device=L.device)] = 1.0
    return torch.linalg.solve_triangular(L, E, upper=False)


class ConditionedModel(StandardisedUnits):
    """The conditioned model's state (``chol_``, ``alpha_``, ``mean_``, ``log_marginal_likelihood_``,
    ``jitter_``) and what it answers: ``predict``, ``predict_stds``, ``loo``, ``loo_residuals``,
    ``log_marginal_likelihood``. Reads the hyperparameters ``kernel_``, ``lengthscale_``,
    ``output_scale_``, ``noise_`` (user units) and the training set (:class:`StandardisedUnits`)."""

    def _condition(self, mean) -> None:
        """Factor K_y and form alpha at the learned hyperparameters, in standardised units from
        the user-unit values (so a document's loader, which has only those, factors the same
        numbers); the mean is ``mean`` (user units) when given, else its maximum-likelihood
        value. The same factor gives the log marginal likelihood on every point,
        ``log_marginal_likelihood_`` (R&W eq. 2.30, in the user's units):
        -1/2 (y - c)^T alpha - sum log diag L - n/2 log 2 pi.

        **Jitter.** Where K_y does not factor (a noise at its floor beside near-duplicate inputs),
        the noise is raised along :data:`JITTER_LADDER` (multiples of the output scale) until it
        does; the raise is added to the served ``noise_`` (the document then factors at once) and
        recorded in ``jitter_`` (user units, 0 where none was needed). Past the last rung a
        ``numpy.linalg.LinAlgError`` says so."""
        s = self.standardisation_
        p = self.Y_.shape[1]
        self.chol_, self.alpha_, means, lml = [], [], [], []
        jitter = np.zeros(p)
        for j in range(p):
            y = self._tensor(self.Ys_[:, j])
            ell, s2, noise = self._scales(j)
            L, added = _factor_with_jitter(self.kernel_, self.Xs_, ell, s2, noise)
            if added:  # served at the noise it factored with, in the user's units
                jitter[j] = added * float(s.y_scale[j]) ** 2
            with torch.no_grad():
                both = torch.cholesky_solve(torch.stack([y, torch.ones_like(y)], 1), L)
                user = float(mean[j]) if mean is not None else \
                    float(s.y_loc[j]) + float(s.y_scale[j]) * float(both[:, 0].sum() / both[:, 1].sum())
                # the standardised mean from the user-unit one, as a document's loader forms it
                c = (user - float(s.y_loc[j])) / float(s.y_scale[j])
                alpha = both[:, 0] - c * both[:, 1]
            self.chol_.append(L)
            self.alpha_.append(alpha)
            means.append(user)
            lml.append(self._lml_to_user(float(log_density(y - c, alpha, L)), j, len(y)))
        self.mean_ = np.array(means)
        self.log_marginal_likelihood_ = np.array(lml)
        if not hasattr(self, "jitter_") or len(self.jitter_) != p:
            self.jitter_ = np.zeros(p)
        if np.any(jitter):  # factored again from the raised user-unit noise: the numbers its document gives
            self.noise_ = self.noise_ + jitter
            self.jitter_ = self.jitter_ + jitter  # kept across later conditionings (reset where noise_ is fitted)
            self._condition(self.mean_ if mean is None else mean)

    def _scales(self, j: int) -> tuple[torch.Tensor, float, float]:
        """Output j's (lengthscales as a tensor, s^2, sigma_n^2) in standardised units."""
        ell, s2, noise = theta_scales(self._theta(j))
        return self._tensor(ell), s2, noise

    # -- prediction ---------------------------------------------------------------------------
    def _inputs(self, X) -> torch.Tensor:
        """``X`` as (m, d) standardised inputs, or a ValueError naming the width it expected."""
        X = np.asarray(X, dtype=np.float64)
        d = self.n_features_in_
        if X.ndim == 1 and d == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"X: expected (m, {d}) inputs (the model's input dimension is {d}), got shape {X.shape}")
        return self._tensor(self.standardisation_.inputs(X))

    def predict(self, X, return_std: bool = False, std: str = "measurement"):
        """Posterior mean (and standard deviation) at ``X`` (R&W eqs. 2.25-2.26): (m,) for
        single-output labels, (m, p) otherwise. ``std="measurement"`` (the default, as
        scikit-learn's with a ``WhiteKernel``): the std of a new measurement y* = f(x*) + eps,
        sqrt(var f(x*) + sigma_n^2), the error bar a label taken there falls within;
        ``std="latent"``: that of f(x*) alone (0 at a training point as the noise goes to 0).
        ``X`` must be (m, d) for the model's d inputs ((m,) when d = 1); another width is refused."""
        if std not in STDS:
            raise ValueError(f"std: one of {list(STDS)}, got {std!r}")
        if not return_std:
            return self.predict_stds(X, stds=False)[0]
        mean, measurement, latent = self.predict_stds(X)
        return mean, (measurement if std == "measurement" else latent)

    def predict_stds(self, X, stds: bool = True) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(mean, measurement std, latent std) at ``X`` in one pass (:meth:`predict`; the
        service's ``POST /predict`` answers all three); the stds None without ``stds``."""
        Xs = self._inputs(X)
        s = self.standardisation_
        p, n = len(self.alpha_), len(self.Xs_)
        mu = np.empty((Xs.shape[0], p))
        var = np.empty((Xs.shape[0], p))
        noise = np.empty(p)
        block = max(1, min(PREDICT_BLOCK, PREDICT_BLOCK_ELEMENTS // max(n, 1)))
        with torch.no_grad():
            for j in range(p):
                ell, s2, noise[j] = self._scales(j)
                c = (float(self.mean_[j]) - float(s.y_loc[j])) / float(s.y_scale[j])
                for i in range(0, Xs.shape[0], block):
                    k = s2 * ard_kernel(self.kernel_, self.Xs_, Xs[i:i + block], ell)  # (n, b)
                    mu[i:i + block, j] = (c + k.T @ self.alpha_[j]).cpu().numpy()
                    if stds:
                        v = torch.linalg.solve_triangular(self.chol_[j], k, upper=False)
                        var[i:i + block, j] = (s2 - (v * v).sum(0)).clamp_min(0.0).cpu().numpy()
        mu = s.y_loc + s.y_scale * mu
        latent = measurement = None
        if stds:
            latent = s.y_scale * np.sqrt(var)
            measurement = s.y_scale * np.sqrt(var + noise)
        if self.single_output_:
            mu = mu[:, 0]
            latent, measurement = (None, None) if not stds else (latent[:, 0], measurement[:, 0])
        return mu, measurement, latent

    def loo(self, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Leave-one-out residuals y_i - mean_{-i}(x_i) of the conditioned model at its training
        points ``rows`` (None: all) and the std of that prediction of the measurement y_i, in
        closed form (R&W sec. 5.4.2, eq. 5.12): residual [K_y^{-1}(y - c)]_i / [K_y^{-1}]_ii,
        variance 1 / [K_y^{-1}]_ii, the hyperparameters and the constant mean c held at their
        fitted values (not refitted without point i). [K_y^{-1}]_ii = ||L^{-1} e_i||^2 from the
        model's own Cholesky factor, in blocks of columns: O(n^2) per row asked for, no n x n
        inverse. Equal inputs are left out together, as in :func:`_loo_error` (the variance of
        each: the diagonal of ([K_y^{-1}]_GG)^{-1}). Each (len(rows),) for single-output labels,
        (len(rows), p) otherwise, in the labels' units."""
        n = len(self.Xs_)
        rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise ValueError(f"rows: training rows are 0..{n - 1}")
        res = np.empty((len(rows), len(self.alpha_)))
        sd = np.empty((len(rows), len(self.alpha_)))
        block = max(1, LOO_BLOCK_ELEMENTS // max(n, 1))
        with torch.no_grad():
            for j, (L, alpha) in enumerate(zip(self.chol_, self.alpha_)):
                scale = float(self.standardisation_.y_scale[j])
                for s in range(0, len(rows), block):
                    r = torch.as_tensor(rows[s:s + block], device=L.device)
                    diag = (_solved_unit_columns(L, r) ** 2).sum(0)
                    res[s:s + block, j] = (alpha[r] / diag).cpu().numpy() * scale
                    sd[s:s + block, j] = diag.rsqrt().cpu().numpy() * scale
                where = {int(row): k for k, row in enumerate(rows)}
                for group in duplicate_groups(self.Xs_):  # equal inputs left out together (_loo_error)
                    asked = [g for g in group if int(g) in where]
                    if not asked:
                        continue
                    gi = torch.as_tensor(group, device=L.device)
                    V = _solved_unit_columns(L, gi)
                    block_inverse = torch.linalg.inv(V.T @ V)  # ([K_y^{-1}]_GG)^{-1}
                    r = (block_inverse @ alpha[gi]).cpu().numpy() * scale
                    v = torch.diagonal(block_inverse).sqrt().cpu().numpy() * scale
                    for k, g in enumerate(group):
                        if int(g) in where:
                            res[where[int(g)], j], sd[where[int(g)], j] = r[k], v[k]
        if self.single_output_:
            return res[:, 0], sd[:, 0]
        return res, sd

    def loo_residuals(self, rows=None) -> np.ndarray:
        """The residuals of :meth:`loo` alone."""
        return self.loo(rows)[0]

    def log_marginal_likelihood(self, theta=None, output: int = 0, mean=None) -> float:
        """log p(y | X, theta) of ``output`` (R&W eq. 2.30) at theta = (log ell, log s^2,
        log sigma_n^2) in the user's units (default: the fitted ones), at the constant ``mean``
        (default: its maximum-likelihood value); computed in standardised units and carried back
        by the labels' Jacobian."""
        s = self.standardisation_
        if theta is None:
            theta_s = self._theta(output)
        else:
            theta_s = self._to_standard(output, *theta_scales(np.asarray(theta, dtype=np.float64)))
        y = self._tensor(self.Ys_[:, output])
        n = len(y)
        t = [self._tensor(v) for v in split_theta(theta_s)]
        with torch.no_grad():
            if mean is None:
                try:
                    return self._lml_to_user(float(_lml_terms(self.kernel_, self.Xs_, y, *t)[0]), output, n)
                except torch.linalg.LinAlgError:
                    return -math.inf
            K = torch.exp(t[1]) * ard_kernel(self.kernel_, self.Xs_, self.Xs_, torch.exp(t[0]))
            K.diagonal().add_(float(torch.exp(t[2])))
            L, info = torch.linalg.cholesky_ex(K)
            if int(info) != 0:
                return -math.inf
            r = y - (float(mean) - float(s.y_loc[output])) / float(s.y_scale[output])
            a = torch.cholesky_solve(r[:, None], L)[:, 0]
            return self._lml_to_user(float(log_density(r, a, L)), output, n)

