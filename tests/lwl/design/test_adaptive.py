import numpy as np

from lwl.design.adaptive import WhitenedGaussian, adam_step, guard_gradient


def _coords(d=3, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, d))
    return WhitenedGaussian(rng.standard_normal(d), np.linalg.cholesky(A @ A.T + d * np.eye(d))), rng


def test_whitened_coordinates_round_trip():
    coords, rng = _coords()
    L = np.tril(rng.standard_normal((3, 3)))
    L[np.diag_indices(3)] = np.abs(L[np.diag_indices(3)]) + 0.1
    m = rng.standard_normal(3)
    phi = coords.to_phi(m, L)
    m2, L2 = coords.from_phi(phi)
    np.testing.assert_allclose(m2, m, atol=1e-12)
    np.testing.assert_allclose(L2, L, atol=1e-12)
    # Q's own moment-matched Gaussian is the origin with unit scales
    np.testing.assert_allclose(coords.to_phi(coords.centre, coords.S), 0.0, atol=1e-12)


def test_gradient_chain_rule_matches_finite_differences():
    coords, rng = _coords(seed=1)
    B, a = rng.standard_normal((3, 3)), rng.standard_normal(3)

    def f(phi):  # a smooth function of (m, L): a.m + sum(B * L^2)
        m, L = coords.from_phi(phi)
        return a @ m + np.sum(B * L**2)

    phi = 0.3 * rng.standard_normal(coords.size)
    m, L = coords.from_phi(phi)
    g = coords.gradient(phi, a, np.tril(2 * B * L))
    h = 1e-6
    fd = np.array([(f(phi + h * e) - f(phi - h * e)) / (2 * h) for e in np.eye(coords.size)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_bounds_contain_the_start_and_mask_selects_parameters():
    coords, _ = _coords()
    phi0 = np.full(coords.size, 50.0)
    lo, hi = coords.bounds(phi0)
    assert np.all(lo <= phi0) and np.all(phi0 <= hi)
    assert coords.mask(["mean"]).sum() == 3 and coords.mask(["cov"]).sum() == coords.size - 3


def test_adam_step_length_does_not_depend_on_gradient_scale():
    phi = np.zeros(4)
    g = np.array([1.0, -2.0, 3.0, 0.5])
    steps = [adam_step(phi, s * g, np.zeros(4), np.zeros(4), 1, 0.1)[0] for s in (1e-5, 1.0, 1e8)]
    np.testing.assert_allclose(steps[0], steps[1], rtol=1e-6)
    np.testing.assert_allclose(steps[2], steps[1], rtol=1e-6)
    np.testing.assert_allclose(np.abs(steps[1]), 0.1, rtol=1e-6)  # first step: lr per coordinate


def test_gradient_guard_rejects_non_finite_and_clips_outliers():
    g, ms, event = guard_gradient(np.array([np.nan, 1.0]), 1.0, 10)
    assert g is None and event == "rejected" and ms == 1.0
    g, ms, event = guard_gradient(np.array([1e6, 0.0]), 1.0, 10)
    assert event == "clipped" and np.isclose(np.linalg.norm(g), 10.0)
    g, ms2, event = guard_gradient(np.array([2.0, 0.0]), 1.0, 10)
    assert event is None and np.array_equal(g, [2.0, 0.0]) and ms2 > 1.0
    # during the warm-up no statistic exists yet: nothing is clipped
    assert guard_gradient(np.array([1e6, 0.0]), 1.0, 0)[2] is None
