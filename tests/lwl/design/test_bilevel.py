import copy
import json

import numpy as np
import pytest
import torch

from lwl.design import BilevelDesign, pack, unpack
from lwl.design.bilevel import LENGTHSCALE_FACTORS, BilevelState, Phase
from lwl.design.state import Kept
from lwl.design.schedules import cosine
from lwl.oracles import make_oracle
from lwl.spec import parse_job_spec
from tests.conftest import ROOT, devices


def _design(small_spec, **algo):
    s = copy.deepcopy(small_spec)
    s["algorithm"].update({"optimizer": "paper", **algo})
    spec = parse_job_spec(s)
    design = BilevelDesign.from_spec(spec)
    oracle = make_oracle(spec.oracle)
    state = design.init()
    state = design.step(state, oracle.label(design.queries(state)))  # label Q's validation points
    return design, oracle, state


def _weighted_objective(design, state, U, y, sigma2, mean, chol):
    """1/2 E_Q|G_hat - G*|^2 for KRR trained on the importance-reweighted empirical measure
    sum_i p_theta(u_i) / (N p_theta0(u_i)) delta_{u_i}, written with dense numpy solves."""
    from lwl.measures import Gaussian

    n = len(U)
    w = np.exp(Gaussian(mean, chol).log_prob(U) - design.distribution(state).log_prob(U)) / n
    k = design.spec.model
    from lwl.models import KernelRidge

    km = KernelRidge(k.kernel, k.lengthscale).fit(U[:2], y[:2])
    K = km.kernel_matrix(U, U).numpy()
    V = np.concatenate(design.q.validation)
    Kvu = km.kernel_matrix(V, U).numpy()
    beta = np.linalg.solve(K + sigma2 * np.diag(1.0 / w), y)
    a = design.q.point_weights(design.q.validation, design.q.weights)
    r = state.validation_labels - Kvu @ beta
    return 0.5 * a @ r**2


@pytest.mark.parametrize("kernel", ["squared_exponential", "laplace"])
def test_bilevel_gradient_matches_finite_differences(small_spec, kernel):
    small_spec["model"]["kernel"] = kernel
    design, oracle, state = _design(small_spec)
    U = design.queries(state)
    y = oracle.label(U)
    sigma2 = 1e-3
    objective, err, g_mean, g_chol = design.gradient(state, U, y, sigma2)
    mean, chol = state.params["mean"], state.params["chol"]
    assert np.isclose(0.5 * objective, _weighted_objective(design, state, U, y, sigma2, mean, chol))
    h = 1e-6
    for i in range(len(mean)):
        e = np.zeros_like(mean)
        e[i] = h
        fd = (_weighted_objective(design, state, U, y, sigma2, mean + e, chol)
              - _weighted_objective(design, state, U, y, sigma2, mean - e, chol)) / (2 * h)
        assert np.isclose(g_mean[i], fd, rtol=1e-5, atol=1e-9 * abs(objective)), (i, g_mean[i], fd)
    for i, j in [(0, 0), (2, 1), (4, 4), (3, 0)]:
        e = np.zeros_like(chol)
        e[i, j] = h
        fd = (_weighted_objective(design, state, U, y, sigma2, mean, chol + e)
              - _weighted_objective(design, state, U, y, sigma2, mean, chol - e)) / (2 * h)
        assert np.isclose(g_chol[i, j], fd, rtol=1e-5, atol=1e-9 * abs(objective)), ((i, j), g_chol[i, j], fd)
    assert np.all(np.triu(g_chol, 1) == 0)


def test_relative_scale_divides_by_mean_squared_label(small_spec):
    design, oracle, state = _design(small_spec)
    U = design.queries(state)
    y = oracle.label(U)
    _, _, g_abs, _ = design.gradient(state, U, y, 1e-3)
    design.algo.gradient_scale = "relative"
    a = design.q.point_weights(design.q.validation, design.q.weights)
    _, _, g_rel, _ = design.gradient(state, U, y, 1e-3)
    np.testing.assert_allclose(g_rel, g_abs / (a @ state.validation_labels ** 2), rtol=1e-12)


def test_cosine_schedule_endpoints():
    assert cosine(1e-2, 0.0, 0, 100) == 1e-2
    assert cosine(1e-3, 1e-7, 50, 100) == pytest.approx((1e-3 + 1e-7) / 2)
    assert cosine(1e-2, 0.0, 99, 100) < 1e-5


