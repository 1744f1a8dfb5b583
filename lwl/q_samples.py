"""Samples of the meta test distribution Q = sum_k w_k delta_{nu'_k} (paper eqn app_rand_measure).

Each member nu'_k is known by M_k samples; the first ``validation_per_member`` drive the adjoint
state and the validation error during design (paper SM: 500 of 5000), the rest are held out for
the final evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from lwl.measures import Gaussian, UniformBox
from lwl.measures.kle import KLEParameters
from lwl.params import StrictModel, check_rectangular, check_spd
from lwl.registry import Registry
from lwl.streams import STREAM_DOMAIN, STREAM_Q

DatasetResolver = Callable[[str], np.ndarray]



def _no_datasets(ref: str) -> np.ndarray:
    raise ValueError(f"dataset: {ref!r} cannot be resolved here (no dataset store configured)")


# How each kind of test member (MemberSpec below: exactly one field is given) becomes
# samples: build(value of that field, size, seed, dataset resolver) -> (M, d) float64 array.
MEMBER_KINDS = Registry("member kind")
# ``drawn``: lwl draws the member's samples (from the job's seed), so with an input domain it
# draws them restricted to it; the others are the user's points, refused or clipped there.
MEMBER_KINDS.register("gaussian", None, lambda g, size, seed, _: Gaussian(g.mean, cov=g.cov).sample(size, seed),
                      drawn=True)
MEMBER_KINDS.register("uniform", None, lambda u, size, seed, _: UniformBox(u.low, u.high).sample(size, seed),
                      drawn=True)
MEMBER_KINDS.register("kle", None, lambda p, size, seed, _: p.measure().sample(size, seed), drawn=True)
MEMBER_KINDS.register("lognormal", None, lambda p, size, seed, _: np.exp(p.measure().sample(size, seed)),
                      drawn=True)
MEMBER_KINDS.register("samples", None, lambda rows, size, seed, _: np.asarray(rows, dtype=np.float64))
MEMBER_KINDS.register("dataset", None, lambda ref, size, seed, resolve: np.asarray(resolve(ref), dtype=np.float64))

# -- members and the input domain (docs/job-spec.md "domain") ---------------------------------------
MAX_OUTSIDE_SHARE = 0.01  # a drawn member with more mass outside the domain is refused (outside: refuse)
SHARE_DRAWS = 20_000  # draws behind that share (fewer for high-dimensional members: memory)
MIN_SHARE_INSIDE = 1e-3  # below this a drawn member cannot be drawn restricted to the domain at all


def member_kinds() -> list[str]:
    """The member kinds a spec can name: the registered ones that are fields of
    :class:`MemberSpec` (a kind registered without a field there cannot be written in a spec)."""
    return [k for k in MEMBER_KINDS.names() if k in MemberSpec.model_fields]


def _kind(member) -> str:
    return next(name for name in member_kinds() if getattr(member, name) is not None)


def share_outside(member, domain, seed: int, k: int) -> float:
    """The share of a drawn member's mass outside the domain, on SHARE_DRAWS draws of its own
    stream (seed, STREAM_DOMAIN, k) (a fixed estimate: the same spec gets the same answer)."""
    kind = _kind(member)
    n = int(min(SHARE_DRAWS, max(1000, 20_000_000 // max(domain.dim, 1))))
    x = MEMBER_KINDS.get(kind).build(getattr(member, kind), n, [seed, STREAM_DOMAIN, k, 0], _no_datasets)
    return float(1.0 - domain.contains(x).mean())


def check_member_domain(member, k: int, domain, outside: str, seed: int) -> None:
    """Refuse member ``k`` (a :class:`MemberSpec`) when the domain cannot hold it: the
    user's points outside it (``outside: "refuse"``; ``"clip"`` moves them to the nearest point
    of the domain), a drawn member with more than MAX_OUTSIDE_SHARE of
    its mass outside (``"refuse"``) or less than MIN_SHARE_INSIDE inside (either). Datasets are
    checked by :func:`member_in_domain` once resolved. Raises ValueError naming the member."""
    kind = _kind(member)
    if kind == "dataset":
        return
    if kind == "samples":
        member_in_domain(np.asarray(member.samples, dtype=np.float64), k, "samples", domain, outside)
        return
    share = share_outside(member, domain, seed, k)
    field = f"test_distributions.members.{k}.{kind}"
    if 1.0 - share < MIN_SHARE_INSIDE:
        raise ValueError(f"{field}: {share:.1%} of this member's mass lies outside the domain: it cannot be "
                         "drawn inside it")
    if outside == "refuse" and share > MAX_OUTSIDE_SHARE:
        raise ValueError(f"{field}: {share:.1%} of this member's mass lies outside the domain (at most "
                         f"{MAX_OUTSIDE_SHARE:.0%} is drawn restricted to it); move the member, widen the domain, "
                         "or set domain.outside to \"clip\" to move its draws outside to the domain's nearest point")


def member_in_domain(x: np.ndarray, k: int, kind: str, domain, outside: str) -> np.ndarray:
    """The user's points of member ``k`` in the domain: unchanged when inside, moved to the
    nearest point of the domain with ``outside: "clip"`` (:meth:`lwl.domain.Domain.clip`), else
    refused (ValueError naming the member)."""
    inside = domain.contains(x)
    if inside.all():
        return x
    field = f"test_distributions.members.{k}.{kind}"
    if outside == "clip":
        clipped = domain.clip(x)
        if domain.contains(clipped).all():
            return clipped
        raise ValueError(f"{field}: {domain.describe_outside(clipped)} after projecting on the domain")
    raise ValueError(f"{field}: {domain.describe_outside(x)}; set domain.outside to \"clip\" to clip them into "
                     "the domain")


def draw_in_domain(build, value, size: int, seed, domain, k: int) -> np.ndarray:
    """``size`` draws of a member restricted to the domain (rejection): the first ``size`` draws
    come from the member's own seed (a domain holding them all changes no bit), the rest from
    (seed..., STREAM_DOMAIN, round)."""
    x = build(value, size, seed, _no_datasets)
    kept = [x[domain.contains(x)]]
    have, drawn, r = len(kept[0]), size, 0
    while have < size:
        if drawn > size / MIN_SHARE_INSIDE:
            raise ValueError(f"test_distributions.members.{k}: less than {MIN_SHARE_INSIDE:g} of this member's "
                             "mass lies inside the domain")
        r += 1
        rate = max(have / drawn, MIN_SHARE_INSIDE)
        m = int(min(np.ceil(1.2 * (size - have) / rate) + 64, 4_000_000))
        x = build(value, m, [*np.atleast_1d(seed).tolist(), STREAM_DOMAIN, r], _no_datasets)
        kept.append(x[domain.contains(x)])
        have += len(kept[-1])
        drawn += m
    return np.concatenate(kept)[:size]


def degenerate_member(x: np.ndarray, rel: float = 1e-10) -> str | None:
    """Why a member's samples cannot stand for a distribution on R^d for the bilevel method
    (its moment-matched Gaussian, the barycenter and mixture baselines need a full-rank
    covariance), or None: fewer than d + 1 samples, or a covariance of rank < d (identical
    rows, samples on a subspace)."""
    n, d = x.shape
    if n < d + 1:
        return f"{n} samples cannot span {d} dimensions (need at least {d + 1})"
    centred = x - x.mean(0)
    s = np.linalg.svd(centred, compute_uv=False)
    rank = int(np.sum(s > rel * max(float(s[0]) if s.size else 0.0, 1e-300)))
    if rank < d:
        return (f"the samples' covariance has rank {rank} < d = {d} (identical rows or samples on a "
                "subspace): the bilevel method and its baselines need a full-rank member")
    return None


def kle_member_sizes(spec) -> None:
    """A job spec (a ``lwl.spec.JobSpec``) whose algorithm draws samples from its kle members
    (bilevel, particle_ama: a compatibility check of their registry entries): each gives ``size``."""
    for k, m in enumerate(spec.test_distributions.members):
        if m.kle is not None and m.size is None:
            raise ValueError(f"test_distributions.members.{k}.size: a kle member needs the number of "
                             "samples to draw")


class DatasetError(ValueError):
    """A test member's dataset that a job cannot use: ``field`` names the member, ``title`` says
    what is wrong in a few words (the service's problem title), ``detail`` why."""

    def __init__(self, field: str, title: str, detail: str):
        self.field, self.title, self.detail = field, title, detail
        super().__init__(f"{field}: {detail}")


def check_datasets(spec, shape_of: Callable[[str], tuple | None], load: DatasetResolver) -> None:
    """Every dataset member of a job spec (a ``lwl.spec.JobSpec``) exists (``shape_of(ref)`` is
    not None), has rows of the job's input dimension (the family's, or the other members') and
    of what the oracle takes, leaves points held out after ``validation_per_member``, has a
    full-rank covariance where the algorithm needs one (``full_rank_members`` in its registry
    entry) and lies in the input domain. Raises :class:`DatasetError`; ``load`` is called only
    for the checks that need the rows. The service calls this before it stores a job."""
    from lwl.registry import ALGORITHMS

    tests = spec.test_distributions
    dim = spec.dim if spec.dim is not None else tests.dim  # None: every member is a dataset
    for k, m in enumerate(tests.members):
        if m.dataset is None:
            continue
        field = f"test_distributions.members.{k}.dataset"
        shape = shape_of(m.dataset)
        if shape is None:
            raise DatasetError(field, "Unknown dataset", f"no dataset {m.dataset!r}")
        if len(shape) == 2 and dim is None:
            dim = shape[1]  # the first dataset fixes the dimension the others must have
        if len(shape) != 2 or shape[1] != dim:
            raise DatasetError(field, "Dataset has the wrong shape",
                               f"expected an (M, {dim}) array, dataset has shape {tuple(shape)}")
        oracle = spec.oracle.build()
        if oracle.design_dim is not None:  # the design picks part of each input (eit: omega)
            if dim != oracle.design_dim:
                raise DatasetError(field, "Dataset has the wrong shape",
                                   f"a design for oracle {spec.oracle.name} chooses {oracle.design_dim} input "
                                   f"coordinate(s), the dataset's rows have {dim}")
        elif dim < oracle.min_dim or (oracle.dim is not None and dim != oracle.dim):
            want = oracle.dim if oracle.dim is not None else f">= {oracle.min_dim}"
            raise DatasetError(field, "Dataset has the wrong shape",
                               f"oracle {spec.oracle.name} takes inputs of dimension {want}, the dataset's rows "
                               f"have {dim}")
        if shape[0] <= tests.validation_per_member:
            raise DatasetError(field, "Dataset too small", f"{shape[0]} rows leave none held out after "
                               f"validation_per_member={tests.validation_per_member}")
        if ALGORITHMS.get(spec.algorithm.name).extra.get("full_rank_members"):
            why = degenerate_member(load(m.dataset))
            if why:
                raise DatasetError(field, "Degenerate test member", why)
        if spec.domain is not None:  # the lab's points outside its own input domain
            try:
                member_in_domain(load(m.dataset), k, "dataset", spec.domain.build(), spec.domain.outside)
            except ValueError as exc:
                raise DatasetError(field, "Test samples outside the domain", str(exc).partition(": ")[2]) from None


@dataclass
class MetaTestSamples:
    members: list[np.ndarray]  # full (M_k, d) samples of each member
    weights: np.ndarray  # (K,), sums to 1
    n_validation: int

    @classmethod
    def from_spec(cls, spec, seed: int,
                  resolve: DatasetResolver = _no_datasets, domain=None) -> "MetaTestSamples":
        """Q's samples from ``spec`` (a :class:`TestDistributionsSpec`); with ``domain`` (a
        :class:`lwl.domain.DomainSpec`) every sample lies in it:
        drawn members are drawn restricted to it (``outside: "refuse"``) or drawn and clipped
        (``"clip"``), the user's points refused or clipped (:func:`check_member_domain`)."""
        members = []
        box = domain.build() if domain is not None else None
        for k, m in enumerate(spec.members):
            kind = _kind(m)
            entry = MEMBER_KINDS.get(kind)
            if box is not None and entry.extra.get("drawn") and domain.outside == "clip":
                # the regime as the spec describes it, its inputs outside D moved to D's nearest point
                # (the law lwl.measures.Clipped draws): as the user's own points are clipped
                x = box.clip(entry.build(getattr(m, kind), m.size, [seed, STREAM_Q, k], resolve))
            elif box is not None and entry.extra.get("drawn"):
                x = draw_in_domain(entry.build, getattr(m, kind), m.size, [seed, STREAM_Q, k], box, k)
            else:
                x = entry.build(getattr(m, kind), m.size, [seed, STREAM_Q, k], resolve)
            if kind == "dataset" and (x.ndim != 2 or not np.all(np.isfinite(x))):
                raise ValueError(f"test_distributions.members.{k}.dataset: expected a finite (M, d) array")
            if box is not None and not entry.extra.get("drawn"):
                if x.ndim != 2 or x.shape[1] != box.dim:
                    raise ValueError(f"test_distributions.members.{k}.{kind}: rows of dimension "
                                     f"{x.shape[-1]}, the domain bounds {box.dim} inputs")
                x = member_in_domain(x, k, kind, box, domain.outside)
            if x.shape[0] <= spec.validation_per_member:
                raise ValueError(f"test_distributions.members.{k}: {x.shape[0]} samples leave none held out")
            members.append(x)
        dims = {x.shape[1] for x in members}
        if len(dims) != 1:
            raise ValueError(f"test_distributions.members: dimensions differ: {sorted(dims)}")
        w = np.ones(len(members)) if spec.weights is None else np.asarray(spec.weights, dtype=np.float64)
        return cls(members, w / w.sum(), spec.validation_per_member)

    @property
    def dim(self) -> int:
        return self.members[0].shape[1]

    @property
    def validation(self) -> list[np.ndarray]:
        return [x[: self.n_validation] for x in self.members]

    @property
    def heldout(self) -> list[np.ndarray]:
        return [x[self.n_validation:] for x in self.members]

    def share_on_boundary(self, domain) -> float:
        """Q's share on the boundary of ``domain`` (a :class:`lwl.domain.Domain`): sum_k w_k times
        the share of member k's samples on it (``outside: "clip"`` moved them there, or they were
        taken at the instrument's limits)."""
        return float(sum(w * domain.on_boundary(x).mean() for x, w in zip(self.members, self.weights)))

    @staticmethod
    def point_weights(parts: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
        """Weights w_k / M_k of the stacked points, so sum_points a f = E_{Q} E_{nu'} f."""
        return np.concatenate([np.full(len(x), w / len(x)) for x, w in zip(parts, weights)])


# -- the job spec's test-distributions block ----------------------------------------------------


MAX_MEMBER_SIZE = 1_000_000


class GaussianMember(StrictModel):
    mean: list[float] = Field(min_length=1)
    cov: list[list[float]] = Field(min_length=1)

    @model_validator(mode="after")
    def _spd(self):
        check_spd(self.mean, self.cov)
        return self


class UniformMember(StrictModel):
    """The uniform law on the box [low, high] (per coordinate)."""
    low: list[float] = Field(min_length=1)
    high: list[float] = Field(min_length=1)

    @model_validator(mode="after")
    def _box(self):
        if len(self.low) != len(self.high):
            raise ValueError(f"high: {len(self.high)} bounds for {len(self.low)} lower bounds")
        if any(h <= lo for lo, h in zip(self.low, self.high)):
            raise ValueError("high: every upper bound must exceed its lower bound")
        return self


def _one_member_kind(schema: dict) -> None:
    """The JSON schema says what :meth:`MemberSpec._one_source` enforces: exactly one kind,
    given (not null), the others absent or null, and ``size`` with the kinds lwl draws from."""
    props = schema["properties"]
    branches = []
    kinds = member_kinds()
    for kind in kinds:
        given = next(s for s in props[kind]["anyOf"] if s.get("type") != "null")
        needs_size = kind in ("gaussian", "uniform", "lognormal")
        branches.append({"required": [kind, "size"] if needs_size else [kind],
                         "properties": {kind: given, **{k: {"type": "null"} for k in kinds if k != kind},
                                        **({"size": next(s for s in props["size"]["anyOf"] if s.get("type") != "null")}
                                           if needs_size else {})}})
    schema["oneOf"] = branches


class MemberSpec(StrictModel):
    """One test distribution nu'_k of Q, given by exactly one of: ``gaussian`` parameters
    (lwl draws ``size`` samples from the job's seed), ``kle`` parameters (closed-form W2 for
    AMA; ``size`` samples are drawn when the algorithm needs samples), ``lognormal`` (exp of a
    KLE Gaussian with these parameters, e.g. scattering or conductivity fields; ``size``
    samples), ``samples`` (an (M, d) array the user drew), or ``dataset`` (the id of an uploaded
    array, resolved by the service or the CLI)."""
    model_config = ConfigDict(json_schema_extra=_one_member_kind)

    gaussian: GaussianMember | None = None
    uniform: UniformMember | None = None
    kle: KLEParameters | None = None
    lognormal: KLEParameters | None = None
    samples: list[list[float]] | None = Field(default=None, min_length=1)
    dataset: str | None = None
    size: int | None = Field(default=None, ge=1, le=MAX_MEMBER_SIZE)

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in member_kinds() if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(member_kinds())} (got {given or 'none'})")
        for kle in (self.kle, self.lognormal):
            if kle is not None:
                kle.measure()  # parameter checks
        if self.lognormal is not None and self.size is None:
            raise ValueError("size: a lognormal member needs the number of samples to draw")
        for kind in ("gaussian", "uniform"):
            if getattr(self, kind) is not None and self.size is None:
                raise ValueError(f"size: a {kind} member needs the number of samples to draw")
        if self.samples is not None:
            check_rectangular(self.samples, "samples")
            if self.size is not None and self.size != len(self.samples):
                raise ValueError(f"size: {self.size} does not match the {len(self.samples)} rows of samples")
        return self

    @property
    def dim(self) -> int | None:
        if self.gaussian is not None:
            return len(self.gaussian.mean)
        if self.uniform is not None:
            return len(self.uniform.low)
        if self.kle is not None:
            return self.kle.dim
        if self.lognormal is not None:
            return self.lognormal.dim
        if self.samples is not None:
            return len(self.samples[0])
        return None  # a dataset's dimension is known once it is resolved

    @property
    def count(self) -> int | None:
        if self.samples is not None:
            return len(self.samples)
        return self.size


class TestDistributionsSpec(StrictModel):
    """The meta test distribution Q = sum_k w_k delta_{nu'_k}."""

    members: list[MemberSpec] = Field(min_length=1, max_length=1000)
    weights: list[float] | None = Field(default=None, min_length=1)
    validation_per_member: int = Field(default=500, ge=1)

    @model_validator(mode="after")
    def _consistent(self):
        if self.weights is not None:
            if len(self.weights) != len(self.members):
                raise ValueError(f"weights: {len(self.weights)} weights for {len(self.members)} members")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights: must be non-negative with a positive sum")
        dims = {m.dim for m in self.members if m.dim is not None}
        if len(dims) > 1:
            raise ValueError(f"members: all members must have the same dimension, got {sorted(dims)}")
        for k, m in enumerate(self.members):
            if m.count is not None and m.count <= self.validation_per_member:
                raise ValueError(
                    f"members.{k}: {m.count} samples leave none held out after validation_per_member="
                    f"{self.validation_per_member}")
        return self

    @property
    def dim(self) -> int | None:
        return next((m.dim for m in self.members if m.dim is not None), None)
