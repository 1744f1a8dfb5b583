import math

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from lwl.measures import cosine_law

# the NtD and Darcy intervals of the paper (SM NtD: omega, tau; SM Darcy: alpha, tau, m)
INTERVALS = [(-2 * math.pi, 2 * math.pi), (0.0, 50.0), (2.0, 3.0), (1.0, 4.0), (0.0, 1.0)]


def _inverse_cdf_draws(lo, hi, n, seed):
    """Draws by direct inversion of the paper's formula: F(x) = [t - sin t]_lo^x / Z solved for
    x at uniform levels (brentq on the closed form), independent of the rejection sampler."""
    u = np.random.default_rng(seed).uniform(size=n)
    F = lambda x, level: cosine_law.cdf(x, lo, hi) - level  # noqa: E731
    return np.array([brentq(F, lo, hi, args=(level,), xtol=1e-12) for level in u])


@pytest.mark.parametrize("lo,hi", INTERVALS)
def test_paper_law_passes_ks_against_its_formula_and_the_old_law_does_not(lo, hi):
    rng = np.random.default_rng(0)
    paper = np.array([cosine_law.draw_paper(rng, lo, hi) for _ in range(4000)])
    cdf = lambda x: cosine_law.cdf(x, lo, hi)  # noqa: E731
    assert stats.kstest(paper, cdf).pvalue > 0.01
    # two-sample: the rejection sampler against the inverse-CDF draws of the formula
    assert stats.ks_2samp(paper, _inverse_cdf_draws(lo, hi, 2000, 1)).pvalue > 0.01
    old = np.array([cosine_law.draw_unit(rng, lo, hi) for _ in range(4000)])
    assert stats.kstest(old, cdf).pvalue < 1e-6


def test_paper_law_has_the_papers_shape():
    """NtD's omega on [-2 pi, 2 pi]: no mass near 0, mean |omega| ~ pi; Darcy's m on [0, 1]:
    mean ~0.745 (the old law: mean |omega| ~1.9, mean m 0.5)."""
    rng = np.random.default_rng(5)
    omega = np.array([cosine_law.draw_paper(rng, -2 * math.pi, 2 * math.pi) for _ in range(20000)])
    m = np.array([cosine_law.draw_paper(rng, 0.0, 1.0) for _ in range(20000)])
    assert abs(np.abs(omega).mean() - math.pi) < 0.05 and np.mean(np.abs(omega) < 0.3) < 0.002
    # E[m] = [x^2/2 - x sin x - cos x]_0^1 / [x - sin x]_0^1
    exact = (0.5 - math.sin(1) - math.cos(1) + 1) / (1 - math.sin(1))
    assert abs(exact - 0.745) < 1e-3 and abs(m.mean() - exact) < 0.01


def test_unknown_law_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="q_law"):
        cosine_law.law("uniform")
