"""A new family and a new algorithm are one module plus one registration (issue "One
structure"): tests/lwl/toy_plugin.py registers both; here they appear in the catalog, validate
in a spec, run through run_job and through the embedded service (loaded by LWL_PLUGINS)."""

import copy
import importlib
import sys

import httpx
import numpy as np
import pytest
from pydantic import BaseModel

from lwl import run_job
from lwl.registry import ALGORITHMS, FAMILIES, Registry
from lwl.spec import SpecError, parse_job_spec


@pytest.fixture
def toy():
    """Register the toy plugin for one test, and take it out again (the JobSpec unions too)."""
    sys.modules.pop("tests.lwl.toy_plugin", None)
    module = importlib.import_module("tests.lwl.toy_plugin")
    yield module
    FAMILIES.unregister("toy_isotropic")
    ALGORITHMS.unregister("toy_fixed")
    sys.modules.pop("tests.lwl.toy_plugin", None)


def test_registered_components_validate_and_appear_in_the_catalog(toy, small_spec):
    from service.catalog import catalog

    cat = catalog()
    assert "toy_isotropic" in [f["name"] for f in cat["families"]]
    assert "toy_fixed" in [a["name"] for a in cat["algorithms"]]
    assert "toy_isotropic" in str(cat["job_spec"])
    s = copy.deepcopy(small_spec)
    s["family"] = {"name": "toy_isotropic", "log_scale": 0.5}
    assert parse_job_spec(s).family.log_scale == 0.5
    s["family"]["log_scale"] = 50
    with pytest.raises(SpecError) as exc:
        parse_job_spec(s)
    assert [loc for loc, _ in exc.value.errors] == ["family.log_scale"]


def test_a_registered_family_runs_through_the_bilevel_method(toy, small_spec):
    s = copy.deepcopy(small_spec)
    s["family"] = {"name": "toy_isotropic"}
    s["algorithm"].update(iterations=10, check_every=5)
    res = run_job(s)
    assert res["distribution"]["family"] == "gaussian" and len(res["history"]) >= 5
    assert res["spec"]["family"]["name"] == "toy_isotropic"
    assert "optimized" in res["evaluation"]["err"] and "initial" in res["evaluation"]["err"]
    cov = np.asarray(res["last_distribution"]["cov"])  # the isotropic family only scales Q's covariance
    design = np.asarray(res["distribution"]["cov"])
    assert np.allclose(cov / cov[0, 0], design / design[0, 0])


def test_a_registered_algorithm_runs_through_run_job_with_its_own_check(toy, small_spec):
    s = copy.deepcopy(small_spec)
    s["algorithm"] = {"name": "toy_fixed", "samples": 8}
    res = run_job(s)
    assert res["history"][0]["iteration"] == 0 and res["spec"]["algorithm"]["name"] == "toy_fixed"
    assert res["distribution"]["mean"] == small_spec["family"]["mean"] and res["labels_used"] == 8
    s["family"] = {"name": "toy_isotropic"}
    with pytest.raises(SpecError) as exc:
        parse_job_spec(s)
    assert "family.name" in str(exc.value)


def test_a_plugin_state_is_typed_and_a_checkpoint_restores_it(toy, small_spec):
    """The toy's state is its own dataclass; its checkpoint comes back through the stepper's
    ``restore`` (StepperDefaults, by ``state_type``) and the job resumes from it."""
    from lwl.design.state import unpack
    from lwl.runner import build_stepper

    s = copy.deepcopy(small_spec)
    s["algorithm"] = {"name": "toy_fixed", "samples": 8, "iterations": 3}
    blobs = []
    full = run_job(s, evaluate=False, checkpoint=blobs.append)
    state = build_stepper(parse_job_spec(s)).restore(unpack(blobs[0]))
    assert isinstance(state, toy.FixedState) and (state.iteration, state.labels_used) == (1, 8)
    assert set(state.to_flat()) == {"iteration", "history", "elapsed_seconds", "labels_used"}
    resumed = run_job(s, evaluate=False, state=blobs[0])
    assert resumed["history"] == full["history"] and resumed["labels_used"] == full["labels_used"] == 24


