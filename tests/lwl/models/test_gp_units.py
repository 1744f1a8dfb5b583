"""The served GP in a lab's own units (issue 83): the same fit whatever affine units the inputs and
labels are posed in (inputs offset by 1e6 with spreads of 1e-3, spreads from 1e-3 to 1e5, duplicate
inputs; deterministic and noisy labels), never behind scikit-learn's standardised ARD GP on the
same points beyond a stated margin, an error bar that covers fresh measurements, and a K_y that
fails to factor retried along the jitter ladder, the retry recorded."""

import json
import warnings

import numpy as np
import pytest
import torch

from lwl.models import GaussianProcess, from_spec
from lwl.models.gp import JITTER_LADDER, NOISE_FLOOR, START_NOISE_LOW

sklearn_gp = pytest.importorskip("sklearn.gaussian_process")
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

D = 3


def f(u: np.ndarray) -> np.ndarray:
    """A smooth test function of standard inputs in [0, 1]^3 (no one of the oracles')."""
    return np.sin(3 * u[:, 0]) * np.exp(u[:, 1]) + (u[:, 2] - 0.3) ** 2


POSINGS = {
    # an input whose zero is far from its spread: a wavelength in metres, a timestamp
    "offset_1e6_spread_1e-3": (np.full(D, 1e6), np.full(D, 1e-3)),
    # Pa, m, ohm: spreads from 1e-3 to 1e5, moderate offsets
    "mixed_scales": (np.array([3e2, -5.0, 1e5]), np.array([1e-3, 1.0, 1e5])),
}


