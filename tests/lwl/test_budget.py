"""Budgeted jobs (issue #30): every label counted, the cap held, the training set returned."""

import copy
import math
import dataclasses

import numpy as np
import pytest

from lwl import run_job
from lwl.design.budget.design import RACE_MIN_POINTS, RIVAL_Z
from lwl.design.budget.plan import MIN_DESIGN, MIN_VALIDATION, plan_budget
from lwl.evaluation.nipv import integrated_variance, nipv_select
from lwl.design.state import Kept, pack, unpack
from lwl.oracles import Oracle, make_oracle
from lwl.spec import SpecError, parse_job_spec
from tests.conformance.legacy_cases import CASES as LEGACY_CASES, HERE as LEGACY


class CountingOracle(Oracle):
    """Wraps an oracle and counts every label it hands out (its own count, not the job's)."""

    name = "counting"

    def __init__(self, inner):
        super().__init__(inner.dim)
        self.inner, self.calls, self.labels = inner, 0, 0
        self.min_dim = inner.min_dim

    def _label(self, inputs):
        self.calls += 1
        self.labels += len(inputs)
        return self.inner.label(inputs)


@pytest.fixture
def budget_spec(small_spec) -> dict:
    s = copy.deepcopy(small_spec)
    s["budget"] = 300
    s["algorithm"] = {"name": "bilevel"}
    return s


def counting(spec: dict) -> CountingOracle:
    return CountingOracle(make_oracle(parse_job_spec(spec).oracle.model_dump()))


@pytest.mark.parametrize("budget", [2 * MIN_VALIDATION + MIN_DESIGN, 137, 300, 1000])  # the first: the minimum
def test_labels_used_never_exceed_the_budget_counted_by_the_oracle(budget_spec, budget):
    budget_spec["budget"] = budget
    oracle = counting(budget_spec)
    res = run_job(budget_spec, oracle=oracle, evaluate=False)
    assert oracle.labels == res["labels_used"] <= budget
    assert res["labels_used"] == budget  # a budget is spent to the last label: more data, a better model
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    assert X.shape == (res["labels_used"], 5) and y.shape == (res["labels_used"],)
    np.testing.assert_allclose(y, make_oracle({"name": "friedman1"}).label(X))  # the labels are the oracle's
    assert oracle.calls == res["rounds"] == len(res["history"]) == res["plan"]["total_rounds"]


@pytest.mark.slow
def test_the_audit_is_counted_apart_from_the_budget(budget_spec):
    oracle = counting(budget_spec)
    res = run_job(budget_spec, oracle=oracle)
    assert res["labels_used"] <= budget_spec["budget"]
    assert oracle.labels == res["labels_used"] + res["evaluation"]["audit_labels"]
    v = res["verdict"]
    assert v["kind"] == "equal_labels" and v["labels"] == res["labels_used"]
    assert set(v["outcomes"]) == {"normal", "mixture", "nipv"}
    assert all(o in ("better", "tie", "worse") for o in v["outcomes"].values())
    assert res["evaluation"]["draws"]["mixture"] == 5


def test_too_small_a_budget_names_budget_and_the_minimum(budget_spec):
    need = 2 * MIN_VALIDATION + MIN_DESIGN
    budget_spec["budget"] = need - 1
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budget_spec)
    (loc, msg), = exc.value.errors
    assert loc == "budget" and f"smallest budget it runs with is {need}" in msg
    budget_spec["budget"] = need
    parse_job_spec(budget_spec)


def test_a_budget_beside_an_invalid_oracle_is_a_spec_error(budget_spec):
    budget_spec["oracle"] = {"name": "external", "params": {"x": 1}}  # found by schemathesis: an AttributeError
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budget_spec)
    assert exc.value.errors[0][0].startswith("oracle")


def test_budget_is_refused_where_no_budgeted_design_exists(eit_spec, monkeypatch):
    """Every built-in algorithm takes a budget (interval_search since #47); one registered
    without a budgeted design is refused at ``budget``, naming the algorithms that take one."""
    from dataclasses import replace

    from lwl.registry import ALGORITHMS

    assert all("budgeted" in e.extra for e in ALGORITHMS.entries())
    entry = ALGORITHMS.get("interval_search")
    bare = replace(entry, extra={k: v for k, v in entry.extra.items() if not k.startswith("budget")})
    monkeypatch.setitem(ALGORITHMS._entries, "interval_search", bare)
    eit_spec["budget"] = 1000
    with pytest.raises(SpecError) as exc:
        parse_job_spec(eit_spec)
    field, message = exc.value.errors[0][:2]
    assert field == "budget" and "interval_search does not take a label budget" in message
    assert all(name in message for name in ("bilevel", "ama", "particle_ama"))  # the algorithms that do


