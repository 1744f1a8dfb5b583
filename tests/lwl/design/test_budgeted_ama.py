"""The AMA design under a label budget (lwl.design.budgeted_ama): every PDE solve counted by the
oracle itself, candidates from the closed-form W2, failed solves paid and never data."""

import copy

import numpy as np
import pytest

from lwl.design.budgeted_ama import BudgetedAMA, start_points, w2_projection
from lwl.measures.kle_family import KLEFamily
from lwl.runner import run_job
from lwl.spec import SpecError, parse_job_spec
from tests.lwl.design.operator_labs import (
    SolverLab,
    ask_tell,
    check_failed_solves_are_paid_for_and_never_training_data,
    check_restart_pays_no_solve_twice,
    solver,
)


@pytest.fixture
def budgeted_ama(ama_spec) -> dict:
    s = copy.deepcopy(ama_spec)
    s["model"].update(iterations=20, branch=[32], trunk=[32], latent=16)
    s["budget"] = 150
    # the selection machinery at a test's budget: a candidate is explored with a solve or more each
    # (the default explore_min leaves a budget this small to Q's law alone; test_a_small_budget_...)
    s["algorithm"]["explore_min"] = 1
    return s


@pytest.mark.slow
@pytest.mark.parametrize("budget", [60, 150])
def test_solves_never_exceed_the_budget_counted_by_the_solver(budgeted_ama, budget):
    budgeted_ama["budget"] = budget
    oracle = solver(budgeted_ama)
    res = run_job(budgeted_ama, oracle=oracle, evaluate=False)
    assert oracle.solves == res["labels_used"] == budget
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    out = np.asarray(res["left_out"]["labels"]).reshape(-1, 256)  # paid, kept out of the served DeepONet
    assert X.shape == (budget - len(out), 256) and Y.shape == (budget - len(out), 256)  # input and solution fields
    assert res["plan"]["validation_labels"] == 3 * res["plan"]["per_member"]
    assert res["rounds"] == res["plan"]["total_rounds"]


def test_too_small_a_budget_names_budget_and_the_minimum(budgeted_ama):
    budgeted_ama["budget"] = 20
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budgeted_ama)
    field, message = exc.value.errors[0][:2]
    assert field == "budget" and "the smallest budget it runs with is 40" in message  # 3 x 8 + 16


@pytest.mark.slow
def test_failed_solves_are_paid_for_and_never_training_data(budgeted_ama):
    check_failed_solves_are_paid_for_and_never_training_data(budgeted_ama, solver, budget=150, fail_every=9)


@pytest.mark.slow
def test_the_same_spec_and_seed_give_the_same_training_set_and_a_restart_pays_no_solve_twice(budgeted_ama):
    check_restart_pays_no_solve_twice(budgeted_ama, solver)


def _family(spec: dict) -> KLEFamily:
    fam = parse_job_spec(spec).family
    return KLEFamily(fam.kle_parameters().measure(), list(fam.free), dict(fam.bounds))


def test_the_w2_projection_recovers_a_member_of_the_family(budgeted_ama):
    """A member that is the family's template with another shift projects onto that shift, and
    Q's projection lies between its members' (the free parameter is the mean's offset)."""
    family = _family(budgeted_ama)
    members = [family.measure(np.array([s])) for s in (0.6, -1.0)]
    assert w2_projection(family, members[:1], [1.0], family.theta0())[0] == pytest.approx(0.6, abs=1e-5)
    both = w2_projection(family, members, [0.5, 0.5], family.theta0())[0]
    assert -1.0 < both < 0.6
    names = [n for n, _ in start_points(family, members, [0.5, 0.5])]
    assert names == ["initial", "q_fit", "member_0_fit", "member_1_fit"]


def test_candidates_are_the_start_q_fit_and_each_member_fit_and_q_law_races(budgeted_ama):
    oracle = solver(budgeted_ama)
    spec = parse_job_spec(budgeted_ama)
    stepper = BudgetedAMA.from_spec(spec, oracle)
    names = [c.name for c in stepper.candidates]
    assert names[0] == "initial" and names[-1] == "q_mixture" and "q_fit" in names
    # Q's law is the mixture of its KLE members themselves
    law = stepper.candidates[-1].measure
    assert [type(c).__name__ for c in law.components] == ["KLEGaussian"] * 3