def _data(n: int, duplicates: bool, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    U = rng.uniform(size=(n // 2 if duplicates else n, D))
    if duplicates:  # every input measured twice (a repeat on the instrument)
        U = np.concatenate([U, U])
    y = f(U)
    sd = noise * y.std()
    y_obs = y + sd * rng.standard_normal(len(y))
    T = rng.uniform(size=(500, D))
    return U, y_obs, T, f(T), sd


def _err(pred, truth):
    return float(np.sqrt(np.mean((pred - truth) ** 2) / np.mean(truth**2)))


def _sklearn_err(X, y, T, truth):
    """scikit-learn's standardised ARD GP (a lab's recipe): StandardScaler, normalize_y, Matern 5/2
    and RBF with a WhiteKernel, the higher likelihood kept."""
    s = StandardScaler().fit(X)
    best = None
    for k in (Matern(np.ones(D), (1e-3, 1e3), nu=2.5), RBF(np.ones(D), (1e-3, 1e3))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reg = sklearn_gp.GaussianProcessRegressor(ConstantKernel(1.0, (1e-3, 1e3)) * k + WhiteKernel(1e-6, (1e-12, 1.0)),
                                                      alpha=1e-10, normalize_y=True, n_restarts_optimizer=1,
                                                      random_state=0).fit(s.transform(X), y)
        if best is None or reg.log_marginal_likelihood_value_ > best.log_marginal_likelihood_value_:
            best = reg
    return _err(best.predict(s.transform(T)), truth)


@pytest.mark.slow  # eight fits of scikit-learn's GP: the full suite's, not the fast loop's
@pytest.mark.parametrize("noise", [0.0, 0.01], ids=["deterministic", "noisy"])
@pytest.mark.parametrize("duplicates", [False, True], ids=["distinct", "duplicates"])
@pytest.mark.parametrize("posing", list(POSINGS))
def test_a_fit_in_a_labs_units_is_the_fit_in_standard_units(posing, duplicates, noise):
    """The same points posed in physical units (inputs offset + scale x, labels 1e3 + 50 y) give the
    standard posing's fit: predictions mapped back agree (to what float64 inputs offset by 1e6 with a
    spread of 1e-3 resolve), the lengthscales are the standard ones times each input's scale, the
    served document reloads to the same numbers, and its held-out Err is within 10% of scikit-learn's
    standardised GP on the same points or below it."""
    offset, scale = POSINGS[posing]
    U, y, T, truth, _ = _data(160, duplicates, noise)
    std = GaussianProcess(random_state=0).fit(U, y)
    phys = GaussianProcess(random_state=0).fit(offset + scale * U, 1e3 + 50 * y)
    assert std.kernel_ == phys.kernel_
    back = (phys.predict(offset + scale * T) - 1e3) / 50
    mine = std.predict(T)
    spread = truth.std()
    assert np.sqrt(np.mean((back - mine) ** 2)) < 1e-3 * spread, posing
    # (the hyperparameters themselves are not compared: on noise-free labels the likelihood is flat along
    # its ridge near the noise floor, and round-off of the posing moves the optimum 10-20% along it at equal
    # predictions)
    assert phys.noise_floor() == std.noise_floor() == NOISE_FLOOR  # 1e6 offsets still resolve ~1e-6 of a spread
    doc = json.loads(json.dumps(phys.to_spec()))
    again = from_spec(doc)
    np.testing.assert_array_equal(again.predict(offset + scale * T), phys.predict(offset + scale * T))
    ours = _err(back, truth)
    theirs = _sklearn_err(offset + scale * U, 1e3 + 50 * y, offset + scale * T, truth)
    assert ours <= 1.1 * theirs, (ours, theirs)


@pytest.mark.parametrize("posing", list(POSINGS))
def test_the_served_std_covers_fresh_measurements(posing):
    """With 1% label noise the default ``std`` is a new measurement's (latent + the fitted noise):
    fresh measurements fall within 2 of them about 95% of the time (>= 85% asked), where the latent
    std alone covers far fewer (the noise is most of a measurement's error here)."""
    offset, scale = POSINGS[posing]
    U, y, T, truth, sd = _data(300, False, 0.01)
    gp = GaussianProcess(random_state=0).fit(offset + scale * U, 1e3 + 50 * y)
    fresh = 1e3 + 50 * (truth + sd * np.random.default_rng(9).standard_normal(len(truth)))
    mean, std = gp.predict(offset + scale * T, return_std=True)
    latent = gp.predict(offset + scale * T, return_std=True, std="latent")[1]
    within = np.mean(np.abs(fresh - mean) <= 2 * std)
    assert within >= 0.85
    assert np.mean(np.abs(fresh - mean) <= 2 * latent) < within
    np.testing.assert_allclose(std**2, latent**2 + gp.noise_[0], rtol=1e-10)


def test_a_noise_floor_relative_to_what_the_data_resolve():
    """Deterministic labels of standard inputs: the floor is 1e-10 Var(y) (scikit-learn's alpha on
    standardised labels); inputs offset by 1e6 with a spread of 1e-3 resolve ~1e-6 of their spread
    in float64 (a floor of 1e-12: 1e-10 holds), and offset by 1e9 only ~1e-3 of it, where the floor
    rises to the square of that."""
    U, y, *_ = _data(60, False, 0.0)
    gp = GaussianProcess(random_state=0).fit(U, y)
    assert gp.noise_floor() == NOISE_FLOOR
    assert gp.noise_floor_[0] == pytest.approx(NOISE_FLOOR * y.var(), rel=1e-12)
    assert GaussianProcess(random_state=0).fit(1e6 + 1e-3 * U, y).noise_floor() == NOISE_FLOOR
    X = 1e9 + 1e-3 * U
    far = GaussianProcess(random_state=0).fit(X, y)
    resolved = np.finfo(float).eps * (np.max(np.abs(X) / X.std(0)) + np.max(np.abs(y)) / y.std())
    assert far.noise_floor() == pytest.approx(resolved**2, rel=1e-4)  # (the spread of 1e9 + u: digits lost) and far.noise_floor() > NOISE_FLOOR


def test_random_starts_draw_the_noise_above_the_floor_and_the_fit_may_go_below(monkeypatch):
    """The random starts' noise is drawn from START_NOISE_LOW Var(y) up (the draws the 1e-6 floor
    made, so a floor change does not move which optimum a start reaches), while the bound the
    optimiser sees is the floor: deterministic labels still fit a noise below the starts'."""
    U, y, *_ = _data(60, False, 0.0)
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    original = GaussianProcess._maximise

    def spy(self, X, yy, theta0, lo, hi):
        seen.append((np.array(theta0), lo.copy(), hi.copy()))
        return original(self, X, yy, theta0, lo, hi)

    monkeypatch.setattr(GaussianProcess, "_maximise", spy)
    # twenty draws: from the floor up (the old draw), 40% of them would fall below 1e-6
    gp = GaussianProcess(kernel="matern52", restarts=20, random_state=0).fit(U, y)
    randoms = seen[1:21]  # the data-scaled start first, then the draws
    assert len(randoms) == 20
    for theta0, lo, hi in randoms:
        assert lo[-1] == pytest.approx(np.log(NOISE_FLOOR))
        assert np.log(START_NOISE_LOW) <= theta0[-1] <= hi[-1]
    assert gp.noise_[0] / y.var() < START_NOISE_LOW  # the optimum goes below where the starts were drawn


def test_a_factor_that_fails_is_retried_with_jitter_and_recorded(monkeypatch):
    """A K_y that does not factor at the fitted noise is factored with the noise raised along the
    jitter ladder; the raise is in the served noise and in ``jitter_`` and the document, and the
    document reloads to the same numbers without a retry."""
    import lwl.models.gp.conditioned as gp_module

    U, y, T, *_ = _data(80, False, 0.0)
    real = torch.linalg.cholesky_ex
    calls = {"n": 0}

    def failing_first(K, *a, **k):  # the first factorisation of 80 points fails (a stalled pivot)
        L, info = real(K, *a, **k)
        if K.shape[0] == 80 and calls["n"] == 0:
            calls["n"] += 1
            info.fill_(3)
        return L, info

    fixed = GaussianProcess("matern52", lengthscale=[0.3, 0.4, 0.5], output_scale=2.0, noise=1e-9, optimize=False)
    monkeypatch.setattr(gp_module.torch.linalg, "cholesky_ex", failing_first)
    gp = fixed.fit(U, y)
    monkeypatch.setattr(gp_module.torch.linalg, "cholesky_ex", real)
    v = float(gp.standardisation_.y_scale[0]) ** 2
    assert gp.jitter_[0] == pytest.approx(JITTER_LADDER[0] * 2.0, rel=1e-9)  # the first rung, of the output scale
    assert gp.noise_[0] == pytest.approx(1e-9 + gp.jitter_[0], rel=1e-12) and v > 0
    doc = json.loads(json.dumps(gp.to_spec()))
    assert doc["outputs"][0]["jitter"] == gp.jitter_[0]
    again = from_spec(doc)
    assert again.jitter_[0] == gp.jitter_[0] and again.noise_[0] == gp.noise_[0]  # the record; no second raise
    np.testing.assert_array_equal(again.predict(T), gp.predict(T))


def test_a_factor_that_never_succeeds_says_so(monkeypatch):
    import lwl.models.gp.conditioned as gp_module

    U, y, *_ = _data(40, False, 0.0)
    real = torch.linalg.cholesky_ex

    def never(K, *a, **k):
        L, info = real(K, *a, **k)
        info.fill_(1)
        return L, info

    monkeypatch.setattr(gp_module.torch.linalg, "cholesky_ex", never)
    with pytest.raises(np.linalg.LinAlgError, match="jitter"):
        GaussianProcess("matern52", lengthscale=0.3, output_scale=1.0, noise=1e-6, optimize=False).fit(U, y)


def test_predict_refuses_a_wrong_width_and_reads_a_column_for_one_input():
    U, y, T, *_ = _data(40, False, 0.0)
    gp = GaussianProcess("matern52", restarts=0).fit(U, y)
    with pytest.raises(ValueError, match=r"X: expected \(m, 3\)"):
        gp.predict(T[:, :2])
    with pytest.raises(ValueError, match=r"X: expected \(m, 3\)"):
        gp.predict(T.reshape(-1))  # (1500,) is not 500 points of 3 inputs: refused, not reshaped
    one = GaussianProcess("matern52", restarts=0).fit(U[:, :1], y)
    np.testing.assert_array_equal(one.predict(T[:, 0]), one.predict(T[:, :1]))
    with pytest.raises(ValueError, match="std"):
        gp.predict(T, return_std=True, std="both")


def test_per_output_hyperparameters_are_each_outputs_own():
    """Given hyperparameters (``train(hyperparameters=h)``, a budgeted design's scores) apply to each
    output as fitted to it, not output 0's to all."""
    from lwl.models import train
    from lwl.models.gp import GPSpec

    U, y, T, *_ = _data(80, False, 0.0)
    Y = np.stack([y, 1e4 * np.cos(4 * U[:, 1])], 1)
    h = GaussianProcess(restarts=0).fit(U, Y)
    assert not np.allclose(h.lengthscale_[0], h.lengthscale_[1])
    again = train(GPSpec(kernel=h.kernel_), U, Y, ridge=1e-3, seed=0, hyperparameters=h)
    np.testing.assert_allclose(again.lengthscale_, h.lengthscale_)
    np.testing.assert_allclose(again.noise_, h.noise_)
    np.testing.assert_allclose(again.predict(T), h.predict(T), rtol=1e-6, atol=1e-8 * np.abs(Y).max())


def test_the_constructor_defaults_are_a_jobs():
    from lwl.models.gp import GPSpec

    spec, gp = GPSpec(), GaussianProcess()
    for name in ("kernel", "restarts", "max_fit_points", "refit_points", "final_fit_points", "select", "fit_draws"):
        assert getattr(gp, name) == getattr(spec, name), name
    assert gp.noise_bounds[0] == spec.noise_floor


def test_fit_draws_keep_no_factor_but_the_served_ones(monkeypatch):
    """Each draw's factors are dropped once it is scored: at most one draw's and the served model's
    factors are alive at once (at 8,000 points a factor is 0.5 GB)."""
    import gc
    import weakref

    U, y, T, *_ = _data(120, False, 0.0)
    alive, factors = [], []
    real = GaussianProcess._condition

    def spy(self, mean):
        real(self, mean)
        factors.append(weakref.ref(self.chol_[0]))
        gc.collect()
        alive.append(sum(r() is not None for r in factors))

    monkeypatch.setattr(GaussianProcess, "_condition", spy)
    gp = GaussianProcess("matern52", restarts=0, max_fit_points=40, fit_draws=3).fit(U, y)
    assert max(alive) <= 2 and len(factors) >= 4  # three draws and the served one
    assert gp.chol_[0].shape == (120, 120)
    one = GaussianProcess("matern52", restarts=0, max_fit_points=40, random_state=int(gp.draw_seeds_[gp.fit_draw_])).fit(U, y)
    np.testing.assert_allclose(gp.predict(T), one.predict(T), rtol=1e-9)


def test_a_budget_whose_gp_would_pass_the_memory_limit_is_refused_naming_the_field():
    """20,000 labels: four 20,000 x 20,000 matrices and a likelihood step pass 6 GB (GPSpec.check_labels),
    refused at submit with the largest budget that fits; 8,000 are taken. The fitting subsets are
    capped where one likelihood step would pass 5.6 GB."""
    from pathlib import Path

    from lwl.models.gp import GP_MEMORY_LIMIT_BYTES, served_model_bytes
    from lwl.spec import SpecError, parse_job_spec

    spec = json.loads((Path(__file__).resolve().parents[3] / "examples" / "friedman1_budget.json").read_text())
    assert served_model_bytes(20_000, 2000) > GP_MEMORY_LIMIT_BYTES >= served_model_bytes(8_000, 2000)
    with pytest.raises(SpecError) as err:
        parse_job_spec({**spec, "budget": 20_000})
    assert "budget" in str(err.value) and "GB" in str(err.value) and "a budget of up to about" in str(err.value)
    assert parse_job_spec({**spec, "budget": 8_000}).budget == 8_000
    with pytest.raises(SpecError, match="max_fit_points"):
        parse_job_spec({**spec, "model": {"name": "gp", "max_fit_points": 20_000}})


def test_equal_inputs_are_left_out_together():
    """A point measured twice is predicted from the rest without its twin (_loo_error and loo): the
    residuals equal a GP conditioned without both, at the same hyperparameters and mean; left out
    one at a time the twin would predict it."""
    from lwl.models.gp import _loo_error

    U, y, *_ = _data(60, False, 0.01)
    U = np.concatenate([U, U[:5]])
    y = np.concatenate([y, y[:5] + 0.01 * np.random.default_rng(3).standard_normal(5)])
    gp = GaussianProcess("matern52", restarts=0).fit(U, y)
    res, sd = gp.loo(np.array([0, 7, 61]))
    for k, i in enumerate((0, 7, 61)):
        twins = np.flatnonzero((U == U[i]).all(1))
        keep = np.setdiff1d(np.arange(len(U)), twins)
        h = GaussianProcess("matern52", lengthscale=gp.lengthscale_[0], output_scale=gp.output_scale_[0],
                            noise=gp.noise_[0], mean=gp.mean_[0], optimize=False).fit(U[keep], y[keep])
        mean, std = h.predict(U[i:i + 1], return_std=True)
        assert res[k] == pytest.approx(y[i] - mean[0], rel=1e-6, abs=1e-9)
        assert sd[k] == pytest.approx(std[0], rel=1e-6)
    theta = np.log(np.concatenate([gp.lengthscale_[0] / gp.standardisation_.x_scale,
                                   [gp.output_scale_[0] / gp.standardisation_.y_scale[0] ** 2,
                                    gp.noise_[0] / gp.standardisation_.y_scale[0] ** 2]]))
    full, _ = gp.loo()
    Ys = torch.as_tensor(gp.Ys_[:, 0])
    got = _loo_error("matern52", gp.Xs_, Ys, theta)
    assert got == pytest.approx(np.mean(full**2) / np.var(y), rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("noise", [0.0, 0.01], ids=["deterministic", "noisy"])
@pytest.mark.parametrize("posing", list(POSINGS))
def test_a_budgeted_job_posed_in_a_labs_units_succeeds_and_serves_the_reference_fit(posing, noise):
    """A budgeted ask/tell-style job as a lab poses it: Q as recorded operating points in physical
    units (``samples``), labels 1e3 + 50 f(x) from the instrument (noisy or not). It succeeds (no
    LinAlgError after the budget is paid: inputs offset by 1e6 with spreads of 1e-3 failed so
    before), its served GP is the job's model fitted to its training set (``train``, the job's
    seed: the same numbers), and that GP's held-out Err is within 20% of scikit-learn's
    standardised GP on the same points or below it."""
    from lwl import run_job
    from lwl.models import model_document, train
    from lwl.oracles import Oracle
    from lwl.spec import parse_job_spec

    offset, scale = POSINGS[posing]
    rng = np.random.default_rng(5)

    class Instrument(Oracle):
        name = "instrument"

        def __init__(self):
            super().__init__(D)

        def _label(self, x):
            u = (np.asarray(x, dtype=np.float64) - offset) / scale
            return 1e3 + 50 * (f(u) + noise * 0.6 * rng.standard_normal(len(u)))

    members = [rng.normal([0.3, 0.5, 0.5], 0.12, size=(300, D)), rng.normal([0.7, 0.4, 0.6], 0.1, size=(300, D))]
    spec = {"oracle": {"name": "external"}, "budget": 300, "seed": 0, "device": "cpu",
            "test_distributions": {"members": [{"samples": (offset + scale * m).tolist()} for m in members],
                                   "validation_per_member": 60},
            "model": {"name": "gp", "restarts": 1}, "algorithm": {"name": "bilevel"}}
    res = run_job(spec, oracle=Instrument(), evaluate=False)
    assert res["model"] is not None and res.get("model_fallback") is None
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    served = from_spec(json.loads(json.dumps(model_document(res))))
    reference = train(parse_job_spec(res["spec"]).model, X, y, ridge=1e-3, seed=0)
    T = np.concatenate([rng.normal([0.3, 0.5, 0.5], 0.12, size=(300, D)), rng.normal([0.7, 0.4, 0.6], 0.1, size=(300, D))])
    Tp, truth = offset + scale * T, f(T)
    np.testing.assert_allclose(served.predict(Tp), reference.predict(Tp), rtol=1e-9)
    ours = _err((served.predict(Tp) - 1e3) / 50, truth)
    theirs = _sklearn_err(X, (y - 1e3) / 50, Tp, truth)
    assert ours <= 1.2 * theirs, (ours, theirs)
    diag = res["model_diagnosis"]["outputs"][0]
    assert 0 <= diag["loo_coverage_1sd"] <= diag["loo_coverage_2sd"] <= 1


def test_the_matern_kernel_in_place_is_the_same_in_any_blocks_of_rows(monkeypatch):
    """Bounded memory: the in-place Matern kernel (conditioning, prediction) is formed by blocks of
    rows, its temporaries a block each; elementwise, so any block size gives the same numbers."""
    import lwl.models.gp.kernel as gp_module

    x, y = torch.rand(300, 4, dtype=torch.float64), torch.rand(200, 4, dtype=torch.float64)
    ell = torch.tensor([0.3, 0.5, 0.7, 1.1], dtype=torch.float64)
    whole = gp_module._ard_kernel_in_place("matern52", x, y, ell)
    monkeypatch.setattr(gp_module, "KERNEL_BLOCK_ELEMENTS", 7 * 200)
    assert torch.equal(gp_module._ard_kernel_in_place("matern52", x, y, ell), whole)
    np.testing.assert_allclose(whole, gp_module.ard_kernel("matern52", x, y, ell.requires_grad_()).detach(), rtol=1e-12)
