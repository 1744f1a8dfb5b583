import pytest
import numpy as np

from lwl.evaluation.metrics import krr_error, relative_ood_error
from lwl.evaluation.heldout import verdict


def test_err_equals_its_definition_computed_directly():
    """Err = sqrt(sum_k w_k mean_i |G*(v_ki) - G(v_ki)|^2 / sum_k w_k mean_i |G*(v_ki)|^2)."""
    rng = np.random.default_rng(0)
    sizes, w = [7, 3, 12], np.array([0.2, 0.5, 0.3])
    truth = [rng.standard_normal(m) * (k + 1) for k, m in enumerate(sizes)]
    pred = [t + 0.3 * rng.standard_normal(len(t)) for t in truth]
    num = sum(wk * np.mean((t - p) ** 2) for wk, t, p in zip(w, truth, pred))
    den = sum(wk * np.mean(t**2) for wk, t in zip(w, truth))
    a = np.concatenate([np.full(m, wk / m) for m, wk in zip(sizes, w)])
    assert np.isclose(relative_ood_error(np.concatenate(pred), np.concatenate(truth), a), np.sqrt(num / den),
                      rtol=1e-13)

    # labels as a column (how the oracles return them) against flat predictions: the same Err,
    # row by row (it once broadcast to an n x n difference: a wrong number and n^2 memory)
    column = np.concatenate(truth)[:, None]
    assert relative_ood_error(np.concatenate(pred), column, a) == relative_ood_error(np.concatenate(pred),
                                                                                     np.concatenate(truth), a)
    with pytest.raises(ValueError, match="pred"):
        relative_ood_error(np.concatenate(pred)[:-1], column, a)


def test_krr_error_equals_a_dense_numpy_kernel_ridge_regression():
    rng = np.random.default_rng(1)
    X, Xt = rng.standard_normal((40, 3)), rng.standard_normal((25, 3))
    f = lambda x: np.sin(x).sum(1)  # noqa: E731
    ell, ridge = 1.7, 1e-2
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / ell**2)
    Kt = np.exp(-((Xt[:, None] - X[None]) ** 2).sum(-1) / ell**2)
    pred = Kt @ np.linalg.solve(K + ridge * np.eye(40), f(X))  # N sigma^2 = ridge
    a = np.full(25, 1 / 25)
    direct = np.sqrt(np.mean((f(Xt) - pred) ** 2) / np.mean(f(Xt) ** 2))
    got = krr_error(X, f(X), Xt, f(Xt), a, kernel="squared_exponential", lengthscale=ell, ridge=ridge)
    assert np.isclose(got, direct, rtol=1e-9)


def test_verdict_names_the_best_baseline_and_warns_when_the_start_was_better():
    v = verdict({"err": {"optimized": 0.2, "normal": 0.5, "barycenter": 0.3, "mixture": 0.25}})
    assert v["best_baseline"] == "mixture" and np.isclose(v["ratio"], 0.8)
    assert v["beats_best_baseline"] and v["beats_initial"] and v["warnings"] == []
    v = verdict({"err": {"optimized": 0.6, "normal": 0.5, "mixture": 0.25}}, ["earlier"])
    assert not v["beats_best_baseline"] and not v["beats_initial"]
    assert v["warnings"][0] == "earlier" and "worse than the initial distribution" in v["warnings"][1]
    assert v["outcome"] == "worse" and v["initial_outcome"] == "worse"


def test_rank_deficient_q_member_still_gets_its_baselines():
    """Identical rows make a member's covariance singular. A job spec refuses such a member
    (tests/lwl/test_spec.py); should one reach the evaluation anyway (a dataset replaced under
    a stored job), the fitted Gaussians floor its spectrum instead of failing the evaluation."""
    from lwl.q_samples import MetaTestSamples
    from lwl.registry import BASELINES

    rng = np.random.default_rng(0)
    q = MetaTestSamples([np.tile([0.1, 0.2, 0.3, 0.4, 0.5], (150, 1)), rng.standard_normal((150, 5))],
                        np.array([0.5, 0.5]), 100)
    for name in ("barycenter", "mixture"):
        measure = BASELINES.get(name).resolve()(None, q)
        x = measure.sample(50, 1)
        assert np.all(np.isfinite(x)) and np.all(np.linalg.eigvalsh(measure.mean_and_cov()[1]) > 0)


def test_verdict_points_a_gaussian_design_that_loses_to_q_mixture_at_the_mixture_family():
    v = verdict({"err": {"optimized": 0.3, "normal": 0.5, "barycenter": 0.4, "mixture": 0.25}})
    assert not v["beats_best_baseline"] and v["beats_initial"]
    assert len(v["warnings"]) == 1 and "Q's own mixture (Err 0.25)" in v["warnings"][0]
    assert '{"name": "mixture"}' in v["warnings"][0]
    # not when the design wins, when another baseline is the best, or for a mixture family's design
    assert verdict({"err": {"optimized": 0.2, "normal": 0.5, "mixture": 0.25}})["warnings"] == []
    assert verdict({"err": {"optimized": 0.3, "normal": 0.5, "barycenter": 0.2, "mixture": 0.25}})["warnings"] == []
    assert not any("Q's own mixture" in w for w in
                   verdict({"err": {"optimized": 0.3, "initial": 0.5, "mixture": 0.25}})["warnings"])


