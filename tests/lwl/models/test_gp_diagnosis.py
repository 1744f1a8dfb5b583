"""What a fitted GP's noise says about the problem (lwl.models.gp_diagnosis)."""

import numpy as np
import pytest

from lwl.models.gp import GaussianProcess
from lwl.models.gp_diagnosis import NOISE_FLOOR_WARNING, POOR_FIT_WARNING, diagnose, diagnose_document, to_json, warnings
from lwl.oracles import make_oracle


def friedman1(x: np.ndarray) -> np.ndarray:
    """lwl's friedman1 oracle (x_6 unused)."""
    return np.asarray(make_oracle({"name": "friedman1"}).label(x))


def fitted(width: float, n: int = 400, seed: int = 0):
    """A GP fitted to n noise-free Friedman-1 labels at x ~ N(0.5, width^2 I_6), and the held-out Err
    of its mean on 2,000 fresh points of the same law."""
    rng = np.random.default_rng(seed)
    X, Xt = rng.normal(0.5, width, (n, 6)), rng.normal(0.5, width, (2000, 6))
    gp = GaussianProcess(restarts=1, random_state=seed).fit(X, friedman1(X))
    yt = friedman1(Xt)
    return gp, float(np.sqrt(np.mean((gp.predict(Xt) - yt) ** 2) / np.mean(yt ** 2)))


def test_the_floor_is_the_noise_share_of_q_s_mean_square_label():
    y = np.array([[1.0, 10.0], [3.0, -10.0]])  # mean squares 5 and 100
    d = diagnose([0.05, 4.0], y)
    assert [o.noise_share for o in d] == pytest.approx([0.01, 0.04])
    assert [o.err_floor for o in d] == pytest.approx([0.1, 0.2])
    with pytest.raises(ValueError, match="labels"):
        diagnose([0.1], y)  # one noise per output
    # E_Q y^2 with Q's weights: 0.9 * 1 + 0.1 * 9 = 1.8
    assert diagnose([0.018], y[:, 0], weights=[0.9, 0.1])[0].noise_share == pytest.approx(0.01)
    with pytest.raises(ValueError, match="weights"):
        diagnose([0.018], y[:, 0], weights=[1.0])


@pytest.mark.slow
def test_an_unresolved_oscillation_shows_as_a_floor_that_the_held_out_error_sits_on():
    """Friedman 1 with a wide Q: sin(pi x1 x2) oscillates faster than 400 points resolve, the GP
    calls it noise, and the held-out Err is that noise's share of the labels (within 20%); on a
    narrow Q the same function is resolved and no warning is given."""
    gp, err = fitted(width=2.0)
    (d,) = diagnose(gp.noise_, gp.Y_)
    assert d.err_floor > NOISE_FLOOR_WARNING
    assert 0.8 < err / d.err_floor < 1.25
    (w,) = warnings([d])
    assert f"{d.err_floor:.3g}" in w and "unresolved" in w
    gp, err = fitted(width=0.3)
    (d,) = diagnose(gp.noise_, gp.Y_)
    assert d.err_floor < NOISE_FLOOR_WARNING and warnings([d]) == []
    assert err > d.err_floor  # there the floor is below the error: the function is resolved, not noise


def test_a_model_document_is_read_without_refitting():
    gp = GaussianProcess(kernel="squared_exponential", lengthscale=[1.0], output_scale=2.0, noise=0.09,
                         optimize=False).fit(np.linspace(0, 1, 5)[:, None], np.full(5, 3.0))
    doc = gp.to_spec(training_set=False)
    (d,) = diagnose_document(doc, np.full(5, 3.0))
    assert d.err_floor == pytest.approx(0.1)  # sqrt(0.09 / 9)
    assert to_json([d])["outputs"] == [{"noise_share": pytest.approx(0.01), "err_floor": pytest.approx(0.1),
                                        "loo_err": None, "loo_coverage_1sd": None, "loo_coverage_2sd": None}]
    assert diagnose_document({"model": "krr"}, np.ones(3)) is None and diagnose_document(None, np.ones(3)) is None


