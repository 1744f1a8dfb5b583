"""Particle AMA under a solve budget (lwl.design.budgeted_particles): every radiative-transport
solve counted by the solver itself, the candidates (the initial particles, Q's members, Q's W2
projection), ask/tell without an adjoint, failed solves paid and never data."""

import copy

import numpy as np
import pytest

from lwl.design.budgeted_particles import (
    BudgetedParticleAMA,
    initial_particles,
    log_field_projection,
)
from lwl.measures import KLEGaussian
from lwl.oracles.counting import CountingOracle
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
def budgeted_particles(particle_spec) -> dict:
    s = copy.deepcopy(particle_spec)
    for m in s["test_distributions"]["members"]:
        m["size"] = 30  # 8 validation samples, 22 held out, per member
    s["budget"] = 100
    s["algorithm"]["explore_min"] = 1  # the selection machinery at a test's budget (as budgeted_ama's)
    return s


@pytest.mark.parametrize("budget, pool", [(40, None), pytest.param(100, None, marks=pytest.mark.slow),
                                          pytest.param(100, "qbc", marks=pytest.mark.slow)])  # 40: the minimum (3 x 8 + 16)
def test_solves_never_exceed_the_budget_counted_by_the_solver(budgeted_particles, budget, pool):
    budgeted_particles["budget"] = budget
    if pool is not None:  # the committee's choice of the served solves, by name (the default is i.i.d.)
        budgeted_particles["algorithm"]["pool"] = pool
    oracle = solver(budgeted_particles)
    res = run_job(budgeted_particles, oracle=oracle, evaluate=False)
    assert oracle.solves == res["labels_used"] == budget
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    out = np.asarray(res["left_out"]["labels"]).reshape(-1, 81)
    assert X.shape == (budget - len(out), 81) and Y.shape == X.shape  # scattering and density fields, 9 x 9
    assert (X > 0).all()  # every input a positive field, as the transport solver needs
    assert sum(res["labels_by_source"].values()) == budget
    assert res["rounds"] == res["plan"]["total_rounds"] and res["model"]["model"] == "deeponet"
    assert ("pooled" in res["labels_by_source"]) == (pool == "qbc")


def test_too_small_a_budget_names_budget_and_the_minimum(budgeted_particles):
    budgeted_particles["budget"] = 39
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budgeted_particles)
    field, message = exc.value.errors[0][:2]
    assert field == "budget" and "the smallest budget it runs with is 40" in message


def test_candidates_are_the_initial_particles_q_fit_and_q_members_and_q_law_races(budgeted_particles):
    from lwl.design.particles import ParticleAMADesign

    spec = parse_job_spec(budgeted_particles)
    stepper = BudgetedParticleAMA.from_spec(spec, solver(budgeted_particles))
    names = [c.name for c in stepper.candidates]
    assert names == ["initial_particles", "q_fit", "member_0", "member_1", "member_2", "q_mixture"]
    # the initial particles are the unbudgeted particle AMA's own (same seed, same coefficients)
    unbudgeted = ParticleAMADesign.from_spec(spec.model_copy(update={"budget": None}), spec.oracle.build())
    np.testing.assert_array_equal(stepper.candidates[0].measure.coefficients, unbudgeted.init().c)
    np.testing.assert_array_equal(initial_particles(spec).coefficients, unbudgeted.init().c)
    # Q's law is the exact mixture of its log-normal members; a member candidate is the member itself
    law = stepper.candidates[-1].measure
    assert [type(c).__name__ for c in law.components] == ["LogNormal"] * 3
    member = spec.test_distributions.members[1].lognormal.measure()
    np.testing.assert_array_equal(stepper.candidates[3].measure.sample(4, 7), np.exp(member.sample(4, 7)))
    # the members differ in sigma and shift; q_fit lies within their range in both
    fit = stepper.candidates[1].measure.base
    assert 1.0 <= fit.sigma <= 3.0 and -0.5 <= fit.shift <= 0.5 and (fit.alpha, fit.tau) == (2.0, 1.0)


def test_the_log_field_projection_recovers_a_member_and_none_when_members_agree():
    bases = [KLEGaussian("sine2d", 9, alpha=2.0, tau=1.0, sigma=s, shift=m, endpoints=True)
             for s, m in ((1.0, 0.5), (3.0, -0.5))]
    alone = log_field_projection(bases, [1.0, 0.0])
    assert alone.sigma == pytest.approx(1.0, abs=1e-4) and alone.shift == pytest.approx(0.5, abs=1e-4)
    both = log_field_projection(bases, [0.5, 0.5])
    assert 1.0 < both.sigma < 3.0 and -0.5 < both.shift < 0.5
    assert log_field_projection([bases[0], bases[0]], [0.5, 0.5]) is None


@pytest.mark.slow
def test_failed_solves_are_paid_for_and_never_training_data(budgeted_particles):
    check_failed_solves_are_paid_for_and_never_training_data(budgeted_particles, solver, budget=100, fail_every=7)