def test_verdict_reports_a_failed_baseline():
    v = verdict({"err": {"optimized": 0.2, "normal": 0.5}, "failed": {"barycenter": "boom"}})
    assert v["best_baseline"] == "normal" and any("baseline barycenter (the W2 barycenter of Q's members) could not be evaluated: boom" in w
                                                   for w in v["warnings"])


def test_err_interval_covers_a_known_error_at_its_nominal_rate():
    """A fixed predictor p(x) = 0.8 a.x + 0.3 x_2 of G*(x) = a.x on Q = two Gaussians: with
    b = 0.2 a - 0.3 e_2, Err^2 = sum_k w_k b'(S_k + m_k m_k')b / sum_k w_k a'(S_k + m_k m_k')a exactly;
    400 independent held-out sets of 300 + 200 points."""
    from lwl.evaluation.metrics import relative_error_interval

    rng = np.random.default_rng(0)
    a = np.array([1.0, -2.0, 0.5])
    means, scales, w = [np.zeros(3), np.array([2.0, 0.0, 1.0])], [1.0, 0.5], [0.3, 0.7]
    b = 0.2 * a - np.array([0.0, 0.3, 0.0])
    moment = lambda v: sum(wk * (s**2 * v @ v + (v @ m) ** 2) for wk, m, s in zip(w, means, scales))  # noqa: E731
    err = np.sqrt(moment(b) / moment(a))
    hits, reps = 0, 400
    for _ in range(reps):
        x = np.concatenate([m + s * rng.standard_normal((n, 3)) for m, s, n in zip(means, scales, (300, 200))])
        y = x @ a
        lo, hi = relative_error_interval(0.8 * y + 0.3 * x[:, 1], y, [300, 200], w)
        assert lo < hi
        hits += lo <= err <= hi
    rate = hits / reps
    assert abs(rate - 0.95) < 3 * np.sqrt(0.95 * 0.05 / reps), rate
    # a wrong interval would fail: the point estimate alone covers nothing
    lo, hi = relative_error_interval(0.8 * y + 0.3 * x[:, 1], y, [300, 200], w, level=1e-9)
    assert hi - lo < 1e-9


def test_verdict_counts_a_baseline_at_its_own_lengthscale_when_that_is_better():
    ev = {"err": {"optimized": 0.2, "normal": 0.5, "barycenter": 0.3, "mixture": 0.25},
          "err_own_lengthscale": {"mixture": {"err": 0.18, "lengthscale": 2.0},
                                  "normal": {"err": 0.19, "lengthscale": 1.0},
                                  "barycenter": {"err": 0.4, "lengthscale": 8.0}}}
    v = verdict(ev)
    assert v["best_baseline"] == "mixture" and v["best_baseline_err"] == 0.18 and not v["beats_best_baseline"]
    # theta0 is judged at the design's lengthscale, and warned about at its own
    assert np.isclose(v["ratio"], 0.2 / 0.18) and v["initial_err"] == 0.5 and v["beats_initial"]
    assert any("initial distribution trained with the lengthscale that validates best for it (Err 0.19)" in w
               for w in v["warnings"])
    assert any("not mixture with the lengthscale selected for it" in w for w in v["warnings"])
    assert v["baselines"]["mixture"] == 0.25 and v["baselines_own_lengthscale"]["barycenter"] == 0.4


def _dense_krr(X, y, Xt, ell, ridge):
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / ell**2)
    Kt = np.exp(-((Xt[:, None] - X[None]) ** 2).sum(-1) / ell**2)
    return Kt @ np.linalg.solve(K + ridge * np.eye(len(X)), y)


def test_baselines_at_own_lengthscale_pick_the_lengthscale_that_validates_best(small_spec):
    from lwl.defaults import LENGTHSCALE_FACTORS, median_lengthscale
    from lwl.evaluation.heldout import baselines_at_own_lengthscale
    from lwl.q_samples import MetaTestSamples
    from lwl.spec import parse_job_spec

    spec = parse_job_spec(small_spec)
    rng = np.random.default_rng(3)
    f = lambda x: np.sin(2 * x[:, 0]) + x[:, 1] ** 2  # noqa: E731
    q = MetaTestSamples([rng.standard_normal((60, 5)), 2 + rng.standard_normal((60, 5))], np.array([0.3, 0.7]), 40)
    val = np.concatenate(q.validation)
    test = np.concatenate(q.heldout)
    a_val = q.point_weights(q.validation, q.weights)
    a_test = q.point_weights(q.heldout, q.weights)
    drawn = {name: [(x, f(x))] for name, x in (("optimized", rng.standard_normal((50, 5))),
                                              ("mixture", 0.5 + 1.5 * rng.standard_normal((50, 5))))}
    got = baselines_at_own_lengthscale(spec, q, drawn, f(val), test, f(test), a_test, {})
    assert set(got) == {"mixture"}  # the design is not a baseline

    def err(pred, truth, a):
        return np.sqrt(a @ (pred - truth) ** 2 / (a @ truth**2))

    x, y = drawn["mixture"][0]
    ridge = spec.evaluation.ridge
    grid = [c * median_lengthscale(q, spec.seed) for c in LENGTHSCALE_FACTORS]
    scores = [err(_dense_krr(x, y, val, ell, ridge), f(val), a_val) for ell in grid]
    best = grid[int(np.argmin(scores))]
    assert np.isclose(got["mixture"]["lengthscale"], best)
    assert np.isclose(got["mixture"]["err"], err(_dense_krr(x, y, test, best, ridge), f(test), a_test), rtol=1e-8)


