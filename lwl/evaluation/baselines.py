"""The baselines of the paper's Table 1 (SM "Bilevel minimization for function approximation").

Distributions: Normal N(m_0, I) (the initial family member), the W2 barycenter of the Gaussians
fitted to Q's members, the mixture of those Gaussians, and U([0,1]^d). Pool-based selections
(after Musekamp et al. 2025) over the pool of Q's validation points:

- nCoreSet: greedy max-min (k-centre) selection in the RKHS distance
  ||k(., v) - k(., v')||_H^2 = k(v,v) + k(v',v') - 2 k(v,v'), one point at a time from one
  random initial point (SM eqn sm_maxmin_coreset);
- aCoreSet: the same max-min rule on the adaptive features (c_n k(u_n, v))_n in R^N, where c
  are the coefficients of the kernel model trained on the current coreset {u_n}; batches of 10
  points from an initial random coreset of 6, retraining after each batch.
"""

from __future__ import annotations

import numpy as np
import torch

from lwl.device import DTYPE
from lwl.measures import Gaussian, Mixture, UniformBox
from lwl.q_samples import MetaTestSamples
from lwl.models import KernelRidge
from lwl.transport import gaussian_barycenter


def fitted_gaussians(q: MetaTestSamples) -> list[Gaussian]:
    """N(empirical mean, empirical covariance) of each member's samples (the paper uses all M)."""
    from lwl.measures.gaussian import regularised_cholesky

    out = []
    for x in q.members:
        cov = np.cov(x, rowvar=False).reshape(q.dim, q.dim)
        try:
            out.append(Gaussian(x.mean(0), cov=cov))
        except ValueError:  # rank-deficient samples (e.g. repeated rows): floor the spectrum
            out.append(Gaussian(x.mean(0), regularised_cholesky(cov, rel=1e-6)))
    return out


def barycenter(q: MetaTestSamples) -> Gaussian:
    fits = fitted_gaussians(q)
    return gaussian_barycenter([g.mean for g in fits], [g.cov for g in fits], q.weights)


def mixture(q: MetaTestSamples) -> Mixture:
    return Mixture(fitted_gaussians(q), q.weights)


def uniform(dim: int) -> UniformBox:
    return UniformBox.unit(dim)


def uniform_on(spec, q: MetaTestSamples) -> UniformBox:
    """``uniform``: U([0,1]^d), the paper's; with an input domain, uniform on its box (the
    instrument's range; linear constraints restrict it where it is drawn)."""
    domain = getattr(spec, "domain", None)
    return UniformBox(domain.low, domain.high) if domain is not None else uniform(q.dim)


def _greedy_maxmin(min_dist: torch.Tensor, dist_to: callable, count: int, chosen: list[int]) -> list[int]:
    """Add ``count`` indices by i_{t+1} = argmax_i min_{j in S_t} dist(i, j), updating min_dist."""
    for _ in range(count):
        i = int(torch.argmax(min_dist))
        chosen.append(i)
        min_dist = torch.minimum(min_dist, dist_to(i))
        min_dist[chosen] = -1.0  # never pick a point twice
    return chosen


def ncoreset(pool: np.ndarray, size: int, *, kernel: str, lengthscale: float, seed) -> np.ndarray:
    """nCoreSet indices into ``pool`` in selection order (prefixes are the smaller coresets)."""
    rng = np.random.default_rng(seed)
    size = min(size, len(pool))
    model = KernelRidge(kernel, lengthscale)
    model.device_ = torch.device("cpu")
    x = torch.as_tensor(pool, dtype=DTYPE)

    def rkhs_dist2(i: int) -> torch.Tensor:  # k(v,v) = 1 for both kernels
        return 2.0 - 2.0 * model.kernel_matrix(x[i:i + 1], x)[0]

    first = int(rng.integers(len(pool)))
    min_dist = rkhs_dist2(first)
    min_dist[first] = -1.0
    return np.array(_greedy_maxmin(min_dist, rkhs_dist2, size - 1, [first]))


def acoreset(pool: np.ndarray, labels: np.ndarray, size: int, *, kernel: str, lengthscale: float,
             ridge: float, seed, initial: int = 6, batch: int = 10) -> np.ndarray:
    """aCoreSet indices into ``pool`` in selection order."""
    rng = np.random.default_rng(seed)
    size = min(size, len(pool))
    chosen = [int(i) for i in rng.choice(len(pool), size=min(initial, size), replace=False)]
    x = torch.as_tensor(pool, dtype=DTYPE)
    while len(chosen) < size:
        model = KernelRidge(kernel, lengthscale, sigma2=ridge / len(chosen)).fit(pool[chosen], labels[chosen])
        # (N, pool) features c_n k(u_n, v); float32 suffices to rank distances and halves the
        # O(pool N^2) Gram product that dominates this baseline's cost
        feats = (model.coef_[:, None] * model.kernel_matrix(model.X_, x)).float()
        sq = (feats * feats).sum(0)

        def dist2(i: int) -> torch.Tensor:
            return sq + sq[i] - 2.0 * (feats[:, i] @ feats)

        # min_j ||f_i - f_j||^2 = |f_i|^2 + min_j (|f_j|^2 - 2 f_i.f_j), formed in place on the
        # (pool, N) Gram matrix: this is the cost of aCoreSet, O(pool N^2) per batch
        gram = (feats.T @ feats[:, chosen]).mul_(-2.0).add_(sq[chosen][None, :])
        min_dist = gram.min(1).values.add_(sq)
        min_dist[chosen] = -1.0
        chosen = _greedy_maxmin(min_dist, dist2, min(batch, size - len(chosen)), chosen)
    return np.array(chosen)


def normal(spec, q: MetaTestSamples) -> Gaussian:
    """``normal``: a Gaussian family's theta^0 (the paper's initial N(m_0, I)), for any other
    family Q's moment-matched Gaussian."""
    if spec.family.name == "gaussian":
        return Gaussian(spec.family.mean, cov=spec.family.cov)
    from lwl.measures.gaussian import moment_matched, regularised_cholesky

    mean, cov = moment_matched(np.concatenate(q.validation), q.point_weights(q.validation, q.weights))
    return Gaussian(mean, regularised_cholesky(cov, rel=1e-6))


# The builders registered under lwl.registry.BASELINES (lwl.evaluation.spec registers the built-in
# ones by name). A distribution baseline: build(spec, q) -> Measure; a pool baseline: build(pool,
# labels, n, kernel=, lengthscale=, ridge=, seed=) -> indices into the pool in selection order.
def barycenter_baseline(spec, q: MetaTestSamples) -> Gaussian:
    return barycenter(q)


def mixture_baseline(spec, q: MetaTestSamples) -> Mixture:
    return mixture(q)


def ncoreset_baseline(pool: np.ndarray, labels: np.ndarray, n: int, *, ridge: float, **kw) -> np.ndarray:
    return ncoreset(pool, n, **kw)