def test_steps_follow_the_schedules_and_fixed_parameters_stay(small_spec):
    small_spec["family"]["free"] = ["mean"]
    design, oracle, state = _design(small_spec, iterations=4)
    chol0 = state.params["chol"].copy()
    while not design.done(state):
        state = design.step(state, oracle.label(design.queries(state)))
    assert np.array_equal(state.params["chol"], chol0)
    hist = state.history
    assert [h["iteration"] for h in hist] == [0, 1, 2, 3]
    assert hist[0]["step_size"] == 1e-2 and hist[0]["nugget"] == 1e-3
    assert [c["iteration"] for c in state.checks] == [0, 4]  # theta^0 and the last iterate
    assert all(np.isfinite(h["objective"]) and 0 < h["validation_err"] for h in hist)


@pytest.mark.slow
@pytest.mark.parametrize("lengthscale", ["given", "selected"])
def test_checkpoint_resume_equals_uninterrupted_run(small_spec, lengthscale):
    if lengthscale == "selected":  # the lengthscale moves with the checks, and must resume too
        del small_spec["model"]
        design, oracle, state = _design(small_spec, iterations=6, optimizer="adaptive", check_every=2)
    else:
        design, oracle, state = _design(small_spec, iterations=6)
    full = state
    while not design.done(full):
        full = design.step(full, oracle.label(design.queries(full)))
    part = state
    for _ in range(3):
        part = design.step(part, oracle.label(design.queries(part)))
    blob = pack(part)
    again = BilevelDesign.from_spec(design.spec)  # a fresh process would rebuild the stepper
    resumed = again.restore(unpack(blob))  # no pickle involved
    while not again.done(resumed):
        resumed = again.step(resumed, oracle.label(again.queries(resumed)))
    assert np.array_equal(resumed.params["mean"], full.params["mean"])
    assert np.array_equal(resumed.params["chol"], full.params["chol"])
    assert [h["objective"] for h in resumed.history] == [h["objective"] for h in full.history]
    assert again.result(resumed)["selected"] == design.result(full)["selected"]
    assert again.resolved_spec(resumed) == design.resolved_spec(full)


def test_bad_labels_are_refused(small_spec):
    design, oracle, state = _design(small_spec)
    U = design.queries(state)
    with pytest.raises(ValueError, match="labels"):
        design.step(state, oracle.label(U)[:-1])
    # rows of two values per input (an oracle with two outputs) are refused as such, not read as 2n labels
    two = np.stack([oracle.label(U), oracle.label(U)], 1)
    with pytest.raises(ValueError, match="one number per input.*rows of 2 values"):
        design.step(state, two)
    assert design.step(state, two[:, :1]).phase == design.step(state, two[:, 0]).phase  # (n, 1) is (n,)
    # a NaN label is a failed point (lwl.outcomes): counted, left out, not an error here;
    # the runner refuses it from an oracle that does not report failures (tests/lwl/test_outcomes.py)
    bad = oracle.label(U)
    bad[0] = np.nan
    assert design.step(state, bad).labels_failed == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gradient_matches_cpu(small_spec):
    grads = []
    for device in devices():
        small_spec["device"] = device
        design, oracle, state = _design(small_spec)
        U = design.queries(state)
        grads.append(design.gradient(state, U, oracle.label(U), 1e-3)[2])
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-8)


def _adaptive(small_spec, **algo):
    s = copy.deepcopy(small_spec)
    s["algorithm"].update({"optimizer": "adaptive", **algo})
    spec = parse_job_spec(s)
    return BilevelDesign.from_spec(spec), make_oracle(spec.oracle)


def test_kept_iterate_is_the_best_check(small_spec):
    design, oracle = _adaptive(small_spec, iterations=12, check_every=3, patience=1, significance=0)
    state = design.init()
    checked = []  # theta at every check, in order
    while not design.done(state):
        if state.phase == "check":
            checked.append((state.params["mean"].copy(), state.params["chol"].copy()))
        state = design.step(state, oracle.label(design.queries(state)))
    res = design.result(state)
    errs = [c["err"] for c in res["checks"]]
    assert len(errs) == len(checked) >= 5
    best = int(np.argmin(errs))
    np.testing.assert_array_equal(res["distribution"]["mean"], checked[best][0].tolist())
    assert res["selected"]["check_err"] == min(errs)
    assert res["selected"]["iteration"] == res["checks"][best]["iteration"]
    assert sum(h["selected"] for h in res["history"]) <= 1
    assert res["last_distribution"]["mean"] == state.params["mean"].tolist()
    # Q's validation points, every iteration's batch and every check batch were labelled
    n_labels = len(design.queries(design.init())) + 60 * len(res["history"]) + 80 * len(res["checks"])
    assert res["labels_used"] == n_labels
    # with patience 1 every check inside the run that is not a new best returns to the best
    # iterate and halves the step
    stalls = [c for c in res["checks"] if 0 < c["iteration"] < 12 and not c["best"]]
    assert all(c["action"] in ("reverted", "stopped") for c in stalls)
    assert state.step_scale == 0.5 ** sum(c["action"] == "reverted" for c in stalls)
    assert all(h["step_size"] <= 0.05 for h in res["history"])


