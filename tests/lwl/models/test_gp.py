"""lwl's Gaussian process (lwl.models.gp) against scikit-learn's GaussianProcessRegressor: the same
log marginal likelihood and predictions at the same hyperparameters, and a fitted likelihood at
least as high; its document loads into scikit-learn with the same predictions."""

import warnings
import torch

import numpy as np
import pytest

from lwl.models import GaussianProcess, from_spec
from lwl.oracles import make_oracle
from tests.conftest import devices

sklearn_gp = pytest.importorskip("sklearn.gaussian_process")
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel


def _sklearn_kernel(kind: str, lengthscale, fixed: bool = True):
    bounds = "fixed" if fixed else (1e-5, 1e5)
    if kind == "squared_exponential":
        return RBF(lengthscale, bounds)
    return Matern(lengthscale, bounds, nu=2.5)


def to_sklearn(doc: dict, output: int = 0):
    """scikit-learn's GaussianProcessRegressor of a gp model document: kernel s^2 * k_ell (fixed),
    the noise variance as ``alpha`` (added to K(X, X) only, so ``predict``'s std is the latent
    f's, as lwl's), fitted to the labels minus the document's constant mean (scikit-learn's
    prior mean is 0): predictions are ``mean + regressor.predict(x)``."""
    o = doc["outputs"][output]
    X = np.asarray(doc["training_set"]["inputs"])
    y = np.asarray(doc["training_set"]["labels"]).reshape(len(X), -1)[:, output]
    kernel = ConstantKernel(o["output_scale"], "fixed") * _sklearn_kernel(doc["kernel"], o["lengthscale"])
    reg = sklearn_gp.GaussianProcessRegressor(kernel, alpha=o["noise"], optimizer=None).fit(X, y - o["mean"])
    return reg, o["mean"]


def agreement_rtol(doc: dict, output: int = 0) -> float:
    """The relative agreement asked of lwl's and scikit-learn's predictions for a document's GP:
    1e-8 when K_y is well conditioned (eps kappa(K_y) < 1e-10), else 1e-6. A fitted GP often sits
    at a large output scale and a noise at its lower bound (kappa ~ 1e12 on the smooth problems
    here), where two backward-stable solvers agree to about 1e-7 (measured), not 1e-8; at equal,
    well-conditioned hyperparameters the test above asks 1e-8."""
    o = doc["outputs"][output]
    X = np.asarray(doc["training_set"]["inputs"])
    kernel = ConstantKernel(o["output_scale"]) * _sklearn_kernel(doc["kernel"], o["lengthscale"])
    kappa = np.linalg.cond(kernel(X) + o["noise"] * np.eye(len(X)))
    return 1e-8 if np.finfo(float).eps * kappa < 1e-10 else 1e-6


def _problem(name: str, d: int, n: int = 60, seed: int = 0, params=None):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    oracle = make_oracle({"name": name, **({"params": params} if params else {})})
    return X, np.asarray(oracle.label(X), dtype=np.float64).reshape(-1), rng.uniform(size=(40, d))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kernel", ["squared_exponential", "matern52"])
def test_likelihood_and_predictions_equal_sklearn_at_equal_hyperparameters(kernel, device):
    X, y, Xt = _problem("friedman1", 5)
    ell = np.array([0.3, 0.5, 0.9, 1.7, 2.5])
    gp = GaussianProcess(kernel, lengthscale=ell, output_scale=30.0, noise=0.05, mean=14.0, optimize=False,
                         device=device).fit(X, y)
    reg = sklearn_gp.GaussianProcessRegressor(ConstantKernel(30.0, "fixed") * _sklearn_kernel(kernel, ell),
                                              alpha=0.05, optimizer=None).fit(X, y - 14.0)
    theta = np.concatenate([np.log(ell), [np.log(30.0), np.log(0.05)]])
    ours = gp.log_marginal_likelihood(theta, mean=14.0)
    np.testing.assert_allclose(ours, reg.log_marginal_likelihood_value_, rtol=1e-8)
    # the same likelihood with the noise as a WhiteKernel (scikit-learn's usual way to fit it)
    white = sklearn_gp.GaussianProcessRegressor(
        ConstantKernel(30.0, "fixed") * _sklearn_kernel(kernel, ell) + WhiteKernel(0.05, "fixed"),
        alpha=0.0, optimizer=None).fit(X, y - 14.0)
    np.testing.assert_allclose(ours, white.log_marginal_likelihood_value_, rtol=1e-8)
    mean, std = gp.predict(Xt, return_std=True)
    latent = gp.predict(Xt, return_std=True, std="latent")[1]
    sk_mean, sk_std = reg.predict(Xt, return_std=True)  # alpha: the latent f's std
    np.testing.assert_allclose(mean, sk_mean + 14.0, rtol=1e-8)
    np.testing.assert_allclose(latent, sk_std, rtol=1e-8)
    # the default std is a new measurement's, as scikit-learn's with the noise as a WhiteKernel
    np.testing.assert_allclose(std, white.predict(Xt, return_std=True)[1], rtol=1e-8)
    np.testing.assert_allclose(std**2, latent**2 + 0.05, rtol=1e-8)