@pytest.mark.slow
def test_the_same_spec_and_seed_give_the_same_training_set_and_a_restart_pays_no_solve_twice(budgeted_particles):
    check_restart_pays_no_solve_twice(budgeted_particles, solver)


@pytest.mark.slow
def test_ask_tell_a_client_computes_every_solve_on_the_input_grid(budgeted_particles):
    """An external oracle (ask/tell) needs no adjoint: the job asks, a client solves the transport
    equation, the job never labels itself; the DeepONet's output points are the input grid's
    nodes with the trapezoid rule, the RTE solver's own output grid."""
    from lwl.runner import build_stepper, label_width

    rte = parse_job_spec(budgeted_particles).oracle.build()
    budgeted_particles["oracle"] = {"name": "external"}
    spec = parse_job_spec(budgeted_particles)
    assert label_width(spec) == 81
    stepper = build_stepper(spec)
    z, w = rte.output_grid(81)
    np.testing.assert_array_equal(stepper.z, z)
    np.testing.assert_array_equal(stepper.output_weights, w)
    res, solved = ask_tell(stepper, rte)
    assert solved == res["labels_used"] == 100 and res["verdict"]["kind"] == "validation"


@pytest.mark.slow
def test_the_verdict_at_equal_solves_names_q_law_and_the_initial_particles(budgeted_particles):
    oracle = solver(budgeted_particles)
    res = run_job(budgeted_particles, oracle=oracle, evaluate=True)
    ev = res["evaluation"]
    assert ev["kind"] == "equal_solves" and ev["labels"] == 100 and set(ev["err"]) == {"optimized", "mixture", "initial"}
    assert set(res["verdict"]["outcomes"]) == {"mixture", "initial"}
    # the audit's solves (held-out fields and the comparators' training sets) are counted apart
    assert oracle.solves == 100 + ev["audit_labels"] and ev["audit_labels"] == 3 * 22 + 2 * 3 * 100


def test_without_a_budget_particle_ama_still_needs_the_adjoint(particle_spec):
    particle_spec["oracle"] = {"name": "external"}
    with pytest.raises(SpecError) as exc:
        parse_job_spec(particle_spec)
    assert exc.value.errors[0][0] == "oracle.name" and "not ask/tell" in exc.value.errors[0][1]


def test_a_budgeted_particle_job_refuses_members_without_a_law(budgeted_particles):
    x = np.exp(np.random.default_rng(0).standard_normal((30, 81)) * 0.1)
    budgeted_particles["test_distributions"]["members"][2] = {"samples": x.tolist()}
    with pytest.raises(SpecError) as exc:
        parse_job_spec(budgeted_particles)
    assert exc.value.errors[0][0] == "test_distributions.members.2" and "lognormal or kle" in exc.value.errors[0][1]


def test_one_member_gives_no_duplicate_of_q_law_and_a_built_in_oracle_without_an_adjoint_is_refused(
        budgeted_particles, particle_spec):
    one = copy.deepcopy(budgeted_particles)
    one["test_distributions"]["members"] = one["test_distributions"]["members"][:1]
    stepper = BudgetedParticleAMA.from_spec(parse_job_spec(one), solver(one))
    assert [c.name for c in stepper.candidates] == ["initial_particles", "q_mixture"]  # member_0 is Q's law
    particle_spec["oracle"] = {"name": "darcy"}  # a built-in solver without the transport adjoint
    with pytest.raises(SpecError) as exc:
        parse_job_spec(particle_spec)
    assert exc.value.errors[0][0] == "oracle.name" and "adjoint" in exc.value.errors[0][1]


@pytest.mark.slow
def test_an_http_lab_solves_every_density_field_and_never_more_than_the_budget(budgeted_particles, loopback_labs):
    """The HTTP callback oracle with a budgeted particle job: lwl posts each round's scattering
    fields, the lab solves the transport equation and answers the density fields; the lab's own
    count is labels_used = budget, and an answer of the wrong width fails naming the batch."""
    from lwl.oracles.http import OracleCallError

    rte_spec = budgeted_particles["oracle"]
    with SolverLab(oracle=rte_spec) as lab:
        budgeted_particles["oracle"] = {"name": "http", "url": lab.url, "batch_size": 32}
        counted = CountingOracle(parse_job_spec(budgeted_particles).oracle.build())
        res = run_job(budgeted_particles, oracle=counted, evaluate=False)
        assert lab.solves == counted.solves == res["labels_used"] == 100
    X, Y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    np.testing.assert_allclose(Y, parse_job_spec({**budgeted_particles, "oracle": rte_spec}).oracle.build().label(X),
                               rtol=1e-10)
    with SolverLab(oracle=rte_spec, width=80) as lab:
        budgeted_particles["oracle"] = {"name": "http", "url": lab.url}
        with pytest.raises(OracleCallError, match=r"expected \d+ fields of 81 values, the lab sent shape"):
            run_job(budgeted_particles, evaluate=False)
