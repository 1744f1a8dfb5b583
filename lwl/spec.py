"""The job spec: one JSON document that runs the same design job through ``lwl run``,
``POST /v1/jobs`` and a Python call (:func:`lwl.run_job`).

Every model forbids unknown fields and non-finite numbers, and cross-field checks (dimensions,
positive definiteness, oracle input dimension) run before any work, so an invalid spec is
refused with the offending field named. ``docs/job-spec.md`` documents every field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lwl.domain import DomainSpec
from lwl.evaluation.spec import EvaluationSpec
from lwl.initial_data import InitialDataSpec, check_initial_data
from lwl.oracles.spec import OracleSpec
from lwl.params import MAX_SEED, StrictModel
from lwl.q_samples import TestDistributionsSpec
from lwl.registry import BASELINES
from lwl.spec_errors import SpecError, spec_error  # noqa: F401  (SpecError: what parse_job_spec raises)


class _Unregistered(StrictModel):
    """Stands for the family, model and algorithm unions until their registries hold entries
    (the components register on import: :mod:`lwl.builtins`)."""
    name: Literal["unregistered"] = "unregistered"


def _default(field: str, name: str) -> StrictModel:
    """The default block of ``field``: the parameter model of the registered entry ``name``."""
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    return {"family": FAMILIES, "model": MODELS, "algorithm": ALGORITHMS}[field].get(name).params()



def _q_dim(info: ValidationInfo) -> int | None:
    """The test distributions' dimension when that field has validated (fields check in order)."""
    tests = info.data.get("test_distributions")
    return tests.dim if tests is not None else None