def test_an_improvement_within_validation_noise_returns_the_initial_distribution(small_spec):
    from lwl import run_job

    small_spec["algorithm"].update(iterations=8, check_every=4)
    moved = run_job({**small_spec, "algorithm": {**small_spec["algorithm"], "significance": 0}})
    assert moved["selected"]["iteration"] > 0 and moved["distribution"] == moved["best_distribution"]
    z = moved["selected"]["improvement_z"]
    assert np.isfinite(z)
    # demand more standard errors than any check has (the spread bar off): the start nearest Q
    # of those that validate below theta0 comes back (Q's moment-matched Gaussian here) ...
    small_spec["algorithm"].update(significance=100.0, start_significance=100.0, spread_share=0.0)
    near = run_job(small_spec)
    assert near["selected"]["iteration"] == 0 and near["selected"]["start"] == "moment_matched"
    assert near["selected"]["rule"].startswith("start point nearest Q")
    starts = {c["start"]: c["err"] for c in near["checks"] if c["iteration"] == 0}
    assert starts["moment_matched"] < starts["given"] == near["selected"]["initial_check_err"]
    assert near["selected"]["check_err"] == starts["moment_matched"]
    assert any("within noise" in w and "moment_matched is nearest Q" in w for w in near["warnings"])
    # ... and with theta0 the only start point, theta0 itself
    kept = run_job({**small_spec, "algorithm": {**small_spec["algorithm"], "starts": "given"}})
    assert kept["distribution"]["mean"] == small_spec["family"]["mean"]
    assert kept["selected"]["iteration"] == 0 and kept["selected"]["rule"].startswith("initial distribution")
    assert any("within noise" in w for w in kept["warnings"])
    assert near["best_distribution"] == moved["best_distribution"]
    # more than the best check has: the best of the checks that have enough, else the initial one
    small_spec["algorithm"].update(significance=z + 1e-9, start_significance=z + 1e-9)
    fallback = run_job(small_spec)
    eligible = [c for c in fallback["checks"] if c.get("z") is not None and c["z"] >= z + 1e-9]
    if eligible:  # the surest of them (largest z), not the lowest Err
        surest = max(eligible, key=lambda c: c["z"])
        assert fallback["selected"]["check_err"] == surest["err"]
        assert fallback["selected"]["iteration"] == surest["iteration"]
        assert fallback["selected"]["rule"] == "surest check that beats the initial distribution beyond noise"
        if surest["iteration"] == 0:  # a start point: selected names it
            assert fallback["selected"]["start"] == surest["start"]
    else:
        assert fallback["distribution"]["mean"] == small_spec["family"]["mean"]
    # every check after theta0's carries its z; the best check's is the selection's improvement_z
    zs = {c["iteration"]: c["z"] for c in moved["checks"] if c.get("z") is not None}
    assert np.isclose(zs[moved["selected"]["iteration"]], z)


def test_nearest_start_is_the_one_with_the_smallest_transport_term(small_spec):
    from scipy.linalg import sqrtm

    design, _ = _adaptive(small_spec)
    starts = dict(design.start_points())
    assert {"given", "moment_matched", "broadened_2"} <= set(starts)

    def w2_sq(params):  # sum_k w_k W2^2 by the Bures formula, against each member's sample moments
        m, C = design.family.measure(params).mean_and_cov()
        total = 0.0
        for w, x in zip(design.q.weights, design.q.validation):
            mk, Ck = x.mean(0), np.cov(x.T, bias=True)
            r = sqrtm(Ck)
            total += w * (np.sum((m - mk) ** 2) + np.trace(C + Ck - 2 * np.real(sqrtm(r @ C @ r))))
        return total

    far = {n: design.transport_to_q(p) for n, p in starts.items()}
    for name in ("given", "moment_matched", "broadened_1.5", "broadened_2"):
        assert np.isclose(far[name], w2_sq(starts[name]), rtol=1e-6)
    # Q's moment-matched Gaussian is nearer Q than N(1/2, I) here; a broad one is not
    assert far["moment_matched"] < far["broadened_1.5"] < far["given"] < far["broadened_2"]

    def checks(errs):
        return [{"iteration": 0, "start": n, "err": e} for n, e in errs.items()] + [{"iteration": 5, "err": 0.1}]

    # the nearest of those that validate below theta0, whatever their Err
    assert design.nearest_start(checks({"given": 0.5, "moment_matched": 0.49, "broadened_1.5": 0.3})) == "moment_matched"
    assert design.nearest_start(checks({"given": 0.5, "moment_matched": 0.51, "broadened_1.5": 0.49,
                                        "broadened_2": 0.2})) == "broadened_1.5"
    # none below theta0 that is nearer Q than it: theta0 stays
    assert design.nearest_start(checks({"given": 0.5, "moment_matched": 0.5, "broadened_2": 0.3})) is None
    assert design.nearest_start(checks({"given": 0.5})) is None