def test_the_profiled_mean_maximises_the_likelihood():
    X, y, _ = _problem("sobol_g", 2)
    gp = GaussianProcess("matern52", restarts=1).fit(X, y)
    c = gp.mean_[0]
    best = gp.log_marginal_likelihood(mean=c)
    np.testing.assert_allclose(best, gp.log_marginal_likelihood(), rtol=1e-12)
    for step in (-0.1, 0.1):
        assert gp.log_marginal_likelihood(mean=c + step) < best


PROBLEMS = [("friedman1", 5, None), ("sobol_g", 2, None), ("friedman2", 4, None),
            ("kernel_expansion", 3, {"dim": 3, "centres": 20, "seed": 1})]


@pytest.mark.parametrize("kernel", ["squared_exponential", "matern52"])
@pytest.mark.parametrize("name, d, params", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_fitted_likelihood_at_least_as_high_as_sklearn(name, d, params, kernel):
    """scikit-learn fits s^2 * k_ell + white noise from unit values with 3 restarts (its bounds
    1e-5..1e5), once on the labels centred at their mean (its prior mean is 0) and once with
    ``normalize_y=True`` (its likelihood is then of y / sd(y): minus n log sd(y) gives that of y);
    lwl's maximum over the constant mean and its hyperparameters must reach at least both."""
    X, y, _ = _problem(name, d, params=params)
    if name == "friedman2":
        X = X * [100, 520 * np.pi, 1, 10] + [0, 40 * np.pi, 0, 1]  # Friedman-2's input box
        y = np.asarray(make_oracle({"name": name}).label(X)).reshape(-1)
    # the evidence rule keeps the highest of the optima (the default, loo, keeps the same one on these)
    ours = GaussianProcess(kernel, restarts=3, random_state=0, select="evidence").fit(X, y).log_marginal_likelihood_[0]
    for normalize in (False, True):
        kernel_sk = ConstantKernel(1.0) * _sklearn_kernel(kernel, np.ones(d), fixed=False) + WhiteKernel(1e-2)
        with warnings.catch_warnings():  # scikit-learn warns of hyperparameters at its bounds
            warnings.simplefilter("ignore")
            reg = sklearn_gp.GaussianProcessRegressor(kernel_sk, alpha=0.0, n_restarts_optimizer=3, random_state=0,
                                                      normalize_y=normalize).fit(X, y if normalize else y - y.mean())
        theirs = reg.log_marginal_likelihood_value_ - (len(y) * np.log(y.std()) if normalize else 0.0)
        assert ours >= theirs - 1e-6 * abs(theirs), (normalize, ours, theirs)


@pytest.mark.parametrize("select", ["loo", "evidence"])
def test_same_random_state_same_fit_and_restarts_never_worsen_the_criterion(select):
    """More restarts add optima to choose from (the first starts are the same): the evidence rule's
    likelihood never falls, the loo rule's leave-one-out error never rises."""
    X, y, _ = _problem("friedman1", 5)
    a = GaussianProcess(restarts=2, random_state=3, select=select).fit(X, y)
    b = GaussianProcess(restarts=2, random_state=3, select=select).fit(X, y)
    np.testing.assert_array_equal(a.lengthscale_, b.lengthscale_)
    one = GaussianProcess(restarts=0, random_state=3, select=select).fit(X, y)
    if select == "evidence":
        assert a.log_marginal_likelihood_[0] >= one.log_marginal_likelihood_[0] - 1e-9
    else:
        assert a.fit_loo_error_[0] <= one.fit_loo_error_[0]


def test_multi_output_is_one_gp_per_output():
    X, y, Xt = _problem("friedman1", 5)
    Y = np.stack([y, np.sin(3 * X[:, 0])], 1)
    both = GaussianProcess(restarts=1).fit(X, Y)
    mean, std = both.predict(Xt, return_std=True)
    assert mean.shape == std.shape == (len(Xt), 2)
    for j in range(2):
        alone = GaussianProcess(restarts=1, random_state=0).fit(X, Y[:, j])
        # output j's starts are drawn from (random_state, j): alone it is output 0, so refit
        # output j alone at the hyperparameters the joint fit found and compare
        fixed = GaussianProcess(lengthscale=both.lengthscale_[j], output_scale=both.output_scale_[j],
                                noise=both.noise_[j], optimize=False).fit(X, Y[:, j])
        np.testing.assert_allclose(fixed.predict(Xt), mean[:, j], rtol=1e-10)
        assert alone.lengthscale_.shape == (1, 5)


@pytest.mark.parametrize("offset, scale", [(3.0, 0.0), (1e6, 1e2), (0.0, 1e-9)])
def test_labels_far_from_unit_scale_are_fitted_where_they_are(offset, scale):
    """Constant labels, a large offset over small variation, and tiny labels: a lab's raw units.
    The fit neither fails nor loses the variation to the offset (measured here: an error of 3e-4 of the
    variation at either scale; through budgeted jobs of 1,000 labels, held-out Err 0, 3e-8 and 6e-5
    against 0, 2e-7 and 2e-3 for scikit-learn's GP on Q's mixture)."""
    X, _, Xt = _problem("friedman1", 5)
    f = lambda x: offset + scale * np.sin(x[:, 0]) * x[:, 1]
    mean, std = GaussianProcess(restarts=1, random_state=0).fit(X, f(X)).predict(Xt, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std >= 0)
    resid = np.abs(mean - f(Xt))
    if scale == 0.0:
        assert resid.max() <= 1e-9 * offset
    else:
        assert np.sqrt(np.mean(resid**2)) < 1e-2 * scale * np.std(np.sin(Xt[:, 0]) * Xt[:, 1])


def test_hyperparameters_fitted_on_a_subset_condition_on_every_point():
    X, y, _ = _problem("sobol_g", 2, n=150)
    gp = GaussianProcess(max_fit_points=40, restarts=0).fit(X, y)
    assert gp.alpha_[0].shape == (150,)
    # the posterior mean nearly interpolates a smooth function at its training points
    assert np.sqrt(np.mean((gp.predict(X) - y) ** 2)) < 0.5 * np.std(y)


@pytest.mark.parametrize("kernel", ["squared_exponential", "matern52"])
def test_document_round_trips_and_loads_into_sklearn_with_equal_predictions(kernel):
    import json

    X, y, Xt = _problem("friedman1", 5)
    gp = GaussianProcess(kernel, restarts=1).fit(X, y)
    doc = json.loads(json.dumps(gp.to_spec()))  # through JSON, as the service sends it
    again = from_spec(doc)
    m1, s1 = gp.predict(Xt, return_std=True)
    m2, s2 = again.predict(Xt, return_std=True)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(s1, s2)
    rtol = agreement_rtol(doc)
    # the variance s^2 - k^T K_y^{-1} k is a difference of numbers of size s^2: near the data its
    # round-off is relative to s^2, not to the small result
    scale = np.sqrt(doc["outputs"][0]["output_scale"])
    latent = gp.predict(Xt, return_std=True, std="latent")[1]
    reg, c = to_sklearn(doc)  # the docs' recipe by hand (the noise as alpha: the latent std)
    sk_mean, sk_std = reg.predict(Xt, return_std=True)
    np.testing.assert_allclose(m1, sk_mean + c, rtol=rtol)
    np.testing.assert_allclose(latent, sk_std, rtol=rtol, atol=rtol * scale)
    # and as code: the loaded document's own scikit-learn regressor, with the document's kernel
    fitted = again.to_sklearn()
    expected = {"squared_exponential": RBF, "matern52": Matern}[kernel]
    assert isinstance(fitted.kernel_.k1.k2, expected) and isinstance(fitted.kernel_.k2, WhiteKernel)
    if kernel == "matern52":
        assert fitted.kernel_.k1.k2.nu == 2.5
    sk_mean, sk_std = fitted.predict(Xt, return_std=True)
    np.testing.assert_allclose(m1, sk_mean, rtol=rtol)
    np.testing.assert_allclose(s1, sk_std, rtol=rtol, atol=rtol * scale)


def test_from_spec_refuses_what_is_not_a_model_document():
    with pytest.raises(ValueError, match="kind"):
        from_spec({"kind": "lwl.distribution"})
    with pytest.raises(ValueError, match="version"):
        from_spec({"kind": "lwl.model", "version": 99})


@pytest.mark.parametrize("kernel", ["squared_exponential", "matern52"])
def test_closed_form_likelihood_gradient_equals_autograd(kernel):
    """The fit's gradient (R&W eq. 5.9 with the mean profiled out) against torch autograd
    through the Cholesky factorisation, at hyperparameters away from the data's scales."""
    import torch

    from lwl.models.gp import _lml_and_gradient, _lml_terms

    X, y, _ = _problem("friedman1", 5, n=80, seed=3)
    X, y = torch.tensor(X), torch.tensor(y)
    theta = torch.tensor([-1.2, 0.3, -0.5, 1.0, 2.0, 1.5, -4.0], dtype=torch.float64, requires_grad=True)
    lml = _lml_terms(kernel, X, y, theta[:5], theta[5], theta[6])[0]
    (expected,) = torch.autograd.grad(lml, theta)
    value, grad = _lml_and_gradient(kernel, X, y, theta.detach())
    assert value == pytest.approx(float(lml.detach()), rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), expected.numpy(), rtol=1e-8, atol=1e-10 * float(expected.abs().max()))