def test_the_estimated_err_is_q_s_weighted_leave_one_out_error_and_warns_when_the_model_explains_little():
    y = np.array([1.0, 3.0])  # E_Q y^2 with weights 0.9, 0.1: 0.9 + 0.9 = 1.8
    (d,) = diagnose([1e-6], y, weights=[0.9, 0.1], loo_residuals=[0.3, 0.0])
    assert d.loo_err == pytest.approx(np.sqrt(0.9 * 0.09 / 1.8))  # 0.212: below the warning
    assert d.loo_err < POOR_FIT_WARNING and warnings([d]) == []
    (d,) = diagnose([1e-6], y, weights=[0.9, 0.1], loo_residuals=[0.3, 1.5])
    assert d.loo_err == pytest.approx(np.sqrt((0.9 * 0.09 + 0.1 * 2.25) / 1.8))
    (w,) = warnings([d])
    assert f"{d.loo_err:.3g}" in w and "explains little" in w
    with pytest.raises(ValueError, match="loo_residuals"):
        diagnose([1e-6], y, loo_residuals=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="loo_residuals"):  # (p, n), transposed: refused, not reshaped
        diagnose([1e-6] * 3, np.ones((2, 3)), loo_residuals=np.ones((3, 2)))
    two = diagnose([1e-6, 1e-6], np.ones((2, 2)), loo_residuals=np.array([[0.0, 1.0], [0.0, 1.0]]))
    assert [o.loo_err for o in two] == pytest.approx([0.0, 1.0])
    assert len(warnings(two)) == 1 and "(output 1)" in warnings(two)[0]


def test_the_estimate_reads_a_failed_fit_that_the_noise_floor_misses():
    """lwl's Sobol G in d = 4 from 400 points of N(0.5, 0.25 I): heavy-tailed labels the GP does not
    predict (held-out Err 0.56 when this was written) interpolated with a small fitted noise, so the
    floor reads no problem (0.0009); the leave-one-out estimate reads the held-out Err's size, and
    warns."""
    rng = np.random.default_rng(0)
    oracle = make_oracle({"name": "sobol_g"})
    X, Xt = rng.normal(0.5, 0.5, (400, 4)), rng.normal(0.5, 0.5, (3000, 4))
    y, yt = (np.asarray(oracle.label(x), dtype=np.float64).reshape(-1) for x in (X, Xt))
    gp = GaussianProcess(restarts=1, random_state=0).fit(X, y)
    held = float(np.sqrt(np.mean((gp.predict(Xt) - yt) ** 2) / np.mean(yt ** 2)))
    (d,) = diagnose(gp.noise_, y, loo_residuals=gp.loo_residuals())
    assert held > POOR_FIT_WARNING and d.err_floor < NOISE_FLOOR_WARNING
    assert 0.5 < d.loo_err / held < 2.0
    (w,) = warnings([d])
    assert "explains little" in w


def test_the_block_carries_each_label_s_leave_one_out_residual_and_sd():
    """model_diagnosis.outputs[].loo_residuals / loo_sd: what the dashboard's LOO chart draws (#85)."""
    y = np.array([[1.0, 10.0], [3.0, -10.0], [2.0, 5.0]])
    r, sd = np.array([[0.1, -1.0], [0.2, 2.0], [-0.3, 0.5]]), np.array([[0.5, 1.0], [0.5, 1.0], [0.1, 1.0]])
    block = to_json(diagnose([1e-6, 1e-6], y, loo_residuals=r, loo_std=sd), r, sd)
    assert [o["loo_residuals"] for o in block["outputs"]] == [r[:, 0].tolist(), r[:, 1].tolist()]
    assert [o["loo_sd"] for o in block["outputs"]] == [sd[:, 0].tolist(), sd[:, 1].tolist()]
    assert block["outputs"][0]["loo_coverage_2sd"] == pytest.approx(2 / 3)  # -0.3 is 3 sd out
    assert "loo_residuals" not in to_json(diagnose([1e-6], y[:, 0]))["outputs"][0]  # none given: none written


def test_the_warnings_say_the_number_what_it_means_and_what_to_do():
    """In plain words (#85): each starts with what the model does, says its number, and what to do."""
    from lwl.models.gp_diagnosis import OutputDiagnosis

    d = OutputDiagnosis(noise_share=0.0081, err_floor=0.09, loo_err=0.3, loo_coverage_1sd=0.5, loo_coverage_2sd=0.8)
    poor, narrow, noise = warnings([d])
    assert poor.startswith("The model explains little") and "0.3" in poor and "more labels" in poor
    assert narrow.startswith("The model's error bar is too narrow") and "80%" in narrow and "Widen" in narrow
    assert noise.startswith("The model reads 0.81% of the labels' mean square on Q as measurement noise")
    assert "0.09" in noise and "unresolved" in noise and "nothing needs doing" in noise
    assert "served GP takes" not in " ".join([poor, narrow, noise])  # the old jargon


