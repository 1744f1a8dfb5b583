"""The EIT interval search under a solve budget (lwl.design.budgeted_interval): a point is a
conductivity with its L pairs and costs L solves, every solve counted by the solver itself, the
candidates (the search's intervals and Q's law), failed solves paid and never data, a restart
paying no solve twice, the verdict at equal solves."""

import numpy as np
import pytest

from lwl.design.budgeted_interval import HELDOUT_POINTS, BudgetedIntervalSearch
from lwl.oracles.counting import CountingOracle
from lwl.oracles.eit import MAX_TERMS
from lwl.runner import build_stepper, run_job
from lwl.spec import SpecError, parse_job_spec
from tests.lwl.design.operator_labs import (
    check_restart_pays_no_solve_twice,
    solver,
)

PAIRS = 4  # the conformance example's L: one point = 4 solves


@pytest.fixture
def budgeted_interval(eit_spec) -> dict:
    s = eit_spec
    s["algorithm"].update(pairs=PAIRS, explore_min=1, round_size=16)  # the selection machinery at a test's budget
    s["budget"] = 200
    return s


@pytest.mark.parametrize("budget", [200, 203])
def test_solves_never_exceed_the_budget_counted_by_the_solver(budgeted_interval, budget):
    budgeted_interval["budget"] = budget  # 203: three solves buy no conductivity of 4 pairs
    oracle = solver(budgeted_interval)
    res = run_job(budgeted_interval, oracle=oracle, evaluate=False)
    assert oracle.solves == res["labels_used"] == 200 <= budget
    assert res["plan"]["solves_per_label"] == PAIRS and res["budget"] == budget
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    grid = parse_job_spec(budgeted_interval).oracle.build().grid
    assert X.shape == (50, MAX_TERMS + PAIRS) and Y.shape == (50, PAIRS * (4 * grid - 4))
    assert (np.abs(X[:, :MAX_TERMS]) <= 1).all()  # the prior's coefficients
    assert sum(res["labels_by_source"].values()) == 50 and res["rounds"] == res["plan"]["total_rounds"]
    assert res["model"]["model"] == "amino" and res["model"]["pairs"] == PAIRS


def test_a_point_is_a_conductivity_with_its_pairs_and_candidates_are_the_intervals(budgeted_interval):
    stepper = build_stepper(parse_job_spec(budgeted_interval))
    assert isinstance(stepper, BudgetedIntervalSearch)
    names = [c.name for c in stepper.candidates]
    assert names[-1] == "q_mixture" and len(names) == budgeted_interval["algorithm"]["candidates"] + 1
    width = budgeted_interval["family"]["width"]
    for c in stepper.candidates[:-1]:  # each candidate's frequencies lie in its interval
        low = float(c.params["low"][0])
        omega = c.measure.sample(20, [0, 1])[:, MAX_TERMS:]
        assert ((omega >= low) & (omega <= low + width)).all()
        assert c.measure.to_spec()["family"] == "uniform" and c.measure.to_spec()["low"] == [low]
    state = stepper.init()
    rows = stepper.queries(state)  # the validation round: every pair of every validation point
    points = stepper._round_points(state)
    assert len(rows) == PAIRS * len(points) and rows.shape[1] == 2 + MAX_TERMS
    np.testing.assert_array_equal(rows[:PAIRS, 0], points[0, MAX_TERMS:])  # the first point's omegas
    np.testing.assert_array_equal(rows[:PAIRS, 2:], np.repeat(points[:1, :MAX_TERMS], PAIRS, axis=0))
    # the validation points' frequencies are Q's validation samples'
    val = np.concatenate(stepper.q.validation)[:, 0]
    assert np.isin(points[:, MAX_TERMS:], val).all()
    with pytest.raises(ValueError, match="labels: expected"):
        stepper.step(state, np.zeros((len(rows) - 1, 4 * stepper.grid - 4)))


def test_too_small_a_budget_names_budget_and_the_minimum_in_solves(budgeted_interval):
    budgeted_interval["budget"] = (8 + 16) * PAIRS - 1  # 8 validation points of Q's one member, 16 design points
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budgeted_interval)
    field, message = exc.value.errors[0][:2]
    assert field == "budget" and f"the smallest budget it runs with is {(8 + 16) * PAIRS}" in message
    assert f"each of {PAIRS} solves" in message


def test_a_budgeted_search_refuses_initial_data(budgeted_interval):
    budgeted_interval["initial_data"] = {"inputs": [[1.0]], "labels": [0.0]}
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budgeted_interval)
    assert any("initial_data" in str(e[0]) or "initial_data" in e[1] for e in exc.value.errors)


def test_failed_solves_are_paid_for_and_never_training_data(budgeted_interval):
    oracle = solver(budgeted_interval, fail_every=37)
    res = run_job(budgeted_interval, oracle=oracle, evaluate=False)
    failed_points = len(res["failed_inputs"])
    assert failed_points > 0 and res["labels_failed"] == failed_points * PAIRS
    # each round says its failures in solves, as its labels, and in points
    rounds = [h for h in res["history"] if "failed" in h]
    assert sum(h["failed_points"] for h in rounds) == failed_points
    assert all(h["failed"] == h["failed_points"] * PAIRS <= h["labels"] for h in rounds)
    assert oracle.solves == res["labels_used"] == 200  # a failed point's every solve is paid
    Y = np.asarray(res["training_set"]["labels"])
    assert len(Y) + len(res["left_out"]["labels"]) == 50 - failed_points and np.isfinite(Y).all()