def test_improvement_z_is_the_paired_difference_over_its_standard_error(small_spec):
    design, _ = _adaptive(small_spec)
    rng = np.random.default_rng(3)
    n = [len(x) for x in design.q.validation]
    y = rng.standard_normal(sum(n)) * 3
    old, new = rng.random(sum(n)), rng.random(sum(n)) * 0.8
    a = design.q.point_weights(design.q.validation, design.q.weights)
    den = a @ y**2
    d = new - old
    parts = np.split(d, np.cumsum(n)[:-1])
    se = np.sqrt(sum((w / den) ** 2 * p.var(ddof=1) / len(p) for p, w in zip(parts, design.q.weights)))
    assert np.isclose(design.improvement_z(new, old, y), -(a @ d / den) / se, rtol=1e-12)


def test_top_share_is_what_the_largest_few_paired_differences_carry(small_spec):
    from lwl.design.bilevel import TOP_POINTS

    design, _ = _adaptive(small_spec)
    rng = np.random.default_rng(4)
    M = sum(len(x) for x in design.q.validation)
    y = rng.standard_normal(M)
    a = design.q.point_weights(design.q.validation, design.q.weights)
    old = rng.random(M)
    spread = design.improvement(old * 0.9, old, y)  # every point a little better
    c = np.sort(np.abs(a * (old * 0.9 - old)))
    assert np.isclose(spread.top_share, c[-TOP_POINTS:].sum() / c.sum(), rtol=1e-12)
    assert spread.top_share < 4 * TOP_POINTS / M and spread.z > 0
    few = old.copy()
    few[rng.choice(M, 3, replace=False)] -= 1e4  # three huge validation points carry the difference
    carried = design.improvement(few, old, y)
    assert carried.top_share > 0.99 and carried.z > 0
    assert design.improvement_z(few, old, y) == carried.z
    assert design.improvement(old, old, y).top_share == 1.0  # no difference: nothing spread


def test_a_spread_improvement_meets_the_lower_bar_and_a_carried_one_does_not(small_spec):
    design, _ = _adaptive(small_spec, significance=2.0, start_significance=1.645, spread_significance=1.0,
                          spread_share=0.1)
    assert design.threshold(7) == 2.0 and design.threshold(0) == 1.645  # no share measured: the usual bars
    assert design.threshold(7, 0.05) == 1.0 and design.threshold(0, 0.05) == 1.0
    assert design.threshold(7, 0.5) == 2.0 and design.threshold(0, 0.5) == 1.645
    # the spread bar only ever lowers a bar
    low, _ = _adaptive(small_spec, significance=0.5, spread_significance=1.0, spread_share=0.1)
    assert low.threshold(7, 0.05) == 0.5
    off, _ = _adaptive(small_spec, significance=2.0, spread_significance=1.0, spread_share=0.0)
    assert off.threshold(7, 0.0) == 2.0


def test_the_spread_bar_returns_the_best_check_the_high_bar_holds_back(small_spec):
    """One run, two bars: with the improvement within the high bar, theta0 is returned; with the
    spread bar at 0 for every share, the best check is, and the result records its share."""
    from lwl import run_job

    spec = copy.deepcopy(small_spec)
    spec["algorithm"].update(optimizer="adaptive", iterations=12, check_every=3, significance=100.0,
                             start_significance=100.0, spread_share=0.0)
    held = run_job(copy.deepcopy(spec))
    assert held["selected"]["iteration"] == 0 and held["distribution"] != held["best_distribution"]
    assert any("within noise" in w for w in held["warnings"])
    spec["algorithm"].update(spread_significance=0.0, spread_share=1.0)
    free = run_job(spec)
    assert free["distribution"] == free["best_distribution"] == held["best_distribution"]
    share = free["selected"]["improvement_top_share"]
    assert 0 < share <= 1 and free["selected"]["improvement_z"] > 0
    assert "lower bar for spread improvements" in free["selected"]["rule"]
    assert not any("within noise" in w for w in free["warnings"])


