import copy
import json
from pathlib import Path

import numpy as np
import pytest

from lwl.design.particles import ParticleAMASpec, ParticlesFamilySpec
from lwl.spec import SpecError, parse_job_spec


def test_issue_spec_is_valid_with_documented_defaults(issue_spec):
    spec = parse_job_spec(issue_spec)
    assert spec.dim == 5
    assert spec.algorithm.learning_rate == 1e-2 and spec.algorithm.nugget == 1e-3
    # no algorithm block: the adaptive optimiser, designing for the evaluation's training size
    assert spec.algorithm.optimizer == "adaptive" and spec.algorithm.keep == "best"
    assert spec.algorithm.samples_per_iteration == spec.evaluation.train_size == 1024
    assert spec.family.free == ["mean", "cov"]
    # JSON text parses the same way
    assert parse_job_spec(json.dumps(issue_spec)) == spec


def _errors(doc):
    with pytest.raises(SpecError) as exc:
        parse_job_spec(doc)
    return dict(exc.value.errors)


@pytest.mark.parametrize("mutate,field", [
    (lambda s: s["family"]["cov"][0].__setitem__(0, -1.0), "family.cov"),
    (lambda s: s["family"].__setitem__("mean", [0.0] * 4), "family.mean"),
    (lambda s: s["test_distributions"]["members"][1]["gaussian"].__setitem__("mean", [0] * 4),
     "test_distributions.members.1.gaussian.mean"),
    (lambda s: s.__setitem__("extra", 1), "extra"),
    (lambda s: s["model"].__setitem__("lengthscale", float("inf")), "model.lengthscale"),
    (lambda s: s["model"].__setitem__("lengthscale", -1.0), "model.lengthscale"),
    (lambda s: s["oracle"].__setitem__("name", "nope"), "oracle.name"),
    (lambda s: s.__setitem__("algorithm", {"name": "sgd"}), "algorithm.name"),
    (lambda s: s.__setitem__("algorithm", {"name": "bilevel", "step": 0.0}), "algorithm.step"),
    (lambda s: s.__setitem__("algorithm", {"name": "bilevel", "optimizer": "sgd"}), "algorithm.optimizer"),
    (lambda s: s["test_distributions"]["members"][0].pop("size"), "test_distributions.members.0"),
    (lambda s: s["test_distributions"]["members"][0].__setitem__("samples", [[0.0] * 5]),
     "test_distributions.members.0"),
    (lambda s: s["test_distributions"].__setitem__("weights", [1.0]), "test_distributions"),
    (lambda s: s["test_distributions"].__setitem__("validation_per_member", 5000), "test_distributions"),
    (lambda s: s["evaluation"].__setitem__("baselines", ["bogus"]), "evaluation.baselines.0"),
])
def test_invalid_specs_name_the_field(issue_spec, mutate, field):
    doc = copy.deepcopy(issue_spec)
    mutate(doc)
    errors = _errors(doc)
    assert any(loc.startswith(field) for loc in errors), errors


@pytest.mark.parametrize("family,field,words", [
    # a square covariance of another size than the mean: the mean is named, with both sizes
    ({"mean": [0.0] * 4, "cov": np.eye(5).tolist()}, "family.mean", "4 entries, but cov is a 5x5"),
    # a covariance that is not square for the mean: the covariance
    ({"mean": [0.0] * 5, "cov": np.eye(5)[:4].tolist()}, "family.cov", "expected a 5x5"),
    ({"mean": [0.0] * 5, "cov": [[1.0] * 5] + [[1.0]] * 4}, "family.cov", "same length"),
    # a mixture's means agree with each other: the odd covariance is named
    ({"name": "mixture", "weights": [1, 1], "means": [[0.0] * 5] * 2, "covs": [np.eye(5).tolist(), np.eye(4).tolist()]},
     "family.covs.1", "expected a 5x5"),
])
def test_a_mean_and_covariance_that_disagree_name_the_odd_one(issue_spec, family, field, words):
    doc = copy.deepcopy(issue_spec)
    doc["family"] = family
    errors = _errors(doc)
    assert list(errors) == [field] and words in errors[field], errors


def test_a_member_mean_shorter_than_its_covariance_names_the_mean(issue_spec):
    doc = copy.deepcopy(issue_spec)
    doc["test_distributions"]["members"][0] = {"gaussian": {"mean": [0.0] * 4, "cov": np.eye(5).tolist()}, "size": 100}
    assert list(_errors(doc)) == ["test_distributions.members.0.gaussian.mean"]