@pytest.mark.parametrize("least, explores", [(1, True), (8, False)])
def test_candidates_are_explored_when_the_first_round_gives_each_explore_min_solves(budgeted_ama, least, explores):
    budgeted_ama["algorithm"]["explore_min"] = least
    stepper = BudgetedAMA.from_spec(parse_job_spec(budgeted_ama), solver(budgeted_ama))
    q = stepper._q_mixture_index()
    everyone = list(range(len(stepper.candidates)))
    counts = stepper._selection_counts(everyone, stepper.plan.rounds[0])
    fewest = min(m for c, m in zip(everyone, counts) if c != q)
    assert 1 <= fewest < 8  # a 150-solve budget: a few solves each in the first selection round
    assert (not stepper.unexplored) == explores
    # the candidate list stays whole either way (a ledger's indices mean the same); selection runs Q's law alone
    assert stepper.candidates[q].name == "q_mixture" and len(stepper.candidates) >= 4
    assert stepper.init().alive == (everyone if explores else [q])


@pytest.mark.parametrize("explore", [0.25, None])
def test_unexplored_every_design_draw_of_the_first_round_is_the_committees(budgeted_ama, explore):
    from lwl.design.budget.ledger import POOLED

    budgeted_ama["algorithm"].update(explore_min=16, explore=explore)  # above either split of the first round
    oracle = solver(budgeted_ama)
    stepper = BudgetedAMA.from_spec(parse_job_spec(budgeted_ama), oracle)
    assert stepper.unexplored
    state = stepper.init()
    state = stepper.step(state, oracle.label(stepper.queries(state)))  # Q's validation fields
    x, source = stepper._draws(state)
    assert len(x) == stepper.plan.rounds[0] and (source == POOLED).all()


@pytest.mark.slow
def test_a_small_budget_explores_nothing_and_spends_every_solve_on_q_law(budgeted_ama):
    """At the default explore_min (8) a 150-solve job's first selection round gives each candidate
    fewer than eight solves: no candidate but Q's law, its served fields chosen by the committee;
    with explore_min 1 the same job explores the candidates."""
    del budgeted_ama["algorithm"]["explore_min"]
    oracle = solver(budgeted_ama)
    stepper = BudgetedAMA.from_spec(parse_job_spec(budgeted_ama), oracle)
    assert {"initial", "q_fit"} <= set(stepper.unexplored)
    res = run_job(budgeted_ama, oracle=oracle, evaluate=False)
    assert oracle.solves == res["labels_used"] == 150
    assert set(res["labels_by_source"]) == {"validation", "pooled"}  # every design solve chosen by the committee
    assert res["selected"]["candidate"] == "q_mixture" and "no candidate besides Q's mixture" in res["selected"]["rule"]
    assert len(res["training_set"]["labels"]) == 150 and not res["left_out"]["labels"]
    # Q's law's selection score is on the design fields it was given (pooled ones), not on validation fields alone
    first = next(h for h in res["history"] if h.get("kind") == "selection")
    assert first["alive"] == ["q_mixture"] and first["incumbent"] == "q_mixture"
    assert np.isfinite(res["selected"]["scores"]["q_mixture"])
    budgeted_ama["algorithm"]["explore_min"] = 1
    explored = run_job(budgeted_ama, oracle=solver(budgeted_ama), evaluate=False)
    assert {"initial", "q_fit"} <= set(explored["labels_by_source"])


@pytest.mark.slow
def test_query_by_committee_picks_served_fields_where_the_committee_disagrees_within_the_budget(budgeted_ama):
    from lwl.design.active import qbc_scores
    from lwl.design.budgeted_operator import COMMITTEE

    budgeted_ama["algorithm"]["pool"] = "qbc"
    oracle = solver(budgeted_ama)
    res = run_job(budgeted_ama, oracle=oracle, evaluate=False)
    assert oracle.solves == res["labels_used"] == 150  # the pool's inputs cost no solve
    again = run_job(budgeted_ama, oracle=solver(budgeted_ama), evaluate=False)
    assert again["training_set"] == res["training_set"]  # committees seeded: the same fields
    # the rule itself: the m pool inputs of the largest committee disagreement
    stepper = BudgetedAMA.from_spec(parse_job_spec(budgeted_ama), oracle)
    assert stepper.pool_factor == 4
    state = stepper.init()
    state = stepper.step(state, oracle.label(stepper.queries(state)))  # Q's validation fields
    pool = stepper.q_law().sample(20, [0, 1, 2])
    picked = stepper.select_from_pool(state, pool, 5, [0, 15, 1, 0])
    models = [stepper.factory(stepper.spec.seed + 7919 * k + 31).fit(state.points.X, state.points.y, stepper.z)
              for k in range(COMMITTEE)]
    scores = qbc_scores(models, pool, stepper.output_weights)
    assert len(set(picked.tolist())) == 5 and scores[picked].min() >= np.delete(scores, picked).max()