def test_verdict_sentence_says_when_the_best_baseline_used_its_own_lengthscale():
    from lwl.evaluation.verdict_text import verdict_sentence

    plain = verdict({"err": {"optimized": 0.2, "normal": 0.5, "mixture": 0.25}})
    assert verdict_sentence(plain) == ("verdict: the design (Err 0.2000) is better than the best baseline, Q's own mixture "
                                       "(Err 0.2500; ratio 0.800)")
    own = verdict({"err": {"optimized": 0.2, "normal": 0.5, "mixture": 0.25},
                   "err_own_lengthscale": {"mixture": {"err": 0.1, "lengthscale": 1.0}}})
    assert "WORSE than the best baseline, Q's own mixture (Err 0.1000 at its own lengthscale; ratio 2.000)" in \
        verdict_sentence(own)
    assert verdict_sentence(verdict({"err": {"optimized": 0.2}})) is None


def test_select_widening_finds_an_interior_optimum_beyond_the_grid():
    from lwl.defaults import edge_note, select_widening

    grid = [4.0, 2.0, 1.0, 0.5, 0.25, 0.125]
    best, scores = select_widening(lambda ell: (np.log(ell) - np.log(20.0)) ** 2, grid, 1 / 128, 64.0)
    assert best == 16.0 and 32.0 in scores and 64.0 not in scores  # stopped once the error rose again
    assert edge_note(best, 1.0) is None
    # still falling at the limit: the limit is returned and named
    best, _ = select_widening(lambda ell: -ell, grid, 1 / 128, 64.0)
    assert best == 64.0 and "largest" in edge_note(best, 1.0)
    best, _ = select_widening(lambda ell: ell, grid, 1 / 128, 64.0)
    assert best == 1 / 128 and "smallest" in edge_note(best, 1.0)


def test_evaluate_design_over_draws_ties_a_distribution_with_itself(small_spec):
    """The design evaluated against the same distribution (common random numbers): a tie with an
    interval no wider than rounding; against a far worse one: better; Err is the mean over the draws."""
    from lwl.evaluation.heldout import evaluate_design
    from lwl.measures import Gaussian
    from lwl.q_samples import MetaTestSamples
    from lwl.registry import BASELINES
    from lwl.spec import parse_job_spec

    small_spec["evaluation"].update(draws=4, bound=False, baselines=["normal", "uniform"])
    spec = parse_job_spec(small_spec)
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed)
    oracle = spec.oracle.build()
    same = BASELINES.get("normal").resolve()(spec, q)
    ev = evaluate_design(spec, q, Gaussian(same.mean, cov=same.cov), oracle)
    assert ev["draws"] == 4 and len(ev["err_draws"]["optimized"]) == 4
    assert ev["comparisons"]["normal"]["outcome"] == "tie"
    lo, hi = ev["comparisons"]["normal"]["diff_sq_interval"]  # no width but the rounding floor
    assert lo == pytest.approx(-hi, rel=1e-6) and hi < 1e-8
    assert ev["comparisons"]["uniform"]["outcome"] == "better"
    lo, hi = ev["err_interval"]["optimized"]
    assert lo < ev["err"]["optimized"] < hi
    assert min(ev["err_draws"]["optimized"]) <= ev["err"]["optimized"] <= max(ev["err_draws"]["optimized"])
    v = verdict(ev)
    assert v["outcome"] == "tie" and not v["beats_best_baseline"] and v["best_baseline"] == "normal"


def test_verdict_sentence_of_a_budgeted_job_speaks_of_equal_labels():
    """The client prints verdict_text.verdict_sentence for every job: a budgeted verdict must not
    read as a design against baselines trained on 1,024 free samples."""
    from lwl.evaluation.equal_labels import verdict as at_equal_labels
    from lwl.evaluation.verdict_text import verdict_sentence

    comp = {"outcome": "better", "err": 0.1, "other_err": 0.2}
    ev = {"err": {"optimized": 0.1, "mixture": 0.2}, "comparisons": {"mixture": comp}, "labels": 2000,
          "err_interval": {"optimized": [0.09, 0.11]}, "audit_labels": 5000}
    line = verdict_sentence(at_equal_labels(ev))
    assert line.startswith("verdict at equal labels (2000)") and "mixture 0.2000 (better)" in line
