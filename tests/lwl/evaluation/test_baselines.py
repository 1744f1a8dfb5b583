import numpy as np
import torch

from lwl.evaluation import baselines as bl
from lwl.q_samples import MetaTestSamples
from lwl.spec import parse_job_spec


def test_fitted_barycenter_and_mixture(small_spec):
    spec = parse_job_spec(small_spec)
    q = MetaTestSamples.from_spec(spec.test_distributions, 0)
    fits = bl.fitted_gaussians(q)
    np.testing.assert_allclose(fits[0].mean, q.members[0].mean(0))
    bary = bl.barycenter(q)
    np.testing.assert_allclose(bary.mean, np.mean([f.mean for f in fits], 0), atol=1e-12)
    mix = bl.mixture(q)
    assert len(mix.components) == 2 and np.allclose(mix.weights, 0.5)


def _brute_force_maxmin(dist, first, count):
    chosen = [first]
    for _ in range(count - 1):
        rest = [i for i in range(len(dist)) if i not in chosen]
        chosen.append(max(rest, key=lambda i: min(dist[i, j] for j in chosen)))
    return chosen


def test_ncoreset_is_greedy_maxmin_in_rkhs_distance():
    pool = np.random.default_rng(0).standard_normal((60, 2))
    order = bl.ncoreset(pool, 12, kernel="squared_exponential", lengthscale=1.0, seed=3)
    d2 = ((pool[:, None] - pool[None]) ** 2).sum(-1)
    rkhs = 2 - 2 * np.exp(-d2)
    assert list(order) == _brute_force_maxmin(rkhs, order[0], 12)
    assert len(set(order)) == 12


def test_acoreset_batches_follow_adaptive_features():
    rng = np.random.default_rng(1)
    pool = rng.standard_normal((80, 2))
    labels = np.sin(3 * pool[:, 0])
    order = bl.acoreset(pool, labels, 26, kernel="squared_exponential", lengthscale=1.0, ridge=1e-3, seed=0)
    assert len(order) == 26 and len(set(order)) == 26
    # the first batch after the 6 random points is greedy max-min on c_n k(u_n, v) features
    from lwl.models import KernelRidge

    m = KernelRidge("squared_exponential", 1.0, sigma2=1e-3 / 6).fit(pool[order[:6]], labels[order[:6]])
    f = (m.coef_[:, None] * m.kernel_matrix(m.X_, torch.tensor(pool))).numpy().T
    dist = ((f[:, None] - f[None]) ** 2).sum(-1)
    chosen = list(order[:6])
    for _ in range(10):
        rest = [i for i in range(80) if i not in chosen]
        chosen.append(max(rest, key=lambda i: min(dist[i, j] for j in chosen)))
    assert chosen == list(order[:16])