def test_unregistered_names_are_refused_again(small_spec):
    s = copy.deepcopy(small_spec)
    s["algorithm"] = {"name": "toy_fixed"}
    with pytest.raises(SpecError) as exc:
        parse_job_spec(s)
    assert [loc for loc, _ in exc.value.errors] == ["algorithm.name"]


def test_registry_refuses_a_name_that_its_model_does_not_carry():
    class Wrong(BaseModel):
        name: str = "other"

    with pytest.raises(ValueError, match="Literal"):
        Registry("family").register("mine", Wrong)


@pytest.mark.server
def test_the_embedded_service_loads_plugins(tmp_path, small_spec):
    from tests.service.conftest import Server, wait_until

    server = Server(tmp_path / "srv", env={"LWL_PLUGINS": "tests.lwl.toy_plugin"}).start()
    try:
        cat = httpx.get(f"{server.url}/v1/catalog").json()
        assert "toy_fixed" in [a["name"] for a in cat["algorithms"]]
        s = copy.deepcopy(small_spec)
        s["family"] = {"name": "toy_isotropic"}
        s["algorithm"].update(iterations=4, check_every=2)
        r = httpx.post(f"{server.url}/v1/jobs", json=s)
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        done = wait_until(lambda: httpx.get(f"{server.url}/v1/jobs/{job}").json()["status"]
                          in ("succeeded", "failed"), 240, 0.5, "job")
        assert done
        view = httpx.get(f"{server.url}/v1/jobs/{job}").json()
        assert view["status"] == "succeeded", view
        assert httpx.get(f"{server.url}/v1/jobs/{job}/result").json()["spec"]["family"]["name"] == "toy_isotropic"
        fixed = copy.deepcopy(small_spec)
        fixed["algorithm"] = {"name": "toy_fixed", "samples": 8}
        r = httpx.post(f"{server.url}/v1/jobs", json=fixed)
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        wait_until(lambda: httpx.get(f"{server.url}/v1/jobs/{job}").json()["status"] in ("succeeded", "failed"),
                   240, 0.5, "job")
        result = httpx.get(f"{server.url}/v1/jobs/{job}/result").json()
        assert result["history"][0]["iteration"] == 0 and result["spec"]["algorithm"]["name"] == "toy_fixed"
    finally:
        server.stop()


def test_the_spec_vocabulary_is_the_registries():
    """The names a spec accepts come from the registries (no second list), and every
    registered builder resolves to a callable."""
    from lwl.q_samples import MEMBER_KINDS
    from lwl.registry import BASELINES, KERNELS
    from lwl.models.krr import KRRSpec
    from lwl.evaluation.spec import EvaluationSpec
    from lwl.q_samples import MemberSpec

    assert KERNELS.names() == list(KRRSpec.model_fields["kernel"].annotation.__args__)
    accepted = EvaluationSpec.model_fields["baselines"].annotation.__args__[0].__args__[0].__args__
    assert BASELINES.names() == list(accepted)
    assert all(callable(BASELINES.get(b).resolve()) for b in BASELINES.names())
    assert [b for b in BASELINES.names() if BASELINES.get(b).extra["kind"] == "pool"] == ["ncoreset", "acoreset"]
    assert set(MEMBER_KINDS.names()) < set(MemberSpec.model_fields)


def test_a_registered_baseline_is_accepted_and_runs_in_the_verdict(small_spec):
    """A plugin baseline: one register call, and the spec accepts its name (and refuses it again
    once unregistered); the verdict compares the design with it."""
    from lwl.measures import Gaussian
    from lwl.registry import BASELINES

    doc = {**small_spec, "evaluation": {**small_spec["evaluation"], "baselines": ["mixture", "toy_wide"], "draws": 1,
                                        "bound": False}}
    with pytest.raises(SpecError, match="evaluation.baselines"):
        parse_job_spec(doc)
    # no kind=: a baseline is a distribution unless it says "pool"
    BASELINES.register("toy_wide", None, lambda spec, q: Gaussian([0.0] * q.dim, cov=(9.0 * np.eye(q.dim)).tolist()))
    try:
        result = run_job(parse_job_spec(doc))
        assert set(result["evaluation"]["err"]) >= {"optimized", "mixture", "toy_wide"}
    finally:
        BASELINES.unregister("toy_wide")
    with pytest.raises(SpecError, match="evaluation.baselines"):
        parse_job_spec(doc)