def test_rounds_fit_max_rounds(budget_spec):
    budget_spec["budget"] = 20_000
    budget_spec["test_distributions"]["validation_per_member"] = 100
    budget_spec["algorithm"] = {"name": "bilevel", "max_rounds": 10}
    plan = plan_budget(parse_job_spec(budget_spec))
    assert plan.total_rounds <= 10 and plan.validation + sum(plan.rounds) == 20_000
    budget_spec["algorithm"]["round_size"] = 64
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budget_spec)
    assert exc.value.errors[0][0] == "algorithm.round_size"


def test_same_spec_and_seed_give_the_same_training_set_and_a_checkpoint_resumes_it(budget_spec):
    blobs = []
    a = run_job(budget_spec, evaluate=False, checkpoint=blobs.append)
    b = run_job(budget_spec, evaluate=False)
    assert a["training_set"] == b["training_set"] and a["distribution"] == b["distribution"]
    resumed = run_job(budget_spec, evaluate=False, state=unpack(pack(unpack(blobs[2]))))
    assert resumed["training_set"] == a["training_set"]
    budget_spec["seed"] = 1
    c = run_job(budget_spec, evaluate=False)
    assert c["training_set"] != a["training_set"]


@pytest.mark.slow
def test_lengthscale_left_to_lwl(budget_spec):
    del budget_spec["model"]["lengthscale"]
    oracle = counting(budget_spec)
    res = run_job(budget_spec, oracle=oracle, evaluate=False)
    assert oracle.labels == res["labels_used"] == budget_spec["budget"]
    assert res["spec"]["model"]["lengthscale"] == res["selected"]["lengthscale"] > 0
    assert "model.lengthscale" in res["spec"]["derived"]


@pytest.mark.slow
def test_surrogate_steps_move_a_challenger_within_the_budget(budget_spec):
    budget_spec["budget"] = 2000  # enough for a broadened Gaussian to beat Q's mixture beyond noise
    budget_spec["algorithm"] = {"name": "bilevel", "inner_steps": 3, "samples_per_iteration": 64}
    oracle = counting(budget_spec)
    res = run_job(budget_spec, oracle=oracle, evaluate=False)
    assert oracle.labels == res["labels_used"] == 2000
    assert res["selected"]["candidate"] != "q_mixture"
    moves = [h for h in res["history"] if h.get("inner_steps")]
    assert moves and all(h["inner_steps"] == 3 for h in moves)
    assert res["labels_by_source"]["challenger"] > 0
    assert all(h["accepted"] == (h["z"] >= 1.645) for h in res["history"] if "accepted" in h)


def test_jobs_without_a_budget_are_unchanged(small_spec):
    spec = parse_job_spec(small_spec)
    assert spec.budget is None
    res = run_job(small_spec, evaluate=False)
    assert "training_set" not in res and res["labels_used"] > 0


def test_greedy_nipv_matches_a_direct_computation():
    rng = np.random.default_rng(3)
    pool, z = rng.normal(size=(30, 3)), rng.normal(size=(25, 3))
    a = rng.uniform(size=25)
    a /= a.sum()
    kw = dict(kernel="squared_exponential", lengthscale=1.3, noise=1e-2)
    order, integrated = nipv_select(pool, z, a, 6, **kw)
    chosen: list[int] = []
    for t in range(6):
        direct = {i: integrated_variance(pool[chosen + [i]], z, a, **kw) for i in range(30) if i not in chosen}
        best = min(direct, key=direct.get)
        assert order[t] == best
        chosen.append(best)
        np.testing.assert_allclose(integrated[t], direct[best], rtol=1e-9)
    # conditioning on points already labelled is the same as having picked them first
    rest, _ = nipv_select(pool, z, a, 3, chosen=order[:3], **kw)
    assert list(rest) == list(order[3:])