@pytest.mark.parametrize("select", ["loo", "evidence"])
def test_auto_keeps_the_kernel_select_prefers_and_serves_it(select):
    """kernel="auto" fits both kernels and becomes the fit of lower leave-one-out error (select
    loo) or higher log marginal likelihood (evidence): equal to that kernel's own fit, and its
    document names the kernel chosen."""
    X, y, Xt = _problem("friedman1", 5, n=80, seed=4)
    auto = GaussianProcess("auto", restarts=1, select=select).fit(X, y)
    own = {k: GaussianProcess(k, restarts=1, select=select).fit(X, y) for k in ("squared_exponential", "matern52")}
    if select == "loo":
        best = min(own, key=lambda k: own[k].fit_loo_error_[0])
    else:
        best = max(own, key=lambda k: own[k].fit_log_marginal_likelihood_[0])
    assert auto.kernel_ == best and auto.kernel == "auto"
    assert auto.kernel_evidence_ == {k: pytest.approx(float(g.fit_log_marginal_likelihood_[0]), rel=1e-12)
                                     for k, g in own.items()}
    assert auto.kernel_loo_error_ == {k: pytest.approx(float(g.fit_loo_error_[0]), rel=1e-12) for k, g in own.items()}
    # fitted on all 80 points: the conditioning factor's evidence is the maximised one, up to the
    # round-off of two computations of an ill-conditioned K_y (Matern's noise is at its lower bound)
    for g in own.values():
        assert g.log_marginal_likelihood_[0] == pytest.approx(g.fit_log_marginal_likelihood_[0], rel=1e-5)
    np.testing.assert_array_equal(auto.predict(Xt), own[best].predict(Xt))
    doc = auto.to_spec()
    assert doc["kernel"] == best
    np.testing.assert_allclose(from_spec(doc).predict(Xt), auto.predict(Xt), rtol=1e-10)