def test_a_registered_kernel_and_member_kind_leave_specs_working(small_spec):
    """A plugin kernel is accepted by model.kernel once registered (and refused again after);
    a member kind without a MemberSpec field cannot be named, and leaves every spec parseable."""
    from lwl.kernels import KERNELS, squared_exponential
    from lwl.q_samples import MEMBER_KINDS

    doc = {**small_spec, "model": {**small_spec.get("model", {}), "name": "krr", "kernel": "toy_rbf"}}
    with pytest.raises(SpecError, match="model.kernel"):
        parse_job_spec(doc)
    KERNELS.register("toy_rbf", None, squared_exponential)
    MEMBER_KINDS.register("toy_kind", None, lambda value, size, seed, _: None)
    try:
        assert parse_job_spec(doc).model.kernel == "toy_rbf"
        parse_job_spec(small_spec)
        from lwl.spec import JobSpec

        assert "toy_kind" not in str(JobSpec.model_json_schema())
    finally:
        KERNELS.unregister("toy_rbf")
        MEMBER_KINDS.unregister("toy_kind")
    with pytest.raises(SpecError, match="model.kernel"):
        parse_job_spec(doc)


LIGHT = """import sys
{imports}
print(' '.join(m for m in ('torch', 'scipy', 'lwl.builtins') if m in sys.modules))
"""


def _loaded(imports: str) -> list[str]:
    """Which of torch, scipy and lwl.builtins a fresh interpreter holds after ``imports``."""
    import subprocess

    from tests.conftest import ROOT

    out = subprocess.run([sys.executable, "-c", LIGHT.format(imports=imports)], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


def test_importing_lwl_loads_nothing_heavy_and_a_registry_read_loads_the_built_ins():
    """``import lwl`` (and the CLI, the HTTP client) loads neither torch nor scipy (issue 85: one
    `lwl ask` poll cost 3.2 CPU-s); the first read of a component registry imports every
    built-in, whichever module reads first, and ``lwl.run_job`` is there on first use."""
    assert _loaded("import lwl, lwl.cli, lwl.client") == []
    assert _loaded("import lwl\nfrom lwl.registry import MODELS\nassert {'krr', 'gp'} <= set(MODELS.names())") == [
        "torch", "scipy", "lwl.builtins"]
    # the modules that build the spec's unions, imported first, still see every built-in name
    assert "lwl.builtins" in _loaded("from lwl.spec import parse_job_spec\nfrom lwl.registry import ALGORITHMS, "
                                     "FAMILIES\nassert {'bilevel', 'ama'} <= set(ALGORITHMS.names()) and "
                                     "'gaussian' in FAMILIES")
    assert "lwl.builtins" in _loaded("import lwl\nassert callable(lwl.run_job)")
    # a module of the built-ins' own import chain imported first (a notebook's `from lwl.models import
    # GaussianProcess`): its import-time read meets lwl.models half-imported; the next read loads them all
    assert "lwl.builtins" in _loaded(
        "from lwl.models import GaussianProcess\nimport json\nfrom lwl.spec import parse_job_spec\n"
        "from lwl.registry import ALGORITHMS, BASELINES, FAMILIES, MODELS\n"
        "parse_job_spec(json.load(open('examples/friedman1_budget.json')))\n"
        "assert {'bilevel', 'ama'} <= set(ALGORITHMS.names()) and 'gaussian' in FAMILIES and 'gp' in MODELS\n"
        "assert 'mixture' in BASELINES.names()")
    assert _loaded("import lwl\nassert callable(lwl.measures.from_spec) and callable(lwl.oracles.make_oracle)")