def test_nan_in_json_text_is_refused(issue_spec):
    text = json.dumps(issue_spec).replace('"lengthscale": 3.0', '"lengthscale": NaN')
    assert "model.lengthscale" in _errors(text)


def test_oracle_dimension_mismatch_is_refused(issue_spec):
    doc = copy.deepcopy(issue_spec)
    doc["oracle"]["name"] = "kernel_expansion"
    doc["oracle"]["params"] = {"dim": 10}
    assert any("dimension" in m for m in _errors(doc).values())


def test_samples_member_accepted(issue_spec):
    doc = copy.deepcopy(issue_spec)
    rows = np.random.default_rng(0).standard_normal((600, 5))  # full rank: degenerate members are refused
    doc["test_distributions"]["members"][0] = {"samples": rows.tolist()}
    doc["test_distributions"]["weights"] = [1, 3]
    spec = parse_job_spec(doc)
    assert spec.test_distributions.members[0].count == 600


@pytest.mark.parametrize("mutate,field", [
    (lambda s: s["family"].__setitem__("name", "gaussian"), "family"),
    (lambda s: s["model"].__setitem__("name", "krr"), "model"),
    (lambda s: s["oracle"].__setitem__("name", "external"), "oracle.name"),
    (lambda s: s["test_distributions"]["members"][1]["kle"].__setitem__("modes", 10),
     "test_distributions.members.1.kle"),
    (lambda s: s["test_distributions"]["members"][0].__setitem__("kle", None), "test_distributions.members.0"),
    (lambda s: s["family"].__setitem__("free", ["mean"]), "family.free.0"),
    (lambda s: s["family"]["bounds"].__setitem__("shift", [1, 2]), "family.bounds.shift"),
    (lambda s: s["family"].__setitem__("bounds", {}) or s["algorithm"].__setitem__("optimizer", "differential_evolution"),
     "family.bounds"),
    (lambda s: s["algorithm"].__setitem__("optimizer", "sgd"), "algorithm.optimizer"),
    (lambda s: s["model"].__setitem__("branch", [0]), "model.branch"),
    (lambda s: s["oracle"].__setitem__("name", "friedman1"), "oracle.name"),
])
def test_invalid_ama_specs_name_the_field(ama_spec, mutate, field):
    doc = copy.deepcopy(ama_spec)
    mutate(doc)
    errors = _errors(doc)
    assert any(loc.startswith(field) for loc in errors), errors


def test_ama_spec_defaults():
    doc = json.loads((Path(__file__).parents[2] / "examples" / "darcy_ama.json").read_text())
    spec = parse_job_spec(doc)
    assert spec.algorithm.name == "ama" and spec.model.latent == 32 and spec.algorithm.lipschitz_oracle is None
    assert spec.evaluation.enabled is True  # auto: on for a built-in oracle


@pytest.mark.parametrize("mutate,field", [
    (lambda s: s["family"].__setitem__("grid", 11), "family.grid"),  # not the oracle's grid
    (lambda s: s["family"].__setitem__("modes", 20), "family.modes"),
    (lambda s: s["family"].__setitem__("particles", 1), "family.particles"),
    (lambda s: s.__setitem__("model", {"name": "krr"}), "model.name"),
    (lambda s: s["oracle"].update(name="darcy", params={}), "oracle.name"),  # no adjoint solver
    (lambda s: s.__setitem__("algorithm", {"name": "ama"}), "algorithm.name"),
    (lambda s: s["algorithm"].__setitem__("step_size", 0), "algorithm.step_size"),
    (lambda s: s["test_distributions"]["members"][0]["lognormal"].__setitem__("endpoints", False),
     "test_distributions.members"),
    (lambda s: s["test_distributions"]["members"][0].__delitem__("size"), "test_distributions.members.0.size"),
])
def test_invalid_particle_ama_specs_name_the_field(particle_spec, mutate, field):
    doc = copy.deepcopy(particle_spec)
    mutate(doc)
    errors = _errors(doc)
    assert any(loc.startswith(field) for loc in errors), errors


def test_particles_family_needs_particle_ama(particle_spec):
    doc = copy.deepcopy(particle_spec)
    doc["algorithm"] = {"name": "bilevel"}
    assert "algorithm.name" in _errors(doc)


