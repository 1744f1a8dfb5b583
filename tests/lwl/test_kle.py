import json

import numpy as np
import ot
import pytest

from lwl.measures import KLEGaussian, LogNormal, from_spec, kle_w2_squared
from lwl.measures.kle import darcy_test_member

CASES = [
    dict(basis="sine1d", grid=31),
    dict(basis="sine2d", grid=7),
    dict(basis="sine1d", grid=17, endpoints=True),
    dict(basis="sine2d", grid=9, endpoints=True),
    dict(basis="fourier", grid=32),
]


@pytest.mark.parametrize("case", CASES)
def test_eigenfunctions_are_orthonormal_on_the_grid(case):
    m = KLEGaussian(**case)
    phi = m._eigenfunctions()
    np.testing.assert_allclose(m.quadrature_weight() * phi @ phi.T, np.eye(len(phi)), atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_closed_form_w2_matches_pot_bures_on_the_discretised_covariances(case):
    a = KLEGaussian(**case, alpha=2.0, tau=3.0, sigma=3.0, amplitude=2.0, omega=4.0)
    b = KLEGaussian(**case, alpha=1.5, tau=5.0, sigma=2.0, shift=0.3)
    w = np.sqrt(a.quadrature_weights())
    phi = a._eigenfunctions() * w
    # L^2 isometry: grid vectors scaled by sqrt(w_i); covariance W^1/2 Phi^T Lambda Phi W^1/2
    cov = [phi.T @ np.diag(m.eigenvalues()) @ phi for m in (a, b)]
    ma, mb = w * a.mean_function(), w * b.mean_function()
    if case["basis"] == "fourier" or case.get("endpoints"):
        # sin/cos pairs share eigenvalues (closed grids: zero boundary rows), the grid covariance is
        # singular; POT's sqrtm
        # returns NaN there, so the Bures term is taken from symmetric eigendecompositions
        def psd_sqrt(c):
            w, v = np.linalg.eigh(c)
            return (v * np.sqrt(np.clip(w, 0, None))) @ v.T

        ra = psd_sqrt(cov[0])
        bures = np.sum((ma - mb) ** 2) + np.trace(cov[0] + cov[1] - 2 * psd_sqrt(ra @ cov[1] @ ra))
    else:
        bures = ot.gaussian.bures_wasserstein_distance(ma, mb, cov[0], cov[1]) ** 2
    assert kle_w2_squared(a, b) == pytest.approx(float(bures), rel=1e-7)
    assert kle_w2_squared(a, a) == 0.0


def test_second_moment_matches_monte_carlo():
    m = KLEGaussian("sine1d", grid=63, alpha=1.5, tau=2.0, sigma=2.0, amplitude=10.0, omega=3.0)
    x = m.sample(20000, 0)
    mc = m.quadrature_weight() * (x * x).sum(1).mean()
    assert mc == pytest.approx(m.second_moment(), rel=0.01)


@pytest.mark.parametrize("measure", [KLEGaussian("sine2d", grid=9, sigma=2.0, shift=1.0),
                                     LogNormal(KLEGaussian("fourier", grid=16, tau=1.4, sigma=5.0, alpha=3.0))])
def test_spec_round_trip_bit_for_bit(measure):
    again = from_spec(json.loads(json.dumps(measure.to_spec())))
    assert np.array_equal(again.sample(5, 3), measure.sample(5, 3))


def test_lognormal_is_positive_and_darcy_members_lie_in_the_paper_ranges():
    x = LogNormal(KLEGaussian("sine2d", grid=8, sigma=3.0)).sample(4, 0)
    assert np.all(x > 0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = darcy_test_member(rng, 8)
        assert 2 <= m.alpha <= 3 and 1 <= m.tau <= 4 and 0 <= m.shift <= 1
        assert m.sigma == pytest.approx(m.tau ** (m.alpha - 1))


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="basis"):
        KLEGaussian("cosine")
    with pytest.raises(ValueError, match="tau"):
        KLEGaussian(tau=-1.0)
    with pytest.raises(ValueError, match="endpoints"):
        KLEGaussian("fourier", grid=16, endpoints=True)
    with pytest.raises(ValueError, match="share"):
        kle_w2_squared(KLEGaussian(grid=8), KLEGaussian(grid=9))


def test_fourier_sampling_by_fft_equals_the_eigenfunction_sum():
    m = KLEGaussian("fourier", grid=64, alpha=3.0, tau=1.4, sigma=5.0, shift=0.2)
    coef = np.random.default_rng(4).standard_normal((3, m.eigenvalues().size)) * np.sqrt(m.eigenvalues())
    direct = coef @ m._eigenfunctions() + m.mean_function()
    np.testing.assert_allclose(m.sample(3, 4), direct, atol=1e-12)


@pytest.mark.parametrize("endpoints", [False, True])
def test_sine2d_separable_sampling_equals_the_eigenfunction_sum(endpoints):
    m = KLEGaussian("sine2d", grid=10, alpha=2.0, tau=3.0, sigma=3.0, shift=0.4, endpoints=endpoints)
    coef = np.random.default_rng(2).standard_normal((3, m.eigenvalues().size)) * np.sqrt(m.eigenvalues())
    direct = coef @ m._eigenfunctions() + m.mean_function()
    np.testing.assert_allclose(m.sample(3, 2), direct, atol=1e-12)


def test_closed_grid_has_the_boundary_nodes_and_exact_constant_norms():
    m = KLEGaussian("sine2d", grid=12, sigma=2.0, shift=0.7, endpoints=True)
    x = m.sample(2, 0).reshape(2, 12, 12)
    np.testing.assert_allclose(x[:, 0, :], 0.7, atol=1e-12)  # sines vanish on the boundary
    np.testing.assert_allclose(x[:, :, -1], 0.7, atol=1e-12)
    assert m.quadrature_weights().sum() == pytest.approx(1.0)
    assert m.second_moment() == pytest.approx(0.49 + m.eigenvalues().sum())


def test_nodes_are_the_coordinates_of_a_samples_values_beside_its_weights():
    from lwl.grids import square_nodes, trapezoid_weights
    from lwl.measures import KLEGaussian

    closed = KLEGaussian("sine2d", 9, endpoints=True)
    np.testing.assert_array_equal(closed.nodes(), square_nodes(9))
    np.testing.assert_array_equal(closed.quadrature_weights(), trapezoid_weights(9))
    line = KLEGaussian("sine1d", 12)
    assert line.nodes().shape == (12, 1) and np.all(np.diff(line.nodes()[:, 0]) > 0)
    assert len(line.quadrature_weights()) == line.dim
