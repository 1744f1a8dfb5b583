"""One conformance suite over every registry entry (as scikit-learn's ``parametrize_with_checks``
runs over every estimator): each family, model, algorithm and oracle that is registered is
checked here, from a small example (tests/conformance/examples.py, or the entry's own
``example``). An entry without an example fails :func:`test_every_entry_has_an_example`.

Checks: the spec round-trips; a bad parameter is refused naming its field; the entry is in the
catalog and its schema validates the example's block; the same spec and seed give the same
result; a job resumed from a checkpoint, or from the state an interrupted (cancelled) run left,
ends as the uninterrupted one, bit for bit."""

from __future__ import annotations

import copy

import jsonschema
import numpy as np
import pytest

from lwl.oracles import make_oracle
from lwl.registry import ALGORITHMS, FAMILIES, MODELS, ORACLES
from lwl.runner import Interrupted, run_job
from lwl.spec import SpecError, parse_job_spec
from tests.conformance.examples import ORACLES as ORACLE_EXAMPLES
from tests.conformance.examples import job_example

REGISTRIES = {"family": FAMILIES, "model": MODELS, "algorithm": ALGORITHMS}
# the run checks of these algorithms train neural operators: the full suite runs them, the
# fast loop does not
SLOW_ALGORITHMS = {"ama", "particle_ama", "interval_search"}


def _entries():
    return [(kind, name) for kind, registry in REGISTRIES.items() for name in registry.names()]


def _example(kind, name) -> dict:
    spec = job_example(kind, name)
    if spec is None:
        pytest.fail(f"no conformance example for {kind} {name!r}: register it with example=... or add one to "
                    f"tests/conformance/examples.py")
    return spec


def _run_cases():
    """One case per distinct example job, naming every entry it covers: an algorithm, the family
    it moves and the model it trains often share one example, and the job need run only once."""
    import json

    cases: dict[str, list[tuple[str, str]]] = {}
    for kind, name in _entries():
        spec = job_example(kind, name)
        key = json.dumps(spec, sort_keys=True) if spec is not None else f"{kind}:{name}"
        cases.setdefault(key, []).append((kind, name))
    out = []
    for key, covered in cases.items():
        kind, name = covered[0]
        spec = job_example(kind, name)
        slow = spec is not None and spec["algorithm"]["name"] in SLOW_ALGORITHMS
        out.append(pytest.param(kind, name, marks=[pytest.mark.slow] if slow else [],
                                id="+".join(f"{k}-{n}" for k, n in covered)))
    return out


def test_every_entry_has_an_example():
    missing = [f"{k} {n}" for k, n in _entries() if job_example(k, n) is None]
    missing += [f"oracle {n}" for n in ORACLES.names() if n not in ORACLE_EXAMPLES]
    assert missing == []


def check_round_trip(kind, name):
    spec = parse_job_spec(_example(kind, name), strict=True)
    assert getattr(spec, kind).name == name
    doc = spec.model_dump(mode="json")
    again = parse_job_spec(doc, strict=True)
    assert again.model_dump(mode="json") == doc


def check_bad_parameter(kind, name):
    doc = _example(kind, name)
    doc[kind]["no_such_parameter"] = 1
    with pytest.raises(SpecError) as exc:
        parse_job_spec(doc)
    assert f"{kind}.no_such_parameter" in [loc for loc, _ in exc.value.errors]
    # a field of the right name with a value of the wrong type names that field
    doc = _example(kind, name)
    field = next(f for f, info in REGISTRIES[kind].get(name).params.model_fields.items() if f != "name")
    doc[kind][field] = {"not": "a valid value"}
    with pytest.raises(SpecError) as exc:
        parse_job_spec(doc)
    assert any(loc == f"{kind}.{field}" or loc.startswith(f"{kind}.{field}.") for loc, _ in exc.value.errors)


def check_catalog(kind, name):
    from service.catalog import catalog

    listed = {e["name"]: e["schema"] for e in catalog()[kind.replace("family", "familie") + "s"]}
    assert name in listed
    block = parse_job_spec(_example(kind, name)).model_dump(mode="json")[kind]
    jsonschema.validate({k: v for k, v in block.items() if v is not None}, listed[name])