def test_rte_particles_example_is_valid_with_the_papers_defaults():
    doc = json.loads((Path(__file__).parents[2] / "examples" / "rte_particles.json").read_text())
    spec = parse_job_spec(doc)
    assert spec.family.init_std == 1e-3  # c ~ N(0, 1e-6)
    assert spec.test_distributions.members[0].lognormal.sigma == 1.0
    family, algorithm = ParticlesFamilySpec(grid=51), ParticleAMASpec()
    assert (family.modes, family.particles, algorithm.iterations) == (20, 120, 10)  # SM RTE


def test_minimal_spec_names_only_oracle_and_q(issue_spec):
    doc = {"oracle": issue_spec["oracle"], "test_distributions": issue_spec["test_distributions"]}
    spec = parse_job_spec(doc)
    assert spec.family.name == "auto" and spec.family.means is None  # lwl.design.families.auto
    assert spec.model.lengthscale is None
    assert spec.evaluation.baselines == ["normal", "barycenter", "mixture"]
    doc["family"] = {"mean": [0.0] * 3}
    assert "family.mean" in _errors(doc) or "family" in _errors(doc)


def test_degenerate_samples_member_is_refused_for_bilevel(issue_spec):
    doc = copy.deepcopy(issue_spec)
    doc["test_distributions"]["members"][0] = {"samples": [[0.1 * i] * 5 for i in range(600)]}  # rank 1
    with pytest.raises(SpecError) as exc:
        parse_job_spec(doc)
    assert exc.value.errors[0][0] == "test_distributions.members.0.samples"
    assert "rank 1 < d = 5" in exc.value.errors[0][1]


@pytest.mark.parametrize("where, typo, meant", [
    ((), "budjet", "budget"),
    (("test_distributions",), "validation_per_membr", "validation_per_member"),
    (("test_distributions", "members", 0, "gaussian"), "mena", "mean"),
    (("family",), "covv", "cov"),  # a tagged union: the gaussian family's fields
    (("algorithm",), "round_sise", "round_size"),
    (("oracle",), "batch_sise", "batch_size"),
])
def test_an_unknown_field_is_told_the_closest_known_name_at_its_level(where, typo, meant):
    spec = json.loads((Path(__file__).resolve().parents[2] / "examples" / "friedman1_budget.json").read_text())
    block = spec
    for key in where:
        block = block[key]
    block[typo] = 1
    with pytest.raises(SpecError) as err:
        parse_job_spec(spec)
    field = ".".join(str(k) for k in (*where, typo))
    assert err.value.errors == [(field, f"Extra inputs are not permitted; did you mean {meant!r}?")]


def test_an_unknown_field_with_no_close_name_gets_no_guess():
    spec = json.loads((Path(__file__).resolve().parents[2] / "examples" / "friedman1_budget.json").read_text())
    spec["zzzz"] = 1
    spec["model"]["lengthscal"] = 1.0  # the gp model has no lengthscale field: nothing is close
    with pytest.raises(SpecError) as err:
        parse_job_spec(spec)
    assert sorted(err.value.errors) == [("model.lengthscal", "Extra inputs are not permitted"),
                                        ("zzzz", "Extra inputs are not permitted")]


def test_the_readme_budgeted_example_is_the_gp_studys_g4_problem():
    """examples/kernel10d_budget.json (the README's shell example) is Table 1's g4 exactly as the gp
    budget study ran it (docs/results/budget-full-2000-gp-units/, row table1-g4): Q and the start at
    full precision, the study's oracle in examples/measure.py, asked for through ask/tell."""
    import runpy

    from lwl.experiments import table1

    root = Path(__file__).resolve().parents[2]
    doc = json.loads((root / "examples" / "kernel10d_budget.json").read_text())
    spec = parse_job_spec(doc)
    assert spec.dim == 10 and spec.budget == 2000 and spec.model.name == "gp" and spec.seed == 0
    assert spec.oracle.name == "external" and spec.oracle.batch_size == 250
    members = doc["test_distributions"]["members"]
    assert len(members) == 10
    assert all(len(m["gaussian"]["mean"]) == 10 and np.shape(m["gaussian"]["cov"]) == (10, 10) for m in members)
    col = next(c for c in table1.COLUMNS if c.key == "g4")
    study = table1.column_spec(col, seed=0, size=5000, validation=500, baselines=("normal", "mixture"))
    assert members == study["test_distributions"]["members"]
    assert doc["test_distributions"]["validation_per_member"] == study["test_distributions"]["validation_per_member"]
    assert doc["family"] == study["family"]
    instruments = runpy.run_path(str(root / "examples" / "measure.py"))["INSTRUMENTS"]
    assert instruments["kernel10d"] == study["oracle"]
    assert instruments["friedman1"]["name"] == "friedman1"