@pytest.mark.slow
def test_the_same_spec_and_seed_give_the_same_training_set_and_a_restart_pays_no_solve_twice(budgeted_interval):
    check_restart_pays_no_solve_twice(budgeted_interval, solver, solves_per_point=PAIRS)


@pytest.mark.slow
def test_the_verdict_at_equal_solves_names_q_law_and_the_first_interval(budgeted_interval):
    oracle = solver(budgeted_interval)
    res = run_job(budgeted_interval, oracle=oracle, evaluate=True)
    ev = res["evaluation"]
    assert ev["kind"] == "equal_solves" and ev["labels"] == 200 and set(ev["err"]) == {"optimized", "mixture", "initial"}
    assert set(res["verdict"]["outcomes"]) == {"mixture", "initial"}
    assert all(0 < e < 10 for e in ev["err"].values())  # relative L1 errors of conductivities
    # the audit's solves (held-out points and the comparators' training sets, in solves) are counted apart
    assert oracle.solves == 200 + ev["audit_labels"] and ev["audit_labels"] == HELDOUT_POINTS * PAIRS + 2 * 3 * 200


def lab_spec(spec: dict, oracle: dict) -> dict:
    """The budgeted search with its solves computed by a lab on the eit oracle's grid."""
    out = {**spec, "oracle": oracle, "algorithm": {**spec["algorithm"], "grid": spec["oracle"]["params"]["grid"]}}
    out["evaluation"] = {**spec.get("evaluation", {}), "enabled": False}
    return out


def test_ask_tell_a_client_computes_every_solve(budgeted_interval):
    """An external oracle (ask/tell): the job asks for the pairs' rows, a client solves them with
    the eit solver, the job never labels itself; the lab's grid is ``algorithm.grid``."""
    from lwl.runner import label_width
    from tests.lwl.design.operator_labs import ask_tell, solver

    eit = parse_job_spec(budgeted_interval).oracle.build()
    spec = parse_job_spec(lab_spec(budgeted_interval, {"name": "external"}))
    assert label_width(spec) == 4 * eit.grid - 4
    res, solved = ask_tell(build_stepper(spec), eit)
    assert solved == res["labels_used"] == 200 and res["verdict"]["kind"] == "validation"
    built_in = run_job(budgeted_interval, oracle=solver(budgeted_interval), evaluate=False)
    assert res["training_set"] == built_in["training_set"]  # the same solves, whoever computes them


def test_a_lab_without_its_grid_or_with_another_is_refused(budgeted_interval):
    doc = lab_spec(budgeted_interval, {"name": "external"})
    del doc["algorithm"]["grid"]
    with pytest.raises(SpecError) as exc:
        parse_job_spec(doc)
    assert exc.value.errors[0][0] == "algorithm.grid"
    budgeted_interval["algorithm"]["grid"] = budgeted_interval["oracle"]["params"]["grid"] + 1
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budgeted_interval)
    assert exc.value.errors[0][0] == "algorithm.grid" and "the eit oracle's grid" in exc.value.errors[0][1]
    unbudgeted = lab_spec(budgeted_interval, {"name": "external"})
    del unbudgeted["budget"]
    with pytest.raises(SpecError) as exc:
        parse_job_spec(unbudgeted)
    assert exc.value.errors[0][0] == "oracle.name"


@pytest.mark.slow
def test_an_http_lab_solves_every_pair_and_never_more_than_the_budget(budgeted_interval, loopback_labs):
    from lwl.oracles.http import OracleCallError
    from tests.lwl.design.operator_labs import SolverLab

    eit = budgeted_interval["oracle"]
    with SolverLab(oracle=eit) as lab:
        spec = lab_spec(budgeted_interval, {"name": "http", "url": lab.url, "batch_size": 64})
        counted = CountingOracle(parse_job_spec(spec).oracle.build())
        res = run_job(spec, oracle=counted, evaluate=False)
        assert lab.solves == counted.solves == res["labels_used"] == 200
    width = 4 * eit["params"]["grid"] - 4
    with SolverLab(oracle=eit, width=width - 1) as lab:
        with pytest.raises(OracleCallError, match=rf"of {width} values, the lab sent shape"):
            run_job(lab_spec(budgeted_interval, {"name": "http", "url": lab.url}), evaluate=False)


def test_the_served_amino_predicts_offline_what_the_job_trained(budgeted_interval):
    """The model document holds AMINO's weights: ``lwl.models.from_spec`` rebuilds it from JSON, and
    its conductivities from (frequencies, Neumann data) rows are the job's own model's."""
    import json

    from lwl.models import from_spec, model_document

    res = run_job(budgeted_interval, oracle=solver(budgeted_interval), evaluate=False)
    doc = json.loads(json.dumps(model_document(res)))
    model = from_spec(doc)
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    rows = np.concatenate([X[:, MAX_TERMS:], Y], axis=1)
    assert doc["input_dim"] == rows.shape[1]
    mean, std = model.predict(rows, return_std=True)
    stepper = build_stepper(parse_job_spec(budgeted_interval))
    job_model = stepper._fit(X, Y, stepper.spec.seed)  # the served model: AMINO on the training set, the job's seed
    f, g, a = stepper._arrays(X, Y)
    np.testing.assert_allclose(mean, job_model.predict(f, g).reshape(len(X), -1), rtol=1e-6)
    assert std is None and mean.shape == (len(X), stepper.grid**2) and (mean > 0).all()
    with pytest.raises(ValueError, match="inputs: expected"):
        model.predict(rows[:, :-1])
    broken = {**doc, "weights": {k: v for k, v in list(doc["weights"].items())[1:]}}
    with pytest.raises(ValueError, match="weights: expected the tensors"):
        from_spec(broken)