@pytest.mark.slow
def test_ask_tell_a_client_computes_every_solve_on_the_input_grid(budgeted_ama):
    """An external oracle (ask/tell): the job asks, a client solves, the job never labels itself;
    the DeepONet's output points are the input grid's nodes, Darcy's own output grid."""
    from lwl.oracles import make_oracle
    from lwl.runner import build_stepper

    darcy = make_oracle({"name": "darcy"})
    budgeted_ama["oracle"] = {"name": "external"}
    spec = parse_job_spec(budgeted_ama)
    stepper = build_stepper(spec)
    z, w = darcy.output_grid(256)
    np.testing.assert_array_equal(stepper.z, z)
    np.testing.assert_array_equal(stepper.output_weights, w)
    res, solved = ask_tell(stepper, darcy)
    assert solved == res["labels_used"] == 150 and res["verdict"]["kind"] == "validation"


def test_without_a_budget_ama_still_refuses_ask_tell(ama_spec):
    ama_spec["oracle"] = {"name": "external"}
    with pytest.raises(SpecError) as exc:
        parse_job_spec(ama_spec)
    assert exc.value.errors[0][0] == "oracle.name" and "not ask/tell" in exc.value.errors[0][1]


@pytest.mark.slow
@pytest.mark.parametrize("npy", [False, True])
def test_an_http_lab_solves_every_field_and_never_more_than_the_budget(budgeted_ama, loopback_labs, npy):
    """The HTTP callback oracle with a budgeted ama job: lwl posts each round's input fields, the
    lab answers the solution fields; the lab's own count is labels_used = budget."""
    with SolverLab(npy=npy) as lab:
        budgeted_ama["oracle"] = {"name": "http", "url": lab.url, "batch_size": 32}
        budgeted_ama["budget"] = 60
        counted = solver(budgeted_ama)  # wrapped, as a study wraps it: the width still reaches the http oracle
        res = run_job(budgeted_ama, oracle=counted, evaluate=False)
        assert lab.solves == counted.solves == res["labels_used"] == 60
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    assert X.shape == Y.shape == (60 - len(res["left_out"]["labels"]), 256)  # the rest: paid, left out
    from lwl.oracles import make_oracle

    np.testing.assert_allclose(Y, make_oracle({"name": "darcy"}).label(X), rtol=1e-12)


def test_an_http_lab_answering_the_wrong_width_fails_naming_the_batch(budgeted_ama, loopback_labs):
    from lwl.oracles.http import OracleCallError

    with SolverLab(width=255) as lab:
        budgeted_ama["oracle"] = {"name": "http", "url": lab.url}
        budgeted_ama["budget"] = 60
        with pytest.raises(OracleCallError, match=r"expected \d+ fields of 256 values, the lab sent shape"):
            run_job(budgeted_ama, evaluate=False)


def test_without_a_budget_an_http_lab_is_refused_for_ama(ama_spec, loopback_labs):
    ama_spec["oracle"] = {"name": "http", "url": "http://127.0.0.1:9/solve"}
    with pytest.raises(SpecError, match="with a budget, a lab's solver returns each field"):
        parse_job_spec(ama_spec)


def test_operator_designs_leave_solves_out_on_the_z_rule_alone():
    """The left-out check's rank rule (BudgetedDesign.leave_out_rank_p) was measured on gp jobs
    only and is off by default; operator designs keep the z rule their committed studies ran even
    where a caller switches it on for the KRR/GP design (None switches the rank rule off:
    tests/lwl/design/budget/test_design.py shows it then decides nothing)."""
    from lwl.design.budget.design import BudgetedDesign
    from lwl.design.budgeted_particles import BudgetedParticleAMA

    assert BudgetedDesign.leave_out_rank_p is None
    assert BudgetedAMA.leave_out_rank_p is None and BudgetedParticleAMA.leave_out_rank_p is None