class JobSpec(StrictModel):
    """A design job: oracle, meta test distribution Q, family, model, algorithm, seed."""

    # family, model and algorithm accept any entry of lwl.registry's FAMILIES, MODELS and
    # ALGORITHMS: the annotations below are replaced by the registered unions
    # (rebuild_job_spec); the algorithm's compatibility check runs last (_algorithm_parts)

    oracle: OracleSpec
    test_distributions: TestDistributionsSpec
    domain: DomainSpec | None = Field(
        default=None, description="the instrument's input domain: box bounds low/high per input and optional "
                                  "linear constraints A x <= b; every input the job hands out lies inside")
    family: _Unregistered = Field(default_factory=lambda: _default("family", "auto"), discriminator="name")
    model: _Unregistered = Field(default_factory=lambda: _default("model", "krr"), discriminator="name",
                                 description="default: gp for a job with a budget, krr otherwise")
    algorithm: _Unregistered = Field(default_factory=lambda: _default("algorithm", "bilevel"), discriminator="name")
    budget: int | None = Field(
        default=None, ge=1, le=1_000_000_000,
        description="the most oracle labels the job may use, everything included (Q's validation labels, design "
                    "rounds, checks); the labelled points are returned as the training set. Default: no limit")
    initial_data: InitialDataSpec | None = Field(
        default=None, description="budgeted jobs: inputs and labels the lab already has; free labels that count "
                                  "toward the budget as already paid and are kept in the training set")
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    derived: list[str] = Field(default_factory=list, description="fields lwl filled from the data (output only)")

    @model_validator(mode="before")
    @classmethod
    def _budgeted_model(cls, data):
        """A budgeted job that names no model designs for the one a lab deploys: a Gaussian
        process with hyperparameters fitted to its labels (``gp``, :mod:`lwl.models.gp`); the
        paper's fixed-hyperparameter KRR stays by name (``{"name": "krr"}``)."""
        if isinstance(data, dict) and data.get("budget") is not None and data.get("model") is None:
            data = {**data, "model": {"name": "gp"}}
        return data

    @field_validator("domain")
    @classmethod
    def _domain_dim(cls, domain, info: ValidationInfo):
        d = _q_dim(info)
        if domain is not None and d is not None and domain.dim != d:
            raise ValueError(f"low: the domain bounds {domain.dim} inputs, the test distributions have dimension {d}")
        return domain

    @field_validator("family", mode="before")
    @classmethod
    def _family_name(cls, v):
        if isinstance(v, dict) and "name" not in v:
            # a block with a Gaussian's parameters is a Gaussian family; none at all: auto
            v = {**v, "name": "gaussian" if {"mean", "cov", "free"} & set(v) else "auto"}
        return v

    @field_validator("family")
    @classmethod
    def _family_dim(cls, family, info: ValidationInfo):
        d = _q_dim(info)
        fam_dim = getattr(family, "dim", None)
        field = getattr(type(family), "dim_field", "name")  # what sets the family's dimension
        if fam_dim is not None and d is not None and fam_dim != d:
            raise ValueError(f"{field}: dimension {fam_dim} does not match the test distributions' dimension {d}")
        dim = fam_dim if fam_dim is not None else d  # a family without explicit parameters takes Q's
        oracle = info.data.get("oracle")
        if oracle is not None and dim is not None:
            o = oracle.build()
            if o.design_dim is not None:  # the design picks a part of each input (eit: omega)
                if dim != o.design_dim:
                    where = field if fam_dim is not None else "test_distributions.members"
                    raise ValueError(f"{where}: a design for oracle {oracle.name} chooses {o.design_dim} "
                                     f"input coordinate(s), got dimension {dim}")
            elif dim < o.min_dim or (o.dim is not None and dim != o.dim):
                want = o.dim if o.dim is not None else f">= {o.min_dim}"
                where = field if fam_dim is not None else "test_distributions.members"
                raise ValueError(f"{where}: oracle {oracle.name} takes inputs of dimension {want}, got {dim}")
        return family

    @field_validator("evaluation")
    @classmethod
    def _pool_size(cls, ev: EvaluationSpec, info: ValidationInfo):
        oracle = info.data.get("oracle")
        external = oracle is not None and oracle.is_external
        if ev.enabled is None:  # a budgeted job's audit labels outside its budget: built-in oracles only
            http = oracle is not None and oracle.name == "http"
            ev.enabled = not external and not (info.data.get("budget") is not None and http)
        elif ev.enabled and external:
            raise ValueError("enabled: an external (ask/tell) oracle cannot label the evaluation's "
                             "training sets; set false")
        tests = info.data.get("test_distributions")
        if tests is not None and any(BASELINES.get(b).extra.get("kind") == "pool" for b in ev.baselines or ()):
            pool = tests.validation_per_member * len(tests.members)
            if max([ev.train_size, *ev.sizes]) > pool:
                raise ValueError(f"train_size: coreset baselines select from the {pool} validation points; "
                                 f"ask for at most {pool}")
        return ev

    @model_validator(mode="after")
    def _algorithm_parts(self):
        from lwl.registry import ALGORITHMS

        if self.evaluation.enabled is None:  # also when the evaluation block is omitted
            self.evaluation.enabled = not self.oracle.is_external
        entry = ALGORITHMS.get(self.algorithm.name)
        if self.evaluation.baselines is None:
            self.evaluation.baselines = list(entry.extra.get("baselines", ()))
        if entry.check is not None:
            entry.check(self)
        if self.domain is not None:
            _check_domain(self, entry)
        if self.initial_data is not None:
            check_initial_data(self)
        if self.budget is not None:
            _check_budget(self, entry)
        return self

    @property
    def dim(self) -> int | None:
        """The family's dimension when its parameters fix one (else None: Q's members fix it)."""
        return getattr(self.family, "dim", None)


def _check_domain(spec: JobSpec, entry) -> None:
    """An input domain: an algorithm that restricts its draws to it (``domain`` in its registry
    entry), a family of the same dimension, and test members inside it
    (:func:`lwl.q_samples.check_member_domain`; datasets are checked when they are resolved)."""
    if not entry.extra.get("domain"):
        takes = [e.name for e in _algorithms().entries() if e.extra.get("domain")]
        raise ValueError(f"domain: {spec.algorithm.name} does not restrict its inputs to a domain (algorithms that "
                         f"do: {', '.join(takes)})")
    fam_dim = getattr(spec.family, "dim", None)
    if fam_dim is not None and fam_dim != spec.domain.dim:
        raise ValueError(f"domain.low: the domain bounds {spec.domain.dim} inputs, the family has dimension {fam_dim}")
    from lwl.q_samples import check_member_domain

    domain = spec.domain.build()
    for k, m in enumerate(spec.test_distributions.members):
        check_member_domain(m, k, domain, spec.domain.outside, spec.seed)
    _check_initial_in_domain(spec.family, domain, spec.seed)