def test_the_fallback_to_the_surest_check_keeps_the_full_bar(small_spec):
    """The spread bar is for the best check only: with every share counted as spread and the
    spread bar at 0, no check becomes the significant fallback unless it clears ``significance``."""
    design, oracle = _adaptive(small_spec, iterations=12, check_every=3, significance=100.0, start_significance=100.0,
                               spread_significance=0.0, spread_share=1.0)
    state = design.init()
    while not design.done(state):
        state = design.step(state, oracle.label(design.queries(state)))
    scored = [c for c in state.checks if c.get("z") is not None]
    assert scored and all(0 <= c["top_share"] <= 1 for c in scored)
    assert any(c["z"] > 0 for c in scored)  # under the spread bar these would have qualified
    assert state.significant is None
    res = design.result(state)
    assert res["distribution"] == res["best_distribution"]  # the best check itself clears the spread bar


def test_forced_runaway_steps_are_refused_and_the_job_still_ends_well(small_spec, monkeypatch):
    design, oracle = _adaptive(small_spec, iterations=16, check_every=4, significance=0)
    real = design.gradient

    def sabotaged(state, U, y, sigma2):
        obj, err, g_mean, g_chol = real(state, U, y, sigma2)
        if state.iteration == 8:
            return obj, err, g_mean * 1e12, g_chol * 1e12  # a runaway gradient
        if state.iteration == 10:
            return obj, err, g_mean * np.nan, g_chol  # a non-finite one
        return obj, err, g_mean, g_chol

    monkeypatch.setattr(design, "gradient", sabotaged)
    state = design.init()
    means = {}
    while not design.done(state):
        state = design.step(state, oracle.label(design.queries(state)))
        means[state.iteration] = state.params["mean"].copy()
    res = design.result(state)
    events = {h["iteration"]: h["event"] for h in res["history"]}
    assert events[8] == "clipped" and events[10] == "rejected"
    np.testing.assert_array_equal(means[11], means[10])  # the rejected step did not move theta
    assert np.abs(means[9] - means[8]).max() < 1.0  # the clipped one moved it by an ordinary step
    assert res["events"]["clipped"] == 1 and res["events"]["rejected"] == 1
    mean, cov = np.array(res["distribution"]["mean"]), np.array(res["distribution"]["cov"])
    assert np.all(np.isfinite(mean)) and np.all(np.linalg.eigvalsh(cov) > 0)
    assert res["selected"]["check_err"] <= res["selected"]["initial_check_err"]


def test_paper_optimizer_with_a_runaway_step_size_returns_the_best_check(small_spec):
    from lwl import run_job

    small_spec["algorithm"].update(optimizer="paper", learning_rate=1e6, iterations=6, check_every=2)
    res = run_job(small_spec)
    last = np.array(res["last_distribution"]["cov"])
    assert np.abs(last).max() > 1e3  # the plain schedule ran away ...
    kept = res["selected"]
    assert kept["check_err"] <= kept["initial_check_err"]  # ... and the kept iterate did not
    assert np.abs(np.array(res["distribution"]["cov"])).max() < 1e3


def test_paper_optimizer_keep_last_warns_when_worse_than_the_start(small_spec):
    from lwl import run_job

    small_spec["algorithm"].update(optimizer="paper", learning_rate=1e6, iterations=4, check_every=2, keep="last")
    res = run_job(small_spec)
    assert res["distribution"] == res["last_distribution"]
    assert any("worse on the validation data" in w for w in res["warnings"])
    assert res["verdict"]["warnings"] == res["warnings"]