@pytest.mark.parametrize("select", ["loo", "evidence"])
def test_auto_conditions_only_the_winner_on_every_point_and_compares_on_the_fitting_subset(select):
    """Above max_fit_points the kernels are compared on the same fitting subset, by their
    leave-one-out error (loo) or their maximised evidence; the winner alone is factored on all n
    points, and its log_marginal_likelihood_ is the evidence of all of them (equal to
    _lml_terms'). Which kernel wins on these data is not fixed here: the two fits are close, and
    the optimum each reaches moves with the CPU's floating-point code path (BLAS kernels, SIMD
    width); the rule's property is what is asserted (issue #84)."""
    from lwl.models.gp import _lml_terms

    X, y, _ = _problem("friedman1", 5, n=150, seed=5)
    # the noise floor of 1e-6 Var(y): at the default floor the single-kernel fits' evidence check refits them on
    # all 150 points, so their evidence is no longer the subset's that auto compared
    kw = dict(restarts=0, max_fit_points=60, select=select, noise_bounds=(1e-6, 1.0))
    auto = GaussianProcess("auto", **kw).fit(X, y)
    own = {k: GaussianProcess(k, **kw).fit(X, y) for k in ("squared_exponential", "matern52")}
    assert auto.kernel_evidence_ == {k: float(g.fit_log_marginal_likelihood_[0]) for k, g in own.items()}
    assert auto.kernel_loo_error_ == {k: float(g.fit_loo_error_[0]) for k, g in own.items()}
    # the kept kernel is the one of lowest LOO error / highest evidence among those fitted
    if select == "loo":
        assert auto.kernel_loo_error_[auto.kernel_] == min(auto.kernel_loo_error_.values())
    else:
        assert auto.kernel_evidence_[auto.kernel_] == max(auto.kernel_evidence_.values())
    g = own[auto.kernel_]
    theta = [torch.as_tensor(v, dtype=torch.float64) for v in
             (np.log(g.lengthscale_[0]), np.log(g.output_scale_[0]), np.log(g.noise_[0]))]
    expected = float(_lml_terms(g.kernel_, g.X_, torch.as_tensor(y, dtype=torch.float64), *theta)[0])
    # two factorisations of K_y agree to round-off times its condition number (here ~1e9: the
    # fitted noise is 1e-9 of the output scale): a few 1e-6 here, while the fitting subset's
    # evidence differs from all points' by most of a nat
    diag = g.chol_[0].diagonal()
    rel = max(1e-10, 50 * np.finfo(np.float64).eps * float(diag.max() / diag.min()) ** 2)
    assert auto.log_marginal_likelihood_[0] == pytest.approx(expected, rel=rel)
    assert auto.log_marginal_likelihood_[0] == pytest.approx(g.log_marginal_likelihood(), rel=rel)