def _same(a: dict, b: dict) -> None:
    assert a["distribution"] == b["distribution"]
    assert a.get("last_distribution") == b.get("last_distribution")
    assert [r.get("objective") for r in a.get("history", [])] == [r.get("objective") for r in b.get("history", [])]


def check_runs(kind, name):
    spec = _example(kind, name)
    blobs = []
    full = run_job(copy.deepcopy(spec), checkpoint=blobs.append, evaluate=False)
    _same(full, run_job(copy.deepcopy(spec), evaluate=False))
    assert len(blobs) >= 2, "a job checkpoints at least after its first step and at its end"
    _same(full, run_job(copy.deepcopy(spec), state=blobs[len(blobs) // 2], evaluate=False))
    # cancelled after the first step: the state it leaves is whole, and resumes to the same end
    calls = iter([False, True])
    with pytest.raises(Interrupted) as exc:
        run_job(copy.deepcopy(spec), should_stop=lambda: next(calls, True), evaluate=False)
    _same(full, run_job(copy.deepcopy(spec), state=exc.value.state, evaluate=False))


SPEC_CHECKS = (check_round_trip, check_bad_parameter, check_catalog)


@pytest.mark.parametrize("check", SPEC_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("kind, name", _entries())
def test_spec_checks(kind, name, check):
    check(kind, name)


@pytest.mark.parametrize("kind, name", _run_cases())
def test_same_seed_same_result_and_resume_bit_for_bit(kind, name):
    check_runs(kind, name)


def test_a_plugin_entry_is_covered_by_registering_it():
    """The toy plugin's family and algorithm (tests/lwl/toy_plugin.py) register with an
    ``example``; every check of this suite then runs on them, and an entry registered without
    one is reported missing."""
    import importlib
    import sys

    sys.modules.pop("tests.lwl.toy_plugin", None)
    importlib.import_module("tests.lwl.toy_plugin")
    try:
        for kind, name in (("family", "toy_isotropic"), ("algorithm", "toy_fixed")):
            assert (kind, name) in _entries()
            for check in (*SPEC_CHECKS, check_runs):
                check(kind, name)
        toy = FAMILIES.get("toy_isotropic")
        FAMILIES.register("toy_without_example", _renamed(toy.params, "toy_without_example"),
                          bilevel=toy.extra["bilevel"])
        assert job_example("family", "toy_without_example") is None
        with pytest.raises(pytest.fail.Exception, match="no conformance example for family 'toy_without_example'"):
            check_round_trip("family", "toy_without_example")
    finally:
        for registry, name in ((FAMILIES, "toy_without_example"), (FAMILIES, "toy_isotropic"),
                               (ALGORITHMS, "toy_fixed")):
            registry.unregister(name)
        sys.modules.pop("tests.lwl.toy_plugin", None)


def _renamed(model, name: str):
    """A copy of a parameter model whose ``name`` literal is ``name``."""
    from typing import Literal

    from pydantic import create_model

    return create_model(f"{model.__name__}_{name}", __base__=model, name=(Literal[name], name))


@pytest.mark.parametrize("name", sorted(ORACLE_EXAMPLES))
def test_an_oracle_labels_the_same_inputs_the_same_way_and_names_bad_params(name):
    assert name in ORACLES.names()
    doc = _example("model", "krr")
    example = ORACLE_EXAMPLES[name]
    block = {"name": name, "params": {"no_such_parameter": 1}}
    doc["oracle"] = block
    with pytest.raises(SpecError) as exc:
        parse_job_spec(doc)
    assert [loc for loc, _ in exc.value.errors] == ["oracle.params"]
    if example is None:
        pytest.skip(f"{name}: its labels come from outside this process (tested with a lab or a server)")
    block, inputs = example()
    a, b = make_oracle(block), make_oracle(copy.deepcopy(block))
    ya, yb = np.asarray(a.label(inputs)), np.asarray(b.label(inputs))
    assert len(ya) == len(inputs) and np.all(np.isfinite(ya))
    np.testing.assert_array_equal(ya, yb)
    # rows are independent; a batch in another order may round differently (BLAS blocking): 1 ulp seen
    np.testing.assert_allclose(np.asarray(a.label(inputs[::-1]))[::-1], ya, rtol=1e-12, atol=1e-300)