def test_laplace_kernel_nipv_integrated_variance_falls():
    rng = np.random.default_rng(4)
    pool, z = rng.normal(size=(50, 2)), rng.normal(size=(40, 2))
    a = np.full(40, 1 / 40)
    order, integrated = nipv_select(pool, z, a, 10, kernel="laplace", lengthscale=1.0, noise=1e-3)
    assert len(set(order)) == 10 and all(b < c for b, c in zip(integrated[1:], integrated))
    np.testing.assert_allclose(integrated[-1], integrated_variance(pool[order], z, a, kernel="laplace",
                                                                   lengthscale=1.0, noise=1e-3), rtol=1e-9)


def _after_selection(spec: dict, incumbent: str):
    """The budgeted stepper of ``spec`` and its state once selection is over, ``incumbent``
    forced as the selected candidate (the race's own logic is what is tested)."""
    from lwl.design.budget.state import float_params
    from lwl.design.budgeted_bilevel import BudgetedBilevel

    stepper = BudgetedBilevel.from_spec(parse_job_spec(spec))
    oracle = make_oracle(parse_job_spec(spec).oracle.model_dump())
    state = stepper.init()
    while state.incumbent is None:
        state = stepper.step(state, oracle.label(stepper.queries(state)))
    names = [c[0] for c in stepper.candidates]
    c = names.index(incumbent)
    params = stepper.candidates[c][2]
    state = state.replace(incumbent=c, incumbent_name=incumbent, rival=names.index("q_mixture"),
                          kept=state.kept if params is None else Kept(params=float_params(params)))
    return stepper, oracle, state


def test_q_mixture_races_the_selected_candidate_with_its_hedge_share(budget_spec):
    budget_spec["budget"] = 1000
    stepper, oracle, state = _after_selection(budget_spec, "broadened_4")
    src = stepper._draws(state)[1]
    n = len(src)
    rival = stepper._q_mixture_index()
    assert int(np.sum(src == rival)) == round(n * stepper.algo.hedge) > 0  # the default share, 1/4
    assert int(np.sum(src == state.incumbent)) == n - round(n * stepper.algo.hedge)
    budget_spec["algorithm"]["hedge"] = 0.0
    off, _, off_state = _after_selection(budget_spec, "broadened_4")
    off_state = off_state.replace(rival=None)  # hedge 0: selection names no rival
    assert set(off._draws(off_state)[1]) == {off_state.incumbent}


def test_the_rival_takes_over_when_its_points_validate_better_beyond_noise(budget_spec, monkeypatch):
    import lwl.design.budget.selection as budgeted  # the race reads RACE_MIN_POINTS there

    budget_spec["budget"] = 1000
    stepper, oracle, state = _after_selection(budget_spec, "broadened_4")
    state = stepper.step(state, oracle.label(stepper.queries(state)))  # a round with the rival's share
    rival = stepper._q_mixture_index()
    record: dict = {}
    points = state.points
    mine = points.source == state.incumbent
    assert mine.sum() > 0 and 0 < len(points.of(rival)) < RACE_MIN_POINTS
    # the incumbent's points moved far from Q: the same labels' worth, useless for Q's inputs
    moved = dataclasses.replace(points, X=points.X.copy(), y=points.y.copy())
    moved.X[mine] += 25.0
    moved.y[mine] = oracle.label(moved.X[mine])
    sabotaged = state.replace(points=moved)
    early = stepper._race(sabotaged, record)  # too few points each to decide: the race goes on
    assert record["race"]["z"] >= RIVAL_Z and "outcome" not in record["race"] and early.incumbent != rival
    monkeypatch.setattr(budgeted, "RACE_MIN_POINTS", 1)  # as if each side had enough
    record = {}
    won = stepper._race(sabotaged, record)
    assert record["race"]["z"] >= RIVAL_Z and record["race"]["outcome"] == "rival won"
    assert won.incumbent == rival and won.rival is None
    assert stepper.incumbent_name(won) == "q_mixture"
    # the same race on the real points: the rival stays (or wins) by the same rule, never silently
    record = {}
    raced = stepper._race(state, record)
    assert (raced.incumbent == rival) == (record["race"]["z"] >= RIVAL_Z)


def test_a_run_with_the_race_keeps_the_budget_and_reports_it(budget_spec):
    budget_spec["budget"] = 1000
    oracle = counting(budget_spec)
    res = run_job(budget_spec, oracle=oracle, evaluate=False)
    assert oracle.labels == res["labels_used"] == 1000
    races = [h["race"] for h in res["history"] if "race" in h]
    selected = next(h["incumbent"] for h in res["history"] if h.get("kind") == "selection" and "incumbent" in h)
    assert bool(races) == (selected != "q_mixture")  # Q's mixture races whatever else selection picked
    assert all(r["points_each"] > 0 for r in races)
    assert all((r.get("outcome") == "rival won")
               == (r["z"] is not None and r["z"] >= RIVAL_Z and r["points_each"] >= RACE_MIN_POINTS) for r in races)
    assert sum(r.get("outcome") == "rival won" for r in races) <= 1  # a won race ends it