@pytest.mark.slow
def test_spec_without_mean_cov_or_lengthscale_gets_data_derived_values(small_spec):
    from lwl import run_job
    from lwl.defaults import median_distance
    from lwl.measures.gaussian import moment_matched
    from lwl.q_samples import MetaTestSamples

    small_spec["family"] = {"name": "gaussian"}  # no parameters (no family at all is auto: test_auto.py)
    del small_spec["model"]
    del small_spec["evaluation"]["baselines"]
    res = run_job(small_spec)
    spec = res["spec"]
    assert set(spec["derived"]) == {"family.mean", "family.cov", "model.lengthscale"}
    q = MetaTestSamples.from_spec(parse_job_spec(small_spec).test_distributions, small_spec["seed"])
    pts = np.concatenate(q.validation)
    mean, cov = moment_matched(pts, q.point_weights(q.validation, q.weights))
    np.testing.assert_allclose(spec["family"]["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(spec["family"]["cov"], cov, rtol=1e-6, atol=1e-9)
    # every check tries the median distance times factors of the grid (a start point all of
    # them, an iterate its current lengthscale and the two neighbours) and keeps the best pair
    med = median_distance(pts, [small_spec["seed"], 5])
    grid = [f * med for f in LENGTHSCALE_FACTORS]
    # widened by doublings / halvings while the best sits at an edge (within LENGTHSCALE_LIMITS)
    wide = [med * 2.0**k for k in range(-8, 7)]
    assert set(grid) <= set(map(float, res["checks"][0]["lengthscales"])) <= set(wide)
    for c in res["checks"]:
        tried = {float(k): v for k, v in c["lengthscales"].items()}
        assert set(tried) <= set(wide)
        if c["iteration"] > 0:  # the current lengthscale and its neighbours, widened only at an edge
            assert len(tried) == 3 or min(tried, key=tried.get) in (min(tried), max(tried))
        assert c["lengthscale"] == min(tried, key=tried.get) and c["err"] == min(tried.values())
    # the returned lengthscale is the one of the returned check, and the evaluation used it
    sel = res["selected"]
    kept = [c for c in res["checks"] if c["iteration"] == sel["iteration"]
            and (sel["iteration"] > 0 or c["start"] == sel["start"])]
    assert len(kept) == 1 and spec["model"]["lengthscale"] == kept[0]["lengthscale"] == sel["lengthscale"]
    assert set(res["evaluation"]["err"]) == {"optimized", "normal", "barycenter", "mixture"}
    # the baselines also stand at the lengthscale that validates best for them
    own = res["evaluation"]["err_own_lengthscale"]
    assert set(own) == {"normal", "barycenter", "mixture"} and {o["lengthscale"] for o in own.values()} <= set(wide)
    assert res["verdict"]["best_baseline_err"] == min(min(res["verdict"]["baselines"].values()),
                                                      min(o["err"] for o in own.values()))


def test_iterate_checks_try_the_current_lengthscale_and_its_grid_neighbours(small_spec):
    del small_spec["model"]
    design, _, _ = _design(small_spec)
    grid = [f * design.spec.model.lengthscale for f in LENGTHSCALE_FACTORS]
    assert design.lengthscale_grid(grid[2], 0) == grid
    assert design.lengthscale_grid(grid[2], 5) == grid[1:4]
    # an iterate tries its current lengthscale and both neighbours, also beyond the start grid
    # (the selection widens while the best sits at an edge: lwl.defaults.select_widening)
    assert design.lengthscale_grid(grid[0], 5) == [2 * grid[0], *grid[:2]]
    assert design.lengthscale_grid(grid[-1], 5) == [*grid[-2:], grid[-1] / 2]


def test_a_given_lengthscale_is_kept(small_spec):
    from lwl import run_job

    res = run_job(small_spec)
    assert res["spec"]["model"]["lengthscale"] == 3.0 and "lengthscales" not in res["checks"][0]
    assert "err_own_lengthscale" not in res["evaluation"] and "baselines_own_lengthscale" not in res["verdict"]
    assert res["spec"]["derived"] == []


def test_broadened_start_points_are_checked_and_the_run_starts_from_the_best(small_spec):
    design, oracle = _adaptive(small_spec, iterations=4, check_every=2, broaden=[2.0, 4.0])
    starts = design.start_points()
    assert [n for n, _ in starts] == ["moment_matched", "given", "broadened_2", "broadened_4"]
    fit = design.family.measure(starts[0][1])
    for (_, params), factor in zip(starts[2:], (2.0, 4.0)):
        broad = design.family.measure(params)
        np.testing.assert_allclose(broad.mean, fit.mean)
        np.testing.assert_allclose(broad.cov, factor * fit.cov, rtol=1e-12)
    state, first_iterate = design.init(), None
    while not design.done(state):
        if state.phase == "iterate" and first_iterate is None:
            first_iterate = {n: state.params[n].copy() for n in ("mean", "chol")}
        state = design.step(state, oracle.label(design.queries(state)))
    res = design.result(state)
    at_start = [c for c in res["checks"] if c["iteration"] == 0]
    assert [c["start"] for c in at_start] == [n for n, _ in starts]
    best = min(range(len(at_start)), key=lambda i: at_start[i]["err"])
    np.testing.assert_array_equal(first_iterate["chol"], starts[best][1]["chol"])  # the run starts from the best
    # starts checked after theta0 are judged against it like any iterate
    assert all(c.get("z") is not None for c in at_start[2:])
    # a family whose covariance is fixed gets no broadened starts
    small_spec["family"]["free"] = ["mean"]
    fixed, _ = _adaptive(small_spec, broaden=[2.0])
    assert [n for n, _ in fixed.start_points()] == ["moment_matched", "given"]
    # the paper's plain schedule and starts: "given" check theta0 only
    assert [n for n, _ in _adaptive(small_spec, broaden=[2.0], starts="given")[0].start_points()] == ["given"]


def test_start_points_are_built_once_and_handed_out_as_copies(small_spec, monkeypatch):
    design, oracle = _adaptive(small_spec, iterations=4, check_every=2, broaden=[2.0])
    calls = []
    fit = design.family.start_points
    monkeypatch.setattr(design.family, "start_points", lambda *a: calls.append(a) or fit(*a))
    state = design.init()
    while not design.done(state):
        state = design.step(state, oracle.label(design.queries(state)))
    assert len(calls) == 1  # one fit to Q for init and every iteration-0 check
    first = design.start_points()
    first[0][1]["mean"][:] = 1e9  # a caller that writes into its copy ...
    assert np.all(design.start_points()[0][1]["mean"] < 1e9)  # ... changes nobody else's


def test_start_points_need_fewer_standard_errors_than_iterates(small_spec):
    design, _ = _adaptive(small_spec)
    assert design.threshold(0) == 1.645 and design.threshold(25) == 2.0
    lax, _ = _adaptive(small_spec, significance=1.0)
    assert lax.threshold(0) == 1.0 and lax.threshold(25) == 1.0  # never stricter for starts than for iterates
    off, _ = _adaptive(small_spec, significance=0.0)
    assert off.threshold(0) == 0.0


def test_readme_job_with_the_mixture_family_keeps_a_broadened_start_beyond_noise():
    """examples/friedman1.json with family mixture, seed 1: the paired differences are heavy-tailed
    (five validation points carry over half of theta0's squared error), so the broadened starts
    beat theta0 by 1.7 standard errors only: enough for a start point fixed in advance (1.645),
    not for an iterate (2). The kept start beats the mixture baseline on held-out data."""
    from lwl import run_job

    spec = json.loads((ROOT / "examples" / "friedman1.json").read_text())
    spec.update(seed=1, family={"name": "mixture"}, algorithm={"name": "bilevel", "iterations": 50})
    res = run_job(spec)
    starts = {c["start"]: c for c in res["checks"] if c["iteration"] == 0}
    assert [s for s in starts if s.startswith("broadened")] == ["broadened_1.5", "broadened_2", "broadened_3",
                                                                "broadened_4"]
    assert all(1.645 <= starts[s]["z"] < 2 for s in ("broadened_1.5", "broadened_2")), starts
    assert res["selected"]["start"].startswith("broadened") and res["selected"]["check_err"] < starts["given"]["err"]
    v = res["verdict"]
    assert v["err"] < v["baselines"]["mixture"] and v["err"] < v["initial_err"], v


def test_the_returned_lengthscale_is_the_one_of_the_returned_check(small_spec, monkeypatch):
    del small_spec["model"]
    design, _, state = _design(small_spec, optimizer="adaptive")
    given = design.family.initial()
    moved = {n: v + 1.0 for n, v in given.items()}
    checks = [{"iteration": 0, "start": "moment_matched", "err": 0.5, "lengthscale": 1.0},
              {"iteration": 0, "start": "given", "err": 0.6, "lengthscale": 2.0},
              {"iteration": 25, "err": 0.4, "lengthscale": 4.0}]
    state = state.replace(checks=checks, best=Kept(params=moved, iteration=25, err=0.4, sq=np.zeros(3), lengthscale=4.0),
                          initial_sq=np.ones(3), lengthscale=4.0)
    from lwl.design.bilevel import Improvement

    # a difference carried by a few points: the usual bar (2)
    monkeypatch.setattr(design, "improvement", lambda *a: Improvement(z=3.0, top_share=0.9))
    assert design.returned_lengthscale(state) == 4.0  # the best check beats theta0 beyond noise
    monkeypatch.setattr(design, "improvement", lambda *a: Improvement(z=0.9, top_share=0.1))
    assert design.returned_lengthscale(state) == 4.0  # a spread difference: the lower bar (0.8)
    monkeypatch.setattr(design, "improvement", lambda *a: Improvement(z=0.5, top_share=0.9))
    with_significant = state.replace(significant=Kept(params=given, iteration=0, lengthscale=1.0), significant_z=2.5)
    assert design.returned_lengthscale(with_significant) == 1.0  # the surest significant check's
    # a check that clears the full bar goes before a best check that clears only the spread bar
    monkeypatch.setattr(design, "improvement", lambda *a: Improvement(z=0.9, top_share=0.1))
    assert design.returned_lengthscale(with_significant) == 1.0
    monkeypatch.setattr(design, "improvement", lambda *a: Improvement(z=0.5, top_share=0.9))
    monkeypatch.setattr(design, "nearest_start", lambda checks: "moment_matched")
    assert design.returned_lengthscale(state) == 1.0  # the nearest start's check
    monkeypatch.setattr(design, "nearest_start", lambda checks: None)
    assert design.returned_lengthscale(state) == 2.0  # theta0's check
    # above the spread bar but carried by a few points: held back all the same
    monkeypatch.setattr(design, "improvement", lambda *a: Improvement(z=1.5, top_share=0.9))
    assert design.returned_lengthscale(state) == 2.0
    assert design.resolved_spec(state).model.lengthscale == 2.0


@pytest.mark.parametrize("family", ["gaussian", "mixture", "auto", "pool"])
def test_the_typed_state_writes_the_legacy_checkpoint_layout(family):
    """to_flat() of a state from a real run has the keys of the checkpoints the dict-state code
    wrote (tests/conformance/legacy/), and the checkpoint restores to an equal state."""
    from lwl.runner import build_stepper, run_job
    from tests.conformance.legacy_cases import CASES, HERE

    blobs = []
    run_job(CASES[f"bilevel-{family}"][0](), checkpoint=blobs.append, evaluate=False)
    stepper = build_stepper(parse_job_spec(CASES[f"bilevel-{family}"][0]()))
    for legacy in sorted(HERE.glob(f"bilevel-{family}-*.npz")):
        k = int(legacy.stem.rsplit("-", 1)[1])
        state = stepper.restore(unpack(blobs[k - 1]))
        assert isinstance(state, BilevelState) and isinstance(state.phase, Phase)
        old = unpack(legacy.read_bytes())
        assert set(state.to_flat()) == set(old)
        assert set(stepper.restore(old).to_flat()) == set(old)


def test_the_kept_records_spread_over_their_legacy_prefixes(small_spec):
    """best_*, significant_* (with significant_z/start) and pending_* (a start checked before
    theta0, stored without an iteration) round-trip through the flat layout."""
    del small_spec["model"]  # the lengthscale selected: Q's moment-matched Gaussian is checked first
    design, oracle = _adaptive(small_spec, iterations=4, check_every=2, significance=0)
    state = design.init()
    while not design.done(state):
        state = design.step(state, oracle.label(design.queries(state)))
    assert state.pending is not None and state.significant is not None
    flat = state.to_flat()
    names = design.family.param_names
    for prefix, record in (("best_", "best"), ("significant_", "significant"), ("pending_", "pending")):
        assert {prefix + n for n in names} <= set(flat), record
    assert {"best_err", "best_iteration", "best_sq", "best_lengthscale", "significant_err", "significant_iteration",
            "significant_z", "significant_start", "significant_lengthscale", "pending_err", "pending_sq",
            "pending_start", "pending_lengthscale"} <= set(flat)
    assert not {"pending_iteration", "significant_sq", "params", "best", "significant", "pending"} & set(flat)
    assert flat["phase"] == "done" and type(flat["phase"]) is str
    again = design.restore(unpack(pack(state)))
    assert again.phase is Phase.DONE and again.significant_z == state.significant_z
    assert again.best.err == state.best.err and np.array_equal(again.best.sq, state.best.sq)
    assert again.pending.iteration == 0 and again.pending_start == state.pending_start
    assert set(again.to_flat()) == set(flat)
    assert design.result(again)["selected"] == design.result(state)["selected"]


def test_a_step_leaves_the_state_it_was_given_unchanged(small_spec):
    """States are values: every step returns a new one and the old one (what a checkpoint or an
    interrupted run holds) stays as it was, the pending start's check record included."""
    import pickle

    del small_spec["model"]  # a pending start: its z is written when theta0 is checked
    design, oracle = _adaptive(small_spec, iterations=4, check_every=2, significance=0)
    state = design.init()
    while not design.done(state):
        before = pickle.dumps(state)  # a deep snapshot (tests only: checkpoints never pickle)
        new = design.step(state, oracle.label(design.queries(state)))
        assert pickle.dumps(state) == before
        state = new