@pytest.mark.parametrize("select", ["loo", "evidence"])
def test_auto_picks_the_squared_exponential_on_a_smooth_function_and_matern_on_a_kinked_one(select):
    """Both criteria tell the kernels apart where they differ: sin(3x) in 2-d (smooth) and
    |x1 - 0.5| + x2 (a kink)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(150, 2))
    smooth = GaussianProcess("auto", restarts=1, select=select).fit(X, np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 1]))
    kinked = GaussianProcess("auto", restarts=1, select=select).fit(X, np.abs(X[:, 0] - 0.5) + X[:, 1])
    assert smooth.kernel_ == "squared_exponential" and kinked.kernel_ == "matern52"


def test_loo_error_is_the_refit_without_each_point():
    """_loo_error (R&W eq. 5.12) equals the error of GPs conditioned on n - 1 points at the same
    hyperparameters and the same constant mean, predicting the point left out."""
    from lwl.models.gp import _loo_error

    X, y, _ = _problem("friedman1", 5, n=40, seed=7)
    g = GaussianProcess("matern52", restarts=0).fit(X, y)
    theta = np.concatenate([np.log(g.lengthscale_[0]), np.log(g.output_scale_), np.log(g.noise_)])
    residuals = []
    for i in range(len(X)):
        keep = np.arange(len(X)) != i
        h = GaussianProcess("matern52", lengthscale=g.lengthscale_[0], output_scale=float(g.output_scale_[0]),
                            noise=float(g.noise_[0]), mean=float(g.mean_[0]), optimize=False).fit(X[keep], y[keep])
        # the latent mean's prediction; the noise of y_i is not in the LOO residual of the mean
        residuals.append(float(h.predict(X[i:i + 1])[0]) - y[i])
    expected = np.mean(np.square(residuals)) / np.var(y)
    got = _loo_error("matern52", torch.as_tensor(X), torch.as_tensor(y), theta)
    # the refits work in their own standardised units (the mean and scales of 39 points): equal to
    # round-off times K_y's condition number (the fitted noise sits near its floor)
    assert got == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("device", devices())
def test_loo_residuals_of_the_conditioned_model_are_its_refits_without_each_point(device, monkeypatch):
    """GaussianProcess.loo_residuals (R&W eq. 5.12 from the model's own factor, in column blocks)
    equals GPs conditioned on n - 1 points at the same hyperparameters and mean, at any rows asked,
    per output; a block of one column gives the same numbers."""
    import lwl.models.gp.conditioned as gp_module

    X, y, _ = _problem("friedman1", 5, n=40, seed=3)
    Y = np.stack([y, np.sin(3 * X[:, 0]) + X[:, 1]], 1)
    # at well-conditioned hyperparameters (a fitted near-interpolant agrees to ~1e-7: agreement_rtol)
    g = GaussianProcess("squared_exponential", lengthscale=[0.4] * 5, output_scale=2.0, noise=1e-2, optimize=False,
                        device=device).fit(X, Y)
    rows = np.array([0, 7, 39, 12])
    expected = np.empty((len(rows), 2))
    for a, i in enumerate(rows):
        keep = np.arange(len(X)) != i
        for j in range(2):
            h = GaussianProcess("squared_exponential", lengthscale=g.lengthscale_[j],
                                output_scale=float(g.output_scale_[j]), noise=float(g.noise_[j]),
                                mean=float(g.mean_[j]), optimize=False).fit(X[keep], Y[keep, j])
            expected[a, j] = Y[i, j] - float(h.predict(X[i:i + 1])[0])
    got = g.loo_residuals(rows)
    assert got.shape == (4, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-12 * np.abs(Y).max())
    monkeypatch.setattr(gp_module, "LOO_BLOCK_ELEMENTS", 1)  # one column per block
    np.testing.assert_allclose(g.loo_residuals(rows), got, rtol=1e-12)
    single = GaussianProcess("squared_exponential", restarts=0, random_state=0).fit(X, y)
    assert single.loo_residuals().shape == (40,)
    with pytest.raises(ValueError, match="rows"):
        g.loo_residuals([40])


def test_loo_selection_keeps_a_predictive_optimum_where_the_evidence_keeps_an_interpolant():
    """On noise-free Friedman-1 labels of Q's mixture (examples/friedman1_budget.json, 2,000
    points, hyperparameters on 300) a Matern fit started in the corner of the bounds (noise at
    its lower bound, output scale at its upper one; a random start of seed 2 climbs there too)
    stays there at the highest likelihood, and the data-scaled start ends inside the bounds;
    select evidence keeps the corner, select loo the optimum inside, of lower held-out error.
    Both starts are given (a warm start), so the test does not hang on a random start's path."""
    rng = np.random.default_rng([2, 4242])
    means, covs = [np.zeros(5), np.array([1.0, 0, 1, 0, 1])], [2.0 * np.eye(5), np.eye(5)]
    oracle = make_oracle({"name": "friedman1"})

    def draw(n):
        k = rng.integers(0, 2, n)
        return np.stack([rng.multivariate_normal(means[j], covs[j]) for j in k])

    Xt = draw(2000)
    yt = oracle.label(Xt)
    X = draw(2000)
    y = oracle.label(X)
    var, spread = np.var(y), X.std(0)
    # where seed 2's random start ends: x4, x5 (Friedman-1's linear terms) at the lengthscale bound
    # (standardised log hyperparameters: lengthscales per input spread, s^2 and noise per Var(y); at the noise
    # floor of 1e-6 Var(y), lwl's before, where this corner was found)
    corner = np.log(np.array([20, 16, 150, 1e4, 1e4, 1e6, 1e-6]))[None]  # (1, d + 2)
    fits = {}
    for s in ("loo", "evidence"):
        g = GaussianProcess("matern52", max_fit_points=300, random_state=2, select=s, noise_bounds=(1e-6, 1.0))
        g._fit_hyperparameters(X, y, "matern52", 300, warm=corner)  # starts: the data's scales, the corner
        g._condition(None)
        fits[s] = g
    ev, loo = fits["evidence"], fits["loo"]
    assert ev.noise_[0] == pytest.approx(1e-6 * np.var(y), rel=1e-6)  # the interpolant at the bounds
    assert ev.fit_log_marginal_likelihood_[0] > loo.fit_log_marginal_likelihood_[0]
    assert loo.fit_loo_error_[0] < ev.fit_loo_error_[0]
    assert loo.noise_[0] > 1e-5 * np.var(y)
    err = {s: np.sqrt(np.mean((g.predict(Xt) - yt) ** 2) / np.mean(yt**2)) for s, g in fits.items()}
    assert err["loo"] < 0.9 * err["evidence"], err