def test_without_an_audit_the_verdict_comes_from_validation_and_says_so(budget_spec):
    from lwl.evaluation.verdict_text import verdict_sentence

    budget_spec["budget"] = 1000
    budget_spec["evaluation"] = {"enabled": False}
    res = run_job(budget_spec)
    v = res["verdict"]
    assert v == res["validation_verdict"] and v["kind"] == "validation"
    assert v["validation_points"] == res["plan"]["validation_labels"] and "no held-out label" in v["basis"]
    if v["returned_initial"]:
        assert v["outcome"] == "tie" and res["selected"]["candidate"] == "q_mixture"
    else:  # the design's points against Q's mixture's at equal numbers; z > 0: the design validates better
        assert v["outcome"] == ("better" if v["z"] >= 1.645 else "worse" if v["z"] <= -1.645 else "tie")
        assert v["ratio"] == pytest.approx(v["err"] / v["best_baseline_err"])
        assert 0 < v["points_each"] <= res["labels_by_source"]["q_mixture"]
        # a "better" at a few hundred points each says that the training set is larger than that
        design_points = len(res["training_set"]["labels"]) + len(res["left_out"]["labels"]) - v["validation_points"]
        caveat = [w for w in v["warnings"] if "points each, the job paid for" in w]
        assert bool(caveat) == (v["outcome"] == "better" and 2 * v["points_each"] < design_points)
        assert all(w in res["warnings"] for w in v["warnings"])
    assert verdict_sentence(v).startswith("verdict on validation (no held-out labels)")
    # with the audit, the verdict at equal labels replaces it; the validation verdict stays beside it
    budget_spec["evaluation"] = {"enabled": True, "baselines": ["mixture"]}
    audited = run_job(budget_spec)
    assert audited["verdict"]["kind"] == "equal_labels" and audited["validation_verdict"] == v
    assert not set(v["warnings"]) & set(audited["warnings"])  # the held-out verdict speaks instead