def test_the_served_gp_reads_itself_through_its_own_hook_and_a_reading_that_fails_is_a_warning():
    """lwl.models.diagnosis.Diagnosable: the GP's hook gives the block diagnose_document and to_json
    give (with its leave-one-out at the rows asked for), KRR has no hook, and a reading that raises
    a fit error leaves the block null and says why."""
    from lwl.models import KernelRidge
    from lwl.models.diagnosis import Diagnosable, ModelDiagnosis

    rng = np.random.default_rng(0)
    X = rng.normal(0.5, 0.3, (60, 6))
    y = friedman1(X)
    gp = GaussianProcess(restarts=0, random_state=0).fit(X, y)
    assert isinstance(gp, Diagnosable)
    assert not isinstance(KernelRidge("squared_exponential", 1.0, 1e-3, device="cpu").fit(X, y), Diagnosable)
    doc, head, weights = gp.to_spec(training_set=False), np.arange(20), np.full(20, 1 / 20)
    got = gp.diagnosis(doc, y[:20], weights, head)
    loo, loo_sd = gp.loo(head)
    want = diagnose_document(doc, y[:20], weights, loo, loo_sd)
    assert got == ModelDiagnosis(to_json(want, loo, loo_sd), warnings(want))
    assert gp.diagnosis(doc, y[:20], weights, None).document == to_json(diagnose_document(doc, y[:20], weights))

    class Failing(GaussianProcess):
        def loo(self, rows=None):
            raise np.linalg.LinAlgError("K_y is not positive definite")

    failing = Failing.__new__(Failing)
    failing.__dict__.update(gp.__dict__)
    out = failing.diagnosis(doc, y[:20], weights, head)
    assert out.document is None and len(out.warnings) == 1
    assert "diagnosis (model_diagnosis) could not be computed (LinAlgError: K_y is not positive" in out.warnings[0]


def test_a_search_that_never_left_its_start_is_said_to_be_unfitted(monkeypatch):
    """GaussianProcess.search_stalled and its warning: where every step of the likelihood search meets
    K_y's not-positive-definite wall (a wall everywhere but the data-scaled start, as p04's 2,000 points
    of the gp budget study met it at the box's corner), the served hyperparameters are that start, and
    the diagnosis says they are not a fit; the same points fitted without the wall are not flagged."""
    import torch

    import lwl.models.gp.search as search

    rng = np.random.default_rng(1)
    X = rng.normal(0.5, 0.3, (60, 6))
    y = friedman1(X)
    fitted_gp = GaussianProcess(restarts=2, random_state=0).fit(X, y)
    assert not fitted_gp.search_stalled().any()
    real, seen = search._lml_and_gradient, []

    def walled(kind, Xf, yf, theta):
        if not seen:
            seen.append(theta.detach().clone())
        if not torch.allclose(theta, seen[0], rtol=0.0, atol=1e-12):
            raise torch.linalg.LinAlgError("K_y is not positive definite")
        return real(kind, Xf, yf, theta)

    monkeypatch.setattr(search, "_lml_and_gradient", walled)
    gp = GaussianProcess(kernel="squared_exponential", restarts=2, random_state=0).fit(X, y)
    assert gp.search_stalled().tolist() == [True]
    np.testing.assert_allclose(gp.lengthscale_[0], X.std(0), rtol=1e-9)  # each input's spread
    np.testing.assert_allclose([gp.output_scale_[0], gp.noise_[0]], [y.var(), y.var() / 100], rtol=1e-9)
    doc, head, weights = gp.to_spec(training_set=False), np.arange(20), np.full(20, 1 / 20)
    said = gp.diagnosis(doc, y[:20], weights, head).warnings
    assert said[0].startswith("The served GP's hyperparameters (squared_exponential) are the likelihood search's "
                              "start, not a fit to the labels")
    assert not any("search's start" in w for w in fitted_gp.diagnosis(doc, y[:20], weights, head).warnings)
    assert not GaussianProcess(optimize=False).fit(X, y).search_stalled().any()  # nothing searched