@pytest.mark.parametrize("kernel", ["auto", "matern52"])
def test_fit_hyperparameters_learns_what_fit_learns_without_conditioning(kernel):
    """fit_hyperparameters gives fit's hyperparameters before the final fit (a budgeted design's
    scores condition other training sets at them) and factors nothing: no model to predict with."""
    X, y, _ = _problem("friedman1", 5, n=120, seed=6)
    full = GaussianProcess(kernel, restarts=1, max_fit_points=50, final_fit_points=0).fit(X, y)
    only = GaussianProcess(kernel, restarts=1, max_fit_points=50).fit_hyperparameters(X, y)
    assert only.kernel_ == full.kernel_
    for name in ("lengthscale_", "output_scale_", "noise_", "fit_log_marginal_likelihood_", "fit_loo_error_"):
        np.testing.assert_array_equal(getattr(only, name), getattr(full, name))
    assert not hasattr(only, "alpha_") and not hasattr(only, "log_marginal_likelihood_")


def test_a_subset_fit_whose_evidence_does_not_carry_over_is_fitted_again_on_more_points():
    """The evidence check of fit: where the log marginal likelihood per point on all n points
    falls below the fitting subset's, the hyperparameters are fitted again on 4x the points (up
    to refit_points). Sobol G in d = 7 on 400 points, fitted on 25: the check must fire and the
    kept fit pass it; with refit_points at max_fit_points nothing is refitted."""
    X, y, _ = _problem("sobol_g", 7, n=400, seed=2)
    never = GaussianProcess("squared_exponential", restarts=1, max_fit_points=25, refit_points=None).fit(X, y)
    gap = never.fit_log_marginal_likelihood_[0] / 25 - never.log_marginal_likelihood_[0] / 400
    assert never.fit_points_ == 25 and gap > 0  # the subset's hyperparameters do not carry over
    checked = GaussianProcess("squared_exponential", restarts=1, max_fit_points=25, refit_points=400).fit(X, y)
    assert checked.fit_points_ > 25
    m = checked.fit_points_
    assert checked.fit_points_ == 400 or (checked.fit_log_marginal_likelihood_[0] / m
                                          <= checked.log_marginal_likelihood_[0] / 400)
    assert checked.log_marginal_likelihood_[0] > never.log_marginal_likelihood_[0]


def test_the_evidence_check_refits_the_kernel_that_auto_chose_on_the_subset():
    """kernel auto: the kernels are compared once, on the subset; a refit keeps the winner
    (started from the data's scales and the subset's optimum) and passes the check."""
    X, y, _ = _problem("sobol_g", 7, n=400, seed=2)
    subset = GaussianProcess("auto", restarts=1, max_fit_points=25, refit_points=None).fit(X, y)
    checked = GaussianProcess("auto", restarts=1, max_fit_points=25, refit_points=400).fit(X, y)
    assert checked.fit_points_ > 25 and checked.kernel_ == subset.kernel_
    assert checked.kernel_evidence_ == subset.kernel_evidence_
    assert checked.log_marginal_likelihood_[0] > subset.log_marginal_likelihood_[0]
    assert checked.fit_points_ == 400 or checked._evidence_gap(400)[0] <= 0


def test_a_job_that_names_no_fitting_subset_fits_on_30_points_per_hyperparameter():
    """GPSpec.max_fit_points None (a job's default): the subset is max(300, 30 (d + 2)) points,
    what ``train`` and ``fit_hyperparameters`` (a budgeted design's scores) use; a given value is
    kept. Friedman-1 at d = 12 on 500 points: 420 fitting points, not 300 nor all 500."""
    from lwl.models import fit_hyperparameters, train
    from lwl.models.gp import GPSpec, default_fit_points

    assert [default_fit_points(d) for d in (1, 8, 9, 20, 30)] == [300, 300, 330, 660, 960]
    X, y, _ = _problem("friedman1", 12, n=500, seed=4)
    spec = GPSpec(kernel="squared_exponential", restarts=0, refit_points=10)
    assert spec.max_fit_points is None
    assert train(spec, X, y, ridge=1e-3, seed=0).fit_points_ == 420
    assert fit_hyperparameters(spec, X, y, seed=0).fit_points_ == 420
    given = spec.model_copy(update={"max_fit_points": 300})
    assert train(given, X, y, ridge=1e-3, seed=0).fit_points_ == 300
    assert GaussianProcess("squared_exponential", restarts=0, max_fit_points=None).fit(X[:200], y[:200]).fit_points_ == 200