def test_a_validation_win_at_a_few_hundred_points_says_the_training_set_is_larger(budget_spec):
    """Rankings at a few hundred points can reverse at a few thousand (Table 1's g4): a "better"
    on validation names the size it was measured at, and the job's warnings carry it."""
    budget_spec["budget"] = 2000
    stepper, oracle, state = _after_selection(budget_spec, "broadened_4")
    while not stepper.done(state):
        state = stepper.step(state, oracle.label(stepper.queries(state)))
    design_points = len(state.points.y) - stepper.validation(state).n

    def race(points_each: int, z: float):  # the comparison's outcome as given (its statistics are tested above)
        return lambda st, other, n=None: {"points_each": min(points_each, n or points_each), "incumbent_score": 0.1,
                                          "rival_score": 0.2, "z": z}

    stepper.versus = race(100, -3.0)  # ahead by 3 standard errors at 100 points each
    res = stepper.result(state)
    v = res["verdict"]
    assert v["outcome"] == "better" and 2 * v["points_each"] < design_points
    (caveat,) = [w for w in v["warnings"] if "points each, the job paid for" in w]
    assert f"at 100 points each, the job paid for {design_points} design points" in caveat
    assert caveat in res["warnings"]
    stepper.versus = race(design_points // 2 + 1, -3.0)  # at over half the training set's size: no caveat
    assert not stepper.result(state)["verdict"]["warnings"]
    stepper.versus = race(100, 0.5)  # a tie claims nothing to qualify
    assert stepper.result(state)["verdict"]["outcome"] == "tie" and not stepper.result(state)["warnings"]


def test_extrapolated_ratio_is_the_power_law_through_the_two_sizes():
    from lwl.design.budget.design import extrapolated_ratio

    assert extrapolated_ratio(0.8, 0.8, 100, 1000) == pytest.approx(0.8)  # a constant ratio stays
    assert extrapolated_ratio(0.8, 0.64, 100, 400) == pytest.approx(0.8 * 1.25**2)  # x1.25 per doubling
    assert extrapolated_ratio(0.8, 1.0, 100, 400) == pytest.approx(0.8 * 0.8**2)
    assert extrapolated_ratio(0.8, 0.5, 100, 50) == pytest.approx(0.8)  # never extrapolated below n


def test_a_validation_verdict_whose_gap_closes_is_a_tie(budget_spec):
    """Ahead of Q's mixture by 3 standard errors at n points each, but by less than at n/2 so fast
    that the power law through the two crosses 1 before the training set's size: tie, said why.
    Where the gap widens or holds, the verdict stands."""
    budget_spec["budget"] = 2000
    stepper, oracle, state = _after_selection(budget_spec, "broadened_4")
    while not stepper.done(state):
        state = stepper.step(state, oracle.label(stepper.queries(state)))
    design_points = len(state.points.y) - stepper.validation(state).n

    def race(at_n: float, at_half: float, z: float = -3.0):
        def versus(st, other, n=None):
            full = n is None
            return {"points_each": 200 if full else n, "incumbent_score": at_n if full else at_half,
                    "rival_score": 1.0, "z": z}
        return versus

    stepper.versus = race(0.9, 0.5)  # 0.5 at 100 each, 0.9 at 200 each: past 1 long before design_points
    v = stepper.result(state)["verdict"]
    assert v["outcome"] == "tie" and v["z"] == 3.0 and v["trend"]["extrapolated_ratio"] > 1
    assert v["trend"]["points_half"] == 100 and v["trend"]["extrapolated_to"] == design_points
    assert any("the gap closes with more points" in w for w in v["warnings"])
    stepper.versus = race(0.8, 0.9)  # the gap widens: better stands
    v = stepper.result(state)["verdict"]
    assert v["outcome"] == "better" and v["trend"]["extrapolated_ratio"] < 0.8
    stepper.versus = race(1.2, 2.0, z=3.0)  # behind, but catching up fast: not called worse either
    assert stepper.result(state)["verdict"]["outcome"] == "tie"


def test_q_mixture_returned_gives_a_tie_on_validation(budget_spec):
    budget_spec["budget"] = 1000
    stepper, oracle, state = _after_selection(budget_spec, "q_mixture")
    state = state.replace(rival=None)
    while not stepper.done(state):
        state = stepper.step(state, oracle.label(stepper.queries(state)))
    v = stepper.result(state)["verdict"]
    assert v["returned_initial"] and v["outcome"] == "tie" and v["ratio"] == 1.0
    assert np.isfinite(v["err"])


@pytest.mark.parametrize("path", sorted(LEGACY.glob("budgeted-*.npz")), ids=lambda p: p.stem)
def test_a_typed_state_checkpoints_under_the_keys_of_a_legacy_checkpoint(path):
    """The state after step K of a legacy case flattens to the keys of that case's checkpoint
    (written by the dict state), and the checkpoint restores and flattens to itself."""
    from lwl.runner import build_stepper

    case, k = path.stem.rsplit("-", 1)
    make_spec, make_oracle = LEGACY_CASES[case]
    spec = parse_job_spec(make_spec())
    stepper, oracle = build_stepper(spec), make_oracle() if make_oracle else spec.oracle.build()
    state = stepper.init()
    for _ in range(int(k)):
        state = stepper.step(state, oracle.label(stepper.queries(state)))
    legacy = unpack(path.read_bytes())
    assert set(state.to_flat()) == set(legacy)
    again = stepper.restore(legacy).to_flat()
    assert set(again) == set(legacy)
    for key, value in legacy.items():
        if isinstance(value, np.ndarray):
            assert again[key].dtype == value.dtype and np.array_equal(again[key], value), key
        else:
            assert again[key] == value, key


def test_a_state_with_a_challenger_and_failed_validation_labels_round_trips(budget_spec):
    """The keys set only sometimes (chal_*, val_ok, incumbent_name) come back from a checkpoint."""
    from lwl.design.budget.state import float_params
    from lwl.design.budgeted_bilevel import BudgetedBilevel

    stepper, _, state = _after_selection(budget_spec, "broadened_4")
    ok = np.ones(stepper.validation(state).n, dtype=bool)
    state = state.replace(challenger=float_params(state.kept.params), has_challenger=True, val_ok=ok)
    flat = state.to_flat()
    assert {"inc_mean", "inc_chol", "chal_mean", "chal_chol", "val_ok", "incumbent_name"} <= set(flat)
    back = BudgetedBilevel.state_type.from_flat(unpack(pack(state)))
    assert back.to_flat().keys() == flat.keys() and back.has_challenger and back.incumbent_name == "broadened_4"
    np.testing.assert_array_equal(back.challenger["chol"], state.challenger["chol"])
    np.testing.assert_array_equal(back.val_ok, ok)
    np.testing.assert_array_equal(stepper._draws(back)[0], stepper._draws(state)[0])


def test_a_budget_too_small_for_a_verdict_says_why_in_words(budget_spec):
    """The smallest budget (32 labels) ends in the selection rounds: no candidate was raced against
    Q's mixture, so the verdict is empty and the warnings say why, naming the candidates in words."""
    budget_spec["budget"] = 32
    budget_spec["evaluation"] = {"enabled": False}
    res = run_job(budget_spec)
    v = res["verdict"]
    assert v["kind"] == "validation" and v["outcome"] is None and v["ratio"] is None
    (why,) = [w for w in res["warnings"] if w.startswith("no verdict")]
    assert why in v["warnings"] and "ended before selection settled on one distribution" in why
    alive = res["history"][-1]["alive"]
    assert all(res["names"][a] in why for a in alive) and "broadened_" not in why
    assert v["names"][v["selected"]] == res["names"][v["selected"]] != v["selected"]


# -- the model a budgeted job designs for (issue #46) --------------------------------------------


def test_a_budgeted_job_naming_no_model_designs_for_a_gp_and_krr_stays_by_name(budget_spec):
    named = parse_job_spec(budget_spec)
    assert named.model.name == "krr"  # the example names krr: kept
    del budget_spec["model"]
    spec = parse_job_spec(budget_spec)
    assert spec.model.name == "gp"
    # the stored spec names it: it parses back to the same job
    assert parse_job_spec(spec.model_dump(mode="json")).model.name == "gp"
    del budget_spec["budget"]
    assert parse_job_spec(budget_spec).model.name == "krr"  # without a budget: the paper's KRR


def test_a_budgeted_job_with_surrogate_steps_and_no_model_gets_gp(budget_spec):
    """Leaving the model out of a budgeted job gives the gp, with or without bilevel steps on a
    surrogate (a gp's inner problem is KRR on rescaled inputs: lwl.models.gp.as_kernel_ridge)."""
    del budget_spec["model"]
    for inner in (3, 0):
        budget_spec["algorithm"] = {"name": "bilevel", "inner_steps": inner}
        assert parse_job_spec(budget_spec).model.name == "gp"


@pytest.mark.slow
def test_a_gp_job_moves_a_challenger_on_its_surrogate_within_the_budget(budget_spec):
    budget_spec["model"] = {"name": "gp", "restarts": 0, "max_fit_points": 200}
    budget_spec["budget"] = 900
    budget_spec["algorithm"] = {"name": "bilevel", "inner_steps": 3, "samples_per_iteration": 64}
    oracle = counting(budget_spec)
    res = run_job(budget_spec, oracle=oracle, evaluate=False)
    assert oracle.labels == res["labels_used"] == 900
    moves = [h for h in res["history"] if h.get("inner_steps")]
    assert moves and all(h["inner_steps"] == 3 and np.isfinite(h["surrogate_err_last"]) for h in moves)
    assert res["labels_by_source"]["challenger"] > 0


def test_gp_is_refused_without_a_budget(budget_spec):
    budget_spec["model"] = {"name": "gp"}
    budget_spec["algorithm"] = {"name": "bilevel", "inner_steps": 3}
    assert parse_job_spec(budget_spec).model.name == "gp"  # with a budget: moves on the gp's surrogate
    budget_spec["algorithm"] = {"name": "bilevel"}
    del budget_spec["budget"]
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budget_spec)
    assert exc.value.errors[0][0] == "model.name"