def _check_initial_in_domain(family, domain, seed: int) -> None:
    """An initial distribution given explicitly (a Gaussian's mean and cov, a mixture's
    components) must keep some mass in the domain: restricted to it, it is drawn by rejection
    (lwl.measures.truncated.MIN_DESIGN_SHARE; a family filled from Q starts inside, as Q is)."""
    from lwl.measures import Gaussian, Mixture
    from lwl.measures.truncated import MIN_DESIGN_SHARE
    from lwl.streams import STREAM_DOMAIN

    if getattr(family, "mean", None) is not None and getattr(family, "cov", None) is not None:
        law, field = Gaussian(family.mean, cov=family.cov), "family.mean"
    elif getattr(family, "means", None) is not None:
        law = Mixture([Gaussian(m, cov=c) for m, c in zip(family.means, family.covs)], family.weights)
        field = "family.means"
    else:
        return
    share = float(domain.contains(law.sample(20_000, [seed, STREAM_DOMAIN, 10_000])).mean())
    if share < MIN_DESIGN_SHARE:
        raise ValueError(f"{field}: the initial distribution puts {share:.2%} of its mass inside the domain "
                         f"(a design restricted to it keeps at least {MIN_DESIGN_SHARE:.0%})")


def _check_budget(spec: JobSpec, entry) -> None:
    """A budget: an algorithm with a budgeted design (``budgeted`` in its registry entry) and
    a budget that covers the job's fixed needs (``budget_needs``, e.g. Q's validation labels)."""
    if "budgeted" not in entry.extra:
        takes = [e.name for e in _algorithms().entries() if "budgeted" in e.extra]
        raise ValueError(f"budget: {spec.algorithm.name} does not take a label budget (algorithms that do: "
                         f"{', '.join(takes)})")
    needs = entry.resolve("budget_needs")
    if needs is not None:
        needs(spec)  # raises "budget: ..." naming the smallest budget the job runs with
    check_labels = getattr(spec.model, "check_labels", None)  # a model's own limit on the labels it trains on
    if check_labels is not None:
        initial = len(getattr(spec.initial_data, "labels", None) or [])
        check_labels(spec.budget + initial, initial)  # raises "budget: ..." naming the largest that fits


def _algorithms():
    from lwl.registry import ALGORITHMS

    return ALGORITHMS


def rebuild_job_spec(force: bool = False) -> None:
    """Re-derive JobSpec's tagged unions from the registries (called when an entry is added)."""
    from typing import Union

    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    changed = False
    for field, registry in (("family", FAMILIES), ("model", MODELS), ("algorithm", ALGORITHMS)):
        models = registry.params_models()
        if not models:
            continue
        annotation = Union[models] if len(models) > 1 else models[0]  # noqa: UP007 (a runtime tuple)
        if JobSpec.model_fields[field].annotation != annotation:
            JobSpec.model_fields[field].annotation = annotation
            changed = True
    if changed or force:
        JobSpec.model_rebuild(force=True)


def _listen() -> None:
    """Rebuild JobSpec whenever a family, model or algorithm registers, or a nested block rebuilds
    itself (``model.kernel``, ``evaluation.baselines``: a kernel or baseline registered); the built-in
    components register themselves on import (:mod:`lwl.builtins`), plugins the same way."""
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS, on_block_rebuilt

    for registry in (FAMILIES, MODELS, ALGORITHMS):
        registry.on_change(rebuild_job_spec)
    on_block_rebuilt(lambda: rebuild_job_spec(force=True))
    rebuild_job_spec()


_listen()


def parse_job_spec(doc: dict[str, Any] | str | bytes, *, strict: bool = False) -> JobSpec:
    """Validate a job spec (a dict or JSON text); raise :class:`~lwl.spec_errors.SpecError` naming each field.

    ``strict=True`` (documents from the wire or a file: ``POST /v1/jobs``, ``lwl run``) refuses
    values of the wrong JSON type instead of coercing them ("5" for an integer, 1 for a boolean);
    integers are accepted where numbers are expected, as JSON has one number type."""
    try:
        if isinstance(doc, (str, bytes)):
            return JobSpec.model_validate_json(doc, strict=strict)
        return JobSpec.model_validate(doc, strict=strict)
    except ValidationError as exc:
        raise spec_error(exc, JobSpec) from None