def test_a_subset_fit_that_carries_over_is_kept():
    X, y, _ = _problem("friedman1", 5, n=400, seed=3)
    g = GaussianProcess("squared_exponential", restarts=1, max_fit_points=100).fit(X, y)
    assert g.fit_points_ == 100
    assert g.fit_log_marginal_likelihood_[0] / 100 < g.log_marginal_likelihood_[0] / 400


@pytest.mark.parametrize("kernel", ["squared_exponential", "matern52"])
def test_the_posterior_mean_is_kernel_ridge_on_rescaled_inputs(kernel):
    """as_kernel_ridge: KRR with the gp's kernel at lengthscale 1 on x / input_scale, nugget
    noise / s^2, labels minus the mean, gives the gp's posterior mean (the inner problem a gp
    job's bilevel moves differentiate)."""
    from lwl.models import KernelRidge
    from lwl.models.gp import as_kernel_ridge

    X, y, Xt = _problem("friedman1", 5, n=80)
    gp = GaussianProcess(kernel, lengthscale=[0.4, 0.7, 1.1, 2.0, 3.0], output_scale=2.5, noise=1e-2,
                         optimize=False).fit(X, y)
    form = as_kernel_ridge(gp)
    krr = KernelRidge(form.kernel, 1.0, form.nugget / len(X)).fit(X / form.input_scale, y - form.mean)
    np.testing.assert_allclose(krr.predict(Xt / form.input_scale) + form.mean, gp.predict(Xt), rtol=1e-8)


def _log_theta(g: GaussianProcess, output: int = 0) -> np.ndarray:
    return np.log(np.concatenate([g.lengthscale_[output], [g.output_scale_[output], g.noise_[output]]]))


def _held_out(name: str, d: int, n: int = 2000, seed: int = 9, params=None):
    T = np.random.default_rng(seed).uniform(size=(n, d))
    oracle = make_oracle({"name": name, **({"params": params} if params else {})})
    return T, np.asarray(oracle.label(T), dtype=np.float64).reshape(-1)


def test_the_final_fit_refines_the_subset_fit_on_every_point():
    """fit's final fit: hyperparameters fitted on 40 of 400 points, then refined by the likelihood
    of all 400 from that optimum, kept because their leave-one-out error on the 400 is lower.
    Friedman 1 (d = 5): the subset's lengthscales predict several times worse on held-out
    points than the refined ones (measured 9.2e-4 against 9.6e-5)."""
    from lwl.models.gp import _loo_error

    X, y, _ = _problem("friedman1", 5, n=400, seed=3)
    T, t = _held_out("friedman1", 5)
    # at the noise floor of 1e-6 Var(y) (lwl's before): at the default floor the subset's fit alone
    # reaches 1.3e-4 here and the refinement is not kept (the next test's case)
    kw = dict(kernel="squared_exponential", restarts=1, max_fit_points=40, refit_points=None, noise_bounds=(1e-6, 1.0))
    subset = GaussianProcess(**kw, final_fit_points=0).fit(X, y)
    final = GaussianProcess(**kw, final_fit_points=400).fit(X, y)
    assert subset.final_fit_points_ == 0 and not subset.final_fit_kept_.any()
    assert final.fit_points_ == 40 and final.final_fit_points_ == 400 and final.final_fit_kept_.all()
    Xt, yt = final._tensor(X), final._tensor(y)
    assert _loo_error(final.kernel_, Xt, yt, _log_theta(final)) < _loo_error(subset.kernel_, Xt, yt, _log_theta(subset))
    assert final.log_marginal_likelihood_[0] > subset.log_marginal_likelihood_[0]

    def err(g):
        return float(np.sqrt(np.mean((g.predict(T).ravel() - t) ** 2) / np.mean(t**2)))

    assert err(final) < 0.5 * err(subset), (err(final), err(subset))
    # the served document is the refined GP: it loads with the same predictions
    np.testing.assert_allclose(from_spec(final.to_spec()).predict(T), final.predict(T), rtol=1e-9, atol=1e-12)