def test_gp_candidates_are_scored_by_the_gp_fitted_to_the_round_labels(budget_spec):
    """After the first selection round, each candidate's score is two-fold validation of a GP at
    the hyperparameters fitted (maximum marginal likelihood) to every label bought so far; and
    the served model is a GP whose hyperparameters are fitted to the whole training set."""
    from lwl.design.budget.ledger import VALIDATION
    from lwl.models import GaussianProcess
    from lwl.runner import build_stepper

    budget_spec["model"] = {"name": "gp", "restarts": 0, "max_fit_points": 120}
    spec = parse_job_spec(budget_spec)
    oracle = spec.oracle.build()
    stepper = build_stepper(spec)
    state = stepper.init()
    for _ in range(2):  # the validation round, then the first selection round
        state = stepper.step(state, np.asarray(oracle.label(stepper.queries(state))))
    points = state.points
    # the scores' hyperparameters are the subset's fit (fit_hyperparameters: no final fit, which serves only)
    hyper = GaussianProcess("auto", restarts=0, max_fit_points=120, final_fit_points=0,
                            random_state=spec.seed).fit(points.X, points.y)
    val = stepper.validation(state)
    nv = val.n
    c = state.alive[0]
    name = stepper.candidates[c][0]
    given = points.of(c)
    sq = np.empty(nv)
    for f in (0, 1):
        train, test = val.fold != f, val.fold == f
        X = np.concatenate([points.X[:nv][train], points.X[given]])
        y = np.concatenate([points.y[:nv][train], points.y[given]])
        gp = GaussianProcess(hyper.kernel_, lengthscale=hyper.lengthscale_[0], output_scale=hyper.output_scale_[0],
                             noise=hyper.noise_[0], optimize=False).fit(X, y)
        sq[test] = (gp.predict(points.X[:nv][test]) - points.y[:nv][test]) ** 2
    yv = points.y[:nv]
    expected = np.sqrt(val.weights @ sq / (val.weights @ yv**2))
    np.testing.assert_allclose(state.scores[name], expected, rtol=1e-10)
    assert np.all(points.source[:nv] == VALIDATION)


def test_the_served_gp_is_fitted_to_the_whole_training_set(budget_spec):
    from lwl.models import GaussianProcess, from_spec, model_document

    budget_spec["model"] = {"name": "gp", "restarts": 0, "max_fit_points": 120}
    res = run_job(budget_spec, evaluate=False)
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    fitted = GaussianProcess("auto", restarts=0, max_fit_points=120, random_state=0).fit(X, y)
    served = from_spec(model_document(res))
    np.testing.assert_allclose(served.lengthscale_, fitted.lengthscale_, rtol=1e-12)
    np.testing.assert_allclose(served.predict(X[:20]), fitted.predict(X[:20]), rtol=1e-9)
    assert res["selected"]["lengthscale"] is None


def test_a_gp_job_whose_check_leaves_points_out_serves_a_gp_fitted_to_the_rest(budget_spec, monkeypatch):
    """The real gp plug-in with the left-out check forced to leave the dropped candidates' points
    out (leave_out_z below any z): the served model is the GP fitted to the training set, the left
    out points are returned apart, and the audit's comparators get every label the job holds."""
    import lwl.design.budget.design as layer
    from lwl.models import GaussianProcess, from_spec, model_document

    monkeypatch.setattr(layer.BudgetedDesign, "leave_out_z", -math.inf)
    budget_spec["model"] = {"name": "gp", "restarts": 0, "max_fit_points": 120}
    oracle = counting(budget_spec)
    res = run_job(budget_spec, oracle=oracle)
    check, left = res["left_out"]["check"], res["left_out"]
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    assert check["left_out"] and check["points"] == len(left["labels"]) > 0 and check["z"] is not None
    assert len(y) + len(left["labels"]) == res["labels_used"] == 300
    fitted = GaussianProcess("auto", restarts=0, max_fit_points=120, random_state=0).fit(X, y)
    served = from_spec(model_document(res))
    np.testing.assert_allclose(served.predict(X[:20]), fitted.predict(X[:20]), rtol=1e-9)
    assert res["evaluation"]["labels"] == 300  # the comparators at every label paid, not at len(y)
    assert any("left out of the served model" in w for w in res["warnings"])


def test_a_left_out_check_whose_fit_fails_serves_every_point(budget_spec, monkeypatch):
    from lwl.design.budgeted_bilevel import BudgetedBilevel

    def failing(self, state, rows):
        raise np.linalg.LinAlgError("K_y is not positive definite; raise the noise's lower bound")

    monkeypatch.setattr(BudgetedBilevel, "rows_scorer", failing)
    budget_spec["model"] = {"name": "gp", "restarts": 0, "max_fit_points": 120}
    res = run_job(budget_spec, evaluate=False)
    check = res["left_out"]["check"]
    assert not check["left_out"] and check["z"] is None and "not positive definite" in check["error"]
    assert len(res["training_set"]["labels"]) == res["labels_used"] and res["left_out"]["labels"] == []