def test_a_final_fit_that_does_not_lower_the_leave_one_out_error_is_not_kept():
    """The kernel expansion in d = 3 at its noise floor: the likelihood of all 400 points moves
    the subset's optimum, but not to a lower leave-one-out error; the subset's values are served,
    unchanged."""
    params = {"dim": 3, "centres": 20, "seed": 1}
    X, y, _ = _problem("kernel_expansion", 3, n=400, seed=3, params=params)
    # at the noise floor of 1e-6 Var(y) (lwl's before, where this case was found; at 1e-10 the refinement lowers
    # the leave-one-out error here and is kept, the case of the test above)
    kw = dict(kernel="squared_exponential", restarts=1, max_fit_points=80, refit_points=None, noise_bounds=(1e-6, 1.0))
    subset = GaussianProcess(**kw, final_fit_points=0).fit(X, y)
    final = GaussianProcess(**kw, final_fit_points=400).fit(X, y)
    assert final.final_fit_points_ == 400 and not final.final_fit_kept_.any()
    for name in ("lengthscale_", "output_scale_", "noise_", "mean_", "log_marginal_likelihood_"):
        np.testing.assert_array_equal(getattr(final, name), getattr(subset, name))


def test_the_final_fit_is_on_a_seeded_subset_beyond_final_fit_points_and_a_job_default():
    """With more points than final_fit_points the refinement uses a random subset of that many
    (the same for the same random_state); at or below the fitting subset there is none. A gp
    job's block (GPSpec) refines on up to 2,000 points: through ``train`` on 500 points, all 500."""
    from lwl.models import train
    from lwl.models.gp import FINAL_FIT_POINTS, GPSpec

    X, y, _ = _problem("friedman2", 4, n=400, seed=5)
    kw = dict(kernel="matern52", restarts=0, max_fit_points=50, refit_points=None)
    a = GaussianProcess(**kw, final_fit_points=150).fit(X, y)
    b = GaussianProcess(**kw, final_fit_points=150).fit(X, y)
    assert a.final_fit_points_ == 150
    np.testing.assert_array_equal(a.lengthscale_, b.lengthscale_)
    none = GaussianProcess(**kw, final_fit_points=50).fit(X, y)
    assert none.final_fit_points_ == 0
    np.testing.assert_array_equal(none.lengthscale_, GaussianProcess(**kw, final_fit_points=0).fit(X, y).lengthscale_)
    assert GPSpec().final_fit_points == FINAL_FIT_POINTS == 2000
    X, y, _ = _problem("friedman2", 4, n=500, seed=5)
    assert train(GPSpec(kernel="matern52", restarts=0), X, y, ridge=1e-3, seed=0).final_fit_points_ == 500
    off = GPSpec(kernel="matern52", restarts=0, final_fit_points=0)
    assert train(off, X, y, ridge=1e-3, seed=0).final_fit_points_ == 0


def test_fit_draws_keeps_the_draw_of_lowest_leave_one_out_error_on_a_common_subset():
    """fit_draws: the whole fit from several seeds (the first is random_state's one-draw fit), the
    one of lowest leave-one-out error on one common subset served. Each draw, refitted alone from
    its seed, has the recorded error there; the served GP predicts as the kept draw alone."""
    from lwl.models import train
    from lwl.models.gp import GPSpec, _loo_error

    X, y, _ = _problem("sobol_g", 4, n=300, seed=2)
    T, _ = _held_out("sobol_g", 4, n=200)
    kw = dict(kernel="matern52", restarts=0, max_fit_points=30, refit_points=None, final_fit_points=100)
    gp = GaussianProcess(**kw, fit_draws=4, random_state=7).fit(X, y)
    assert len(gp.draw_seeds_) == len(gp.draw_loo_errors_) == 4 and gp.draw_seeds_[0] == 7
    rows = gp.draw_loo_rows_
    assert len(rows) == 100 and len(np.unique(rows)) == 100  # final_fit_points of the 300
    alone = [GaussianProcess(**kw, random_state=int(s)).fit(X, y) for s in gp.draw_seeds_]
    Xc, yc = alone[0]._tensor(X[rows]), alone[0]._tensor(y[rows])
    errors = [_loo_error(g.kernel_, Xc, yc, _log_theta(g)) for g in alone]
    # (the draws' errors are on standardised data, these on the raw: equal to round-off)
    np.testing.assert_allclose(gp.draw_loo_errors_, errors, rtol=1e-9)
    assert len({round(e, 9) for e in errors}) > 1  # the draws differ: the choice is not vacuous
    assert gp.fit_draw_ == int(np.argmin(errors))
    kept = alone[gp.fit_draw_]
    np.testing.assert_array_equal(gp.lengthscale_, kept.lengthscale_)
    np.testing.assert_allclose(gp.predict(T), kept.predict(T), rtol=1e-12)
    # one draw is the plain fit; a job's block passes its fit_draws through train
    one = GaussianProcess(**kw, fit_draws=1, random_state=7).fit(X, y)
    np.testing.assert_array_equal(one.lengthscale_, alone[0].lengthscale_)
    assert not hasattr(one, "fit_draw_") and GPSpec().fit_draws == 1
    block = GPSpec(kernel="matern52", restarts=0, max_fit_points=30, final_fit_points=100, fit_draws=3)
    assert len(train(block, X, y, ridge=1e-3, seed=7).draw_seeds_) == 3
