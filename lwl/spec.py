"""The job spec: one JSON document that runs the same design job through ``lwl run``,
``POST /v1/jobs`` and a Python call (:func:`lwl.run_job`).

Every model forbids unknown fields and non-finite numbers, and cross-field checks (dimensions,
positive definiteness, oracle input dimension) run before any work, so an invalid spec is
refused with the offending field named. ``docs/job-spec.md`` documents every field.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from lwl.q_samples import MEMBER_KINDS as SAMPLERS
from lwl.kernels import KERNELS
from lwl.registry import BASELINES


def _register_builtin_baselines() -> None:
    """Table 1's baselines (:mod:`lwl.evaluation.baselines`), registered by name before the
    evaluation block below reads their names."""
    module = "lwl.evaluation.baselines"
    for name, build, kind in (("normal", "normal", "distribution"), ("barycenter", "barycenter_baseline", "distribution"),
                              ("mixture", "mixture_baseline", "distribution"), ("uniform", "uniform_on", "distribution"),
                              ("ncoreset", "ncoreset_baseline", "pool"), ("acoreset", "acoreset", "pool")):
        if name not in BASELINES.names():
            BASELINES.register(name, None, f"{module}:{build}", kind=kind)


_register_builtin_baselines()

MAX_MEMBER_SIZE = 1_000_000
MAX_SEED = 2**53 - 1  # the largest integer every JSON parser reads exactly
DEFAULT_BASELINES = ("normal", "barycenter", "mixture")  # a bilevel job's verdict compares with these


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=False)


def _check_spd(mean: list[float], cov: list[list[float]], what: str = "cov", blame_mean: bool = True) -> None:
    """``cov`` is a symmetric positive definite d x d matrix for the d entries of ``mean``.
    A square covariance of another size names the mean when ``blame_mean`` (a lone Gaussian:
    the mean is the odd one out as often as the covariance, and its length is the simpler fix
    to see), the covariance otherwise (a mixture's means were checked against each other)."""
    d = len(mean)
    if d == 0:
        raise ValueError("mean: must have at least one entry")
    try:
        c = np.asarray(cov, dtype=np.float64)
    except ValueError:  # ragged rows
        raise ValueError(f"{what}: rows must all have the same length") from None
    if blame_mean and c.ndim == 2 and c.shape[0] == c.shape[1] and c.shape[0] != d:
        raise ValueError(f"mean: {d} entries, but {what} is a {c.shape[0]}x{c.shape[0]} matrix")
    if c.shape != (d, d):
        raise ValueError(f"{what}: expected a {d}x{d} matrix to match mean, got shape {c.shape}")
    if not np.allclose(c, c.T, rtol=1e-10, atol=1e-12):
        raise ValueError(f"{what}: must be symmetric")
    try:
        np.linalg.cholesky(c)
    except np.linalg.LinAlgError:
        raise ValueError(f"{what}: must be positive definite") from None


def _check_rectangular(rows: list[list[float]], what: str) -> int:
    if not rows:
        raise ValueError(f"{what}: must hold at least one row")
    widths = {len(r) for r in rows}
    if len(widths) != 1 or 0 in widths:
        raise ValueError(f"{what}: rows must all have the same, non-zero length (got lengths {sorted(widths)[:5]})")
    return widths.pop()


def _oracle_names(schema: dict) -> None:
    """The JSON schema's ``oracle.name`` lists the registered oracles (what the validator accepts)."""
    from lwl.oracles import oracle_names

    schema["properties"]["name"]["enum"] = oracle_names()


class OracleSpec(StrictModel):
    """The labelling oracle.

    Built-in functions (``sobol_g``, ``friedman1``, ``friedman2``, ``kernel_expansion``) take
    ``params``. ``external`` is ask/tell through the service (``batch_size`` inputs per batch,
    optional ``webhook_url`` announcing new queries); ``http`` posts batches to a lab's ``url``
    (``batch_size``; ``timeout_s``: the deadline of one call, the whole exchange, at most 600;
    ``attempts``: the job's budget of failed calls, at most 100).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra=_oracle_names)

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    batch_size: int | None = Field(default=None, ge=1, le=1_000_000)
    url: str | None = Field(default=None, max_length=2000)
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    attempts: int = Field(default=8, ge=1, le=100)
    webhook_url: str | None = Field(default=None, max_length=2000)
    _built: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _buildable(self):
        from lwl.oracles import make_oracle
        from lwl.oracles.http import URLNotAllowed, check_url

        if self.name in ("external", "http") and self.params:
            raise ValueError(f"params: the {self.name} oracle takes no params")
        if self.name != "http" and self.url is not None:
            raise ValueError("url: only the http oracle takes a url")
        if self.name != "external" and self.webhook_url is not None:
            raise ValueError("webhook_url: only the external oracle announces queries")
        if self.name == "http":
            if self.url is None:
                raise ValueError("url: the http oracle needs the lab's endpoint")
            try:
                check_url(self.url, resolve=False)  # the resolved address is checked at every call
            except URLNotAllowed as exc:
                raise ValueError(f"url: {exc}") from None
        if self.webhook_url is not None:
            try:
                check_url(self.webhook_url, resolve=False)
            except URLNotAllowed as exc:
                raise ValueError(f"webhook_url: {exc}") from None
        self._built = make_oracle(self.model_dump())  # raises "oracle.name: ..." / "oracle.params: ..."
        return self

    def __eq__(self, other: object) -> bool:  # the built oracle is a cache, not part of the value
        return isinstance(other, OracleSpec) and self.model_dump() == other.model_dump()

    def build(self):
        """The oracle, built once when the spec was validated (every check and the run share it)."""
        if self._built is None:
            from lwl.oracles import make_oracle

            self._built = make_oracle(self.model_dump())
        return self._built

    @property
    def is_external(self) -> bool:
        return self.name == "external"


class GaussianMember(StrictModel):
    mean: list[float] = Field(min_length=1)
    cov: list[list[float]] = Field(min_length=1)

    @model_validator(mode="after")
    def _spd(self):
        _check_spd(self.mean, self.cov)
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


class KLEParameters(StrictModel):
    """A Matern-like KLE Gaussian on grid functions (:class:`lwl.measures.KLEGaussian`):
    sqrt(lambda_j) = sigma (c j^2 + tau^2)^(-alpha/2) on the sine basis of [0, 1] (``sine1d``),
    of (0, 1)^2 (``sine2d``) or the Fourier basis of [0, 2 pi) (``fourier``); mean
    shift + amplitude sin(omega (x - 1/2)); ``endpoints`` puts the sine grid's nodes on the
    boundary (Darcy)."""

    basis: Literal["sine1d", "sine2d", "fourier"] = "sine1d"
    grid: int = Field(ge=2, le=16384)
    modes: int | None = Field(default=None, ge=1)
    alpha: float = Field(default=2.0, gt=0)
    tau: float = Field(default=3.0, ge=0)
    sigma: float = Field(default=1.0, ge=0)
    shift: float = 0.0
    amplitude: float = 0.0
    omega: float = 0.0
    endpoints: bool = False

    def measure(self):
        from lwl.measures import KLEGaussian

        try:
            return KLEGaussian(**self.model_dump(include=set(KLEParameters.model_fields)))
        except ValueError as exc:
            raise ValueError(str(exc)) from None

    @property
    def dim(self) -> int:
        return self.grid**2 if self.basis == "sine2d" else self.grid


def _one_member_kind(schema: dict) -> None:
    """The JSON schema says what :meth:`MemberSpec._one_source` enforces: exactly one kind,
    given (not null), the others absent or null, and ``size`` with the kinds lwl draws from."""
    props = schema["properties"]
    branches = []
    kinds = SAMPLERS.names()
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
        given = [k for k in SAMPLERS.names() if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(SAMPLERS.names())} (got {given or 'none'})")
        for kle in (self.kle, self.lognormal):
            if kle is not None:
                kle.measure()  # parameter checks
        if self.lognormal is not None and self.size is None:
            raise ValueError("size: a lognormal member needs the number of samples to draw")
        for kind in ("gaussian", "uniform"):
            if getattr(self, kind) is not None and self.size is None:
                raise ValueError(f"size: a {kind} member needs the number of samples to draw")
        if self.samples is not None:
            _check_rectangular(self.samples, "samples")
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


class InitialDataSpec(StrictModel):
    """Inputs and labels a lab already has (a budgeted job's free labels, kept in its training set):
    ``inputs`` an (n, d) array, ``labels`` (n,) or (n, 1)."""

    inputs: list[list[float]] = Field(min_length=1, description="(n, d) inputs already labelled")
    labels: list[float] | list[list[float]] = Field(
        min_length=1, description="their labels: (n,) or (n, 1) (the budgeted design takes one label per input)")

    @model_validator(mode="after")
    def _shapes(self):
        import numpy as np

        _check_rectangular(self.inputs, "inputs")
        if not np.all(np.isfinite(np.asarray(self.inputs, dtype=np.float64))):
            raise ValueError("inputs: values must be finite")
        if isinstance(self.labels[0], list):
            width = _check_rectangular(self.labels, "labels")
            if width != 1:
                raise ValueError(f"labels: the budgeted design takes one label per input, got {width} per row")
        if not np.all(np.isfinite(np.asarray(self.labels, dtype=np.float64))):
            raise ValueError("labels: values must be finite (a failed measurement is no initial data)")
        if len(self.labels) != len(self.inputs):
            raise ValueError(f"labels: {len(self.labels)} labels for {len(self.inputs)} inputs")
        return self

    def arrays(self):
        import numpy as np

        return (np.asarray(self.inputs, dtype=np.float64),
                np.asarray(self.labels, dtype=np.float64).reshape(len(self.inputs)))


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


class DomainSpec(StrictModel):
    """The instrument's input domain D = {x : low <= x <= high, A x <= b} (lwl.domain): every
    input the job hands out (design batches, ask/tell batches, training sets, the evaluation's
    training draws, ``/samples``) lies in D. The designed distribution is the family restricted
    to D (docs/method.md "Input domains"). Test samples the user gives (``samples``,
    ``dataset``) outside D are refused, or moved to the nearest point of D with ``outside: "clip"``;
    members lwl draws (``gaussian``, ``uniform``, ...) are drawn restricted to D, and refused
    when more than 1% of their mass lies outside unless ``outside`` is ``"clip"``."""

    low: list[float] = Field(min_length=1, description="lower bound of each input")
    high: list[float] = Field(min_length=1, description="upper bound of each input (> low)")
    A: list[list[float]] | None = Field(default=None, min_length=1, max_length=10_000,
                                        description="linear constraints A x <= b (rows of length d), with b")
    b: list[float] | None = Field(default=None, min_length=1, max_length=10_000)
    outside: Literal["refuse", "clip"] = Field(
        default="refuse", description="test samples outside the domain: refused (422 naming the member) or "
                                      "clipped: moved to the nearest point of the domain")

    @model_validator(mode="after")
    def _domain(self):
        from lwl.domain import Domain

        if self.A is not None:
            _check_rectangular(self.A, "A")
        domain = Domain(self.low, self.high, self.A, self.b)  # raises "high: ..." / "A: ..." / "b: ..."
        if domain.interior_radius() <= 0:
            raise ValueError("b: the constraints A x <= b leave no interior point in the box [low, high]")
        return self

    @property
    def dim(self) -> int:
        return len(self.low)

    def build(self):
        from lwl.domain import Domain

        return Domain(self.low, self.high, self.A, self.b)


class GaussianFamilySpec(StrictModel):
    """nu_theta = N(m, LL^T) with theta^0 = (mean, chol(cov)); ``free`` lists what moves.

    A missing ``mean`` or ``cov`` is taken from Q's moment-matched Gaussian (the weighted mean
    and covariance of Q's validation samples) when the job starts; the result's ``spec`` holds
    the values used."""

    name: Literal["gaussian"] = "gaussian"
    dim_field: ClassVar[str] = "mean"  # the field that fixes the dimension (for error messages)
    mean: list[float] | None = Field(default=None, min_length=1, description="default: the mean of Q's validation samples")
    cov: list[list[float]] | None = Field(default=None, min_length=1,
                                          description="default: the covariance of Q's validation samples")
    free: list[Literal["mean", "cov"]] = Field(default_factory=lambda: ["mean", "cov"])

    @model_validator(mode="after")
    def _spd(self):
        if self.mean is not None and self.cov is not None:
            _check_spd(self.mean, self.cov)
        elif self.mean is not None and len(self.mean) == 0:
            raise ValueError("mean: must have at least one entry")
        elif self.cov is not None:
            _check_spd([0.0] * len(self.cov), self.cov)
        return self

    @property
    def dim(self) -> int | None:
        if self.mean is not None:
            return len(self.mean)
        return len(self.cov) if self.cov is not None else None


class MixtureFamilySpec(StrictModel):
    """nu_theta = sum_k w_k N(m_k, C_k), moved by the bilevel method (adaptive optimiser).

    Missing ``weights``/``means``/``covs`` are fitted to Q's validation samples when the job
    starts (:func:`lwl.design.families.mixture.initial_components`): one component per member
    of Q (``init: "members"``, the ``mixture`` baseline) or ``components`` k-means clusters
    (``"kmeans"``); by default members when ``components`` equals Q's member count (the default
    count is min(K, 16)), k-means otherwise. The result's ``spec`` holds the values used."""

    name: Literal["mixture"] = "mixture"
    dim_field: ClassVar[str] = "means"  # the field that fixes the dimension (for error messages)
    components: int | None = Field(default=None, ge=1, le=64, description="default: min(K, 16)")
    init: Literal["members", "kmeans"] | None = Field(
        default=None, description="default: members when components equals Q's member count, else kmeans")
    weights: list[float] | None = Field(default=None, min_length=1)
    means: list[list[float]] | None = Field(default=None, min_length=1)
    covs: list[list[list[float]]] | None = Field(default=None, min_length=1)
    free: list[Literal["weights", "means", "covs"]] = Field(
        default_factory=lambda: ["weights", "means", "covs"], min_length=1)

    @model_validator(mode="after")
    def _components(self):
        given = [k for k in ("weights", "means", "covs") if getattr(self, k) is not None]
        if given and len(given) != 3:
            missing = sorted({"weights", "means", "covs"} - set(given))
            raise ValueError(f"{missing[0]}: give weights, means and covs together (or none)")
        if given:
            C = len(self.means)
            if C == 0:
                raise ValueError("means: at least one component")
            for k in ("weights", "covs"):
                if len(getattr(self, k)) != C:
                    raise ValueError(f"{k}: {len(getattr(self, k))} entries for {C} means")
            if self.components is not None and self.components != C:
                raise ValueError(f"components: {self.components} does not match the {C} means")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights: must be non-negative with a positive sum")
            if any(w == 0 for w in self.weights):
                raise ValueError("weights: every component needs a positive weight (drop the others)")
            d = len(self.means[0])
            for k, (m, c) in enumerate(zip(self.means, self.covs)):
                if len(m) != d:
                    raise ValueError(f"means.{k}: dimension {len(m)}, expected {d}")
                try:
                    _check_spd(m, c, blame_mean=False)
                except ValueError as exc:
                    raise ValueError(f"covs.{k}: {str(exc).partition(': ')[2]}") from None
        return self

    @property
    def dim(self) -> int | None:
        return len(self.means[0]) if self.means else None


class AutoFamilySpec(MixtureFamilySpec):
    """The default when a spec names no family: the Gaussian family and the mixture family
    compete on Q's validation samples, with Q's own mixture as a candidate.

    theta^0 is Q's mixture (one Gaussian per member of Q, or ``components`` k-means clusters,
    as for ``mixture``); the start points checked at iteration 0 are Q's mixture, Q's
    moment-matched Gaussian and both broadened by ``algorithm.broaden``; the descent goes on
    from the best, and a result that does not beat Q's mixture beyond noise on validation is
    Q's mixture itself (lwl.design.families.auto). The result's ``selected.family`` says which
    won. Name ``gaussian`` or ``mixture`` to keep one family."""

    name: Literal["auto"] = "auto"


class PoolFamilySpec(StrictModel):
    """nu_theta = sum_p w_p N(x_p, h^2 C_Q) over a pool {x_p} of Q's validation points (all of
    them, or ``pool_size`` drawn with probabilities w_k / M_k), C_Q Q's covariance; the bilevel
    method moves the weights and the bandwidth h (adaptive optimiser). Initially Q's kernel
    density estimate: the points' own weights and Scott's bandwidth P^(-1/(d+4)). A
    differentiable coreset (lwl.design.families.pool)."""

    name: Literal["pool"] = "pool"
    dim_field: ClassVar[str] = "name"
    pool_size: int = Field(default=1000, ge=2, le=20_000)
    bandwidth: float | None = Field(default=None, gt=0, le=3, description="h in standard deviations of Q; "
                                    "default: Scott's rule P^(-1/(d+4))")
    pool_seed: int | None = Field(default=None, ge=0, le=MAX_SEED, description="default: the job's seed")
    free: list[Literal["weights", "bandwidth"]] = Field(default_factory=lambda: ["weights", "bandwidth"],
                                                        min_length=1)


class KLEFamilySpec(KLEParameters):
    """nu_theta = a KLE Gaussian (AMA); ``free`` names the parameters that move, ``bounds``
    their box (required by differential evolution)."""
    name: Literal["kle"] = "kle"
    dim_field: ClassVar[str] = "grid"
    free: list[Literal["shift", "omega", "amplitude", "alpha", "tau", "sigma"]] = Field(min_length=1)
    bounds: dict[str, Annotated[list[float], Field(min_length=2, max_length=2)]] = Field(
        default_factory=dict, description="[lower, upper] per free parameter")

    @model_validator(mode="after")
    def _bounds(self):
        for p, (lo, hi) in self.bounds.items():
            if p not in self.free:
                raise ValueError(f"bounds.{p}: not a free parameter")
            if not lo < hi:
                raise ValueError(f"bounds.{p}: lower bound must be below the upper bound")
            if not lo <= getattr(self, p) <= hi:
                raise ValueError(f"bounds.{p}: the initial value {getattr(self, p)} lies outside [{lo}, {hi}]")
        self.measure()
        return self

    def kle_parameters(self) -> KLEParameters:
        return KLEParameters(**self.model_dump(exclude={"name", "free", "bounds"}))


class ParticlesFamilySpec(StrictModel):
    """N particles a_q = exp(L c_q) on the closed grid x grid nodes of [0, 1]^2, (L c)(x, y) =
    sum_ij c_ij 2 sin(i pi x) sin(j pi y) with ``modes`` x ``modes`` coefficients, initially
    c ~ N(0, init_std^2) (paper SM RTE: 20 x 20 coefficients, N = 120, c ~ N(0, 1e-6)). Moved by
    ``particle_ama``; the result is the particles' empirical measure (family "particles")."""
    name: Literal["particles"] = "particles"
    dim_field: ClassVar[str] = "grid"  # the field that fixes the dimension (for error messages)
    grid: int = Field(ge=3, le=1024, description="nodes per side, boundary included (the oracle's grid)")
    modes: int = Field(default=20, ge=1, le=256)
    particles: int = Field(default=120, ge=2, le=100_000)
    init_std: float = Field(default=1e-3, ge=0, le=10)

    @property
    def dim(self) -> int:
        return self.grid**2


class IntervalFamilySpec(StrictModel):
    """U[l, l + width] for a scalar design variable (EIT: the Dirichlet data's frequency omega),
    the position l free in [range[0], range[1] - width]. Moved by ``interval_search``."""
    name: Literal["interval"] = "interval"
    dim_field: ClassVar[str] = "name"
    width: float = Field(gt=0, description="the interval's fixed width (the paper's EIT laws: pi / 2)")
    range: Annotated[list[float], Field(min_length=2, max_length=2)] = Field(
        description="[lower, upper]: where the interval may lie (the paper's EIT: [pi / 2, 7 pi])")

    @model_validator(mode="after")
    def _fits(self):
        lo, hi = self.range
        if not hi > lo:
            raise ValueError("range: the upper end must exceed the lower end")
        if self.width > hi - lo:
            raise ValueError(f"width: {self.width} is wider than the range [{lo}, {hi}]")
        return self

    @property
    def dim(self) -> int:
        return 1


class AMINOSpec(StrictModel):
    """AMINO (paper SM AMINO; lwl.models.amino): convolutional branch on each Dirichlet-Neumann
    pair, averaged over the pairs, trunk MLP, one Fourier layer; AdamW. The defaults are a reduced
    model that trains on a CPU in about a minute per candidate at grid 24; the paper's sizes are
    channels [64, 128, 128, 256, 256, 512, 512, 512], trunk 8 x 512, latent 100, FNO 128 x 32 modes,
    500 epochs."""
    name: Literal["amino"] = "amino"
    channels: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [16, 32, 32, 64, 64, 128, 128, 128], min_length=8, max_length=8)
    trunk_layers: int = Field(default=4, ge=1, le=32)
    trunk_width: int = Field(default=128, ge=1, le=4096)
    latent: int = Field(default=64, ge=1, le=4096)
    fno_channels: int = Field(default=32, ge=1, le=1024)
    fno_modes: int = Field(default=12, ge=1, le=256)
    epochs: int = Field(default=40, ge=1, le=100_000)
    batch_size: int = Field(default=16, ge=1, le=100_000)
    learning_rate: float = Field(default=1e-3, gt=0)
    precision: Literal["float32", "tf32"] = Field(
        default="float32", description="float32 matrix products, or TF32 tensor-core products on NVIDIA GPUs "
                                       "(about 6x faster for AMINO on an H100; no effect on a CPU)")


class DeepONetSpec(StrictModel):
    """DeepONet (SM DeepONet): ReLU branch and trunk MLPs with the given hidden widths plus a
    common last width ``latent``; Adam with ``learning_rate``, ``iterations`` full-batch steps per
    model step."""
    name: Literal["deeponet"] = "deeponet"
    branch: list[int] = Field(default_factory=lambda: [512, 512, 512], max_length=16)
    trunk: list[int] = Field(default_factory=lambda: [128, 128, 128], max_length=16)
    latent: int = Field(default=200, ge=1, le=65536)
    learning_rate: float = Field(default=1e-3, gt=0)
    iterations: int = Field(default=2000, ge=1, le=10_000_000)
    precision: Literal["float32", "tf32"] = Field(
        default="float32", description="float32 matrix products, or TF32 tensor-core products on NVIDIA GPUs "
                                       "(about 6x faster for AMINO on an H100; no effect on a CPU)")

    @field_validator("branch", "trunk")
    @classmethod
    def _widths(cls, v: list[int]) -> list[int]:
        if any(w < 1 or w > 65536 for w in v):
            raise ValueError("every width must lie in 1..65536")
        return v


class KRRSpec(StrictModel):
    """Kernel ridge regression, k(x,x') = exp(-||x-x'||^2 / lengthscale^2) (the paper's
    convention) or the Laplace kernel exp(-||x-x'||_1 / lengthscale)."""

    name: Literal["krr"] = "krr"
    kernel: Literal[tuple(KERNELS.names())] = "squared_exponential"
    lengthscale: float | None = Field(
        default=None, gt=0, description="default: selected by validation from the median distance between Q's "
                                          "validation samples (a bilevel job chooses it with the design)")


class BilevelSpec(StrictModel):
    """Bilevel gradient descent (paper Alg. 3) with a cosine-annealed nugget.

    ``optimizer="adaptive"`` (the default) needs no step size: Adam in Q's whitened coordinates,
    ``step`` being the step length in standard deviations of Q (cosine-annealed to
    ``final_step``), with a guarded gradient and a parameter box (docs/method.md).
    ``optimizer="paper"`` is the paper's plain step theta <- theta - t_k grad with t_k cosine
    from ``learning_rate`` to ``final_learning_rate``; ``gradient_scale="relative"`` divides that
    gradient by E_Q(0) (descends 1/2 Err^2); the paper's setting is "absolute".

    Every ``check_every`` iterations (and after the last) the iterate is scored on Q's validation
    samples by KRR trained on ``check_samples`` points drawn with one fixed seed (default: the
    evaluation's train_size, at most 2048), with the evaluation's ridge. ``keep="best"`` returns
    the best checked iterate; the adaptive optimiser also returns to it and halves its step after
    ``patience`` checks without progress and stops after ``max_halvings`` halvings.
    """

    name: Literal["bilevel"] = "bilevel"
    iterations: int = Field(default=1000, ge=1, le=1_000_000)
    samples_per_iteration: int | None = Field(
        default=None, ge=2, le=100_000,
        description="N_k; default: the evaluation's train_size (design for the N you will train with)")
    optimizer: Literal["adaptive", "paper"] = "adaptive"
    step: float = Field(default=0.05, gt=0, le=10, description="adaptive: Adam step in standard deviations of Q")
    final_step: float = Field(default=0.0, ge=0, le=10, description="adaptive: step at the last iteration")
    learning_rate: float = Field(default=1e-2, gt=0, description="paper: t_0")
    final_learning_rate: float = Field(default=0.0, ge=0, description="paper: t at the last iteration")
    nugget: float = Field(default=1e-3, gt=0, description="sigma^2 at the first iteration")
    final_nugget: float = Field(default=1e-7, gt=0, description="sigma^2 at the last iteration")
    gradient_scale: Literal["absolute", "relative"] = Field(
        default="absolute", description="paper: raw gradient of 1/2 E_Q or of 1/2 Err^2 (adaptive is scale-free)")
    check_every: int = Field(default=25, ge=1, le=1_000_000)
    check_samples: int | None = Field(default=None, ge=2, le=100_000)
    keep: Literal["best", "last"] = "best"
    starts: Literal["given", "moment_matched"] = Field(
        default="moment_matched",
        description="adaptive: also check Q's moment-matched Gaussian at iteration 0 and start from the better")
    broaden: list[Annotated[float, Field(gt=1.0, le=100.0)]] = Field(
        default_factory=lambda: [1.5, 2.0, 3.0, 4.0], max_length=8,
        description="adaptive with starts=moment_matched: also check the first start point (Q's fit) with its "
                    "covariance scaled by each factor at iteration 0 (regression learns Q best from a broader "
                    "design); [] for none")
    significance: float = Field(
        default=2.0, ge=0.0, le=100.0,
        description="keep=best: the kept iterate must beat the given initial distribution by this many standard "
                    "errors of the paired validation difference, else the best check that does (or the initial "
                    "one) is returned (0: off)")
    start_significance: float = Field(
        default=1.645, ge=0.0, le=100.0,
        description="keep=best: the same for the start points checked at iteration 0 (a few candidates fixed in "
                    "advance, so a one-sided 5% test; never above significance)")
    patience: int = Field(default=2, ge=1, le=1000)
    max_halvings: int = Field(default=6, ge=0, le=60)
    # a job with a ``budget`` runs the budgeted design (lwl.design.budgeted, docs/method.md
    # "Designs for a label budget"); these four fields are read by it only
    round_size: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="budgeted jobs: labels bought per design round; default budget/16 within [64, 256], raised "
                    "so that the rounds fit max_rounds")
    max_rounds: int = Field(default=30, ge=2, le=10_000,
                            description="budgeted jobs: most labelling rounds, the validation round included")
    validation_fraction: float = Field(
        default=0.25, gt=0.0, lt=1.0,
        description="budgeted jobs: share of the budget spent on labels of Q's validation samples (at most "
                    "validation_per_member per member; they are also training data)")
    hedge: float = Field(default=0.25, ge=0.0, lt=1.0,
                         description="budgeted jobs: share of each round after selection drawn from Q's mixture "
                                     "while it races the selected candidate at equal numbers of points (0: off; "
                                     "see docs/method.md)")
    inner_steps: int = Field(default=0, ge=0, le=100_000,
                             description="budgeted jobs: bilevel steps on a surrogate of G* between two rounds, "
                                         "whose result competes for the next round's labels (0: off; see "
                                         "docs/method.md)")


class AMASpec(StrictModel):
    """Alternating minimisation of the OOD upper bound (paper Alg. 2; see lwl.design.ama)."""
    name: Literal["ama"] = "ama"
    iterations: int = Field(default=10, ge=1, le=10_000)
    samples_per_iteration: int = Field(default=500, ge=2, le=1_000_000, description="training samples per model step")
    optimization_samples: int = Field(default=500, ge=1, le=1_000_000,
                                      description="fixed samples for the training-error term of the distribution step")
    optimizer: Literal["differential_evolution", "adam", "lbfgsb"] = "differential_evolution"
    learning_rate: float = Field(default=1e-3, gt=0, description="adam")
    steps: int = Field(default=500, ge=1, le=1_000_000, description="adam steps per round")
    rounds: int = Field(default=3, ge=1, le=1000, description="adam rounds until the bound falls")
    tol: float = Field(default=1e-7, gt=0)
    maxiter: int = Field(default=1000, ge=1, le=1_000_000, description="differential evolution / L-BFGS-B")
    model_rounds: int = Field(default=1, ge=1, le=1000, description="training rounds until the bound falls")
    lipschitz_oracle: float | None = Field(default=None, gt=0, description="Lip(G*); estimated when omitted")
    lipschitz_model: float | None = Field(default=None, gt=0, description="R; estimated when omitted")
    lipschitz_pairs: int = Field(default=250, ge=1, le=100_000)
    lipschitz_candidates: int = Field(default=11, ge=1, le=1000)
    select: Literal["bound", "validation"] = Field(
        default="validation", description="validation (lwl's default): Q's validation samples accept steps and "
                                          "select the returned iterate (lwl.design.validated); bound: the paper's "
                                          "AMA (steps accepted when the bound falls, the last iterate returned)")
    backtracks: int = Field(default=2, ge=0, le=50, description="validation: halvings back towards the kept "
                                                                "distribution before the design stops")


class ParticleAMASpec(StrictModel):
    """Particle AMA (paper Alg. 2 in particle form, Cor. "Wasserstein gradient", SM RTE): train
    the DeepONet on the particles, then move them by c <- c - step_size N grad_c F of the upper
    bound F (exact OT to the members' validation samples, the oracle's adjoint for the data
    term). A step that does not lower F halves step_size, which stays reduced; stop when the step
    norm falls below ``tol``. Needs an oracle with an adjoint solver (``rte``).
    lwl's default step_size is 0.01 (the paper's 1e-6 does not move the particles under lwl's
    L^2-normalised bound; docs/method.md)."""
    name: Literal["particle_ama"] = "particle_ama"
    iterations: int = Field(default=10, ge=1, le=10_000)
    step_size: float = Field(default=0.01, gt=0)
    tol: float = Field(default=1e-6, gt=0)
    max_halvings: int = Field(default=30, ge=0, le=200)
    max_field: float = Field(default=1e6, gt=0, description="a step taking a field above this has failed")
    lipschitz_oracle: float | None = Field(default=None, gt=0, description="Lip(G*); estimated when omitted")
    lipschitz_model: float | None = Field(default=None, gt=0, description="R; estimated when omitted")
    select: Literal["bound", "validation"] = Field(
        default="validation", description="validation (lwl's default): Q's validation samples accept steps and "
                                          "select the returned particles (lwl.design.validated); bound: the "
                                          "paper's (the last iterate)")
    backtracks: int = Field(default=2, ge=0, le=50)


class IntervalSearchSpec(StrictModel):
    """Validation-driven search for the position of an interval family (lwl.design.interval_search):
    a grid of ``candidates`` positions, then ``refine`` rounds of midpoints around the best; each
    candidate trains the model on ``samples_per_candidate`` conductivities with ``pairs`` boundary
    data each and is scored by its relative L^1 error on ``validation_samples`` conductivities
    whose frequencies come from Q's validation samples. Needs the ``eit`` oracle and ``amino``."""
    name: Literal["interval_search"] = "interval_search"
    candidates: int = Field(default=13, ge=2, le=1000)
    refine: int = Field(default=1, ge=0, le=20)
    pairs: int = Field(default=16, ge=1, le=10_000, description="L: boundary data pairs per conductivity")
    samples_per_candidate: int = Field(default=256, ge=2, le=1_000_000)
    validation_samples: int = Field(default=64, ge=1, le=1_000_000)

    @property
    def iterations(self) -> int:
        """At most this many candidates are trained (the progress total; the validation labels
        before them are no iteration)."""
        return self.candidates + 2 * self.refine


class EvaluationSpec(StrictModel):
    """Err of the final distribution and of baselines on the held-out Q samples: a KRR model
    is trained on ``train_size`` labelled samples with ridge N sigma^2 = ``ridge``."""

    enabled: bool | None = Field(default=None, description="default: on, except for external (ask/tell) oracles")
    train_size: int = Field(default=1024, ge=1, le=100_000)
    ridge: float = Field(default=1e-3, gt=0)
    baselines: list[Literal[tuple(BASELINES.names())]] | None = Field(
        default=None, description="default: normal, barycenter and mixture for bilevel jobs, none otherwise")
    sizes: list[int] = Field(default_factory=list, description="extra N for an Err-vs-N curve")
    draws: int = Field(default=5, ge=1, le=100,
                       description="training sets drawn per candidate: the verdict compares held-out Err over "
                                   "all of them (paired by draw index, common random numbers), with an interval "
                                   "that covers the training draw and the held-out points (lwl.evaluation.comparison)")
    bound: bool = Field(default=True, description="bilevel: also report the paper's OOD upper bound (Prop. 3.1 / "
                                                  "Cor. 3.2) of the design's model, with which constants are exact "
                                                  "(lwl.bound); costs about 2,500 oracle labels")

    @field_validator("sizes")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(n < 1 for n in v):
            raise ValueError("every size must be >= 1")
        return sorted(set(v))


class JobSpec(StrictModel):
    """A design job: oracle, meta test distribution Q, family, model, algorithm, seed."""

    # family, model and algorithm accept any entry of lwl.registry's FAMILIES, MODELS and
    # ALGORITHMS: the annotations below are replaced by the registered unions
    # (_rebuild_job_spec); the algorithm's compatibility check runs last (_algorithm_parts)

    oracle: OracleSpec
    test_distributions: TestDistributionsSpec
    domain: DomainSpec | None = Field(
        default=None, description="the instrument's input domain: box bounds low/high per input and optional "
                                  "linear constraints A x <= b; every input the job hands out lies inside")
    family: AutoFamilySpec = Field(default_factory=AutoFamilySpec, discriminator="name")
    model: KRRSpec = Field(default_factory=KRRSpec, discriminator="name")
    algorithm: BilevelSpec = Field(default_factory=BilevelSpec, discriminator="name")
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

    @field_validator("domain")
    @classmethod
    def _domain_dim(cls, domain, info: ValidationInfo):
        tests = info.data.get("test_distributions")
        d = tests.dim if tests is not None else None
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
        tests = info.data.get("test_distributions")
        d = tests.dim if tests is not None else None
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
        if tests is not None and any(BASELINES.get(b).extra["kind"] == "pool" for b in ev.baselines or ()):
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
            _check_initial_data(self)
        if self.budget is not None:
            _check_budget(self, entry)
        return self

    @property
    def dim(self) -> int | None:
        """The family's dimension when its parameters fix one (else None: Q's members fix it)."""
        return getattr(self.family, "dim", None)


# -- compatibility checks of the built-in algorithms (lwl.registry entries) ------------------------
def _kle_member_sizes(spec: JobSpec) -> None:
    for k, m in enumerate(spec.test_distributions.members):
        if m.kle is not None and m.size is None:
            raise ValueError(f"test_distributions.members.{k}.size: a kle member needs the number of "
                             "samples to draw")


def _operator_parts(spec: JobSpec, family: str, family_what: str, oracle_need: str) -> None:
    """An AMA-type job: the family it moves, a DeepONet, and an oracle it can call inside a step."""
    name = spec.algorithm.name
    if spec.family.name != family:
        raise ValueError(f"family.name: {name} moves a {family_what} family ({family!r})")
    if spec.model.name != "deeponet":
        raise ValueError(f"model.name: {name} trains a DeepONet ('deeponet')")
    if spec.oracle.is_external:
        raise ValueError(f"oracle.name: {name} labels inside its steps and needs {oracle_need}, not ask/tell")


def _check_bilevel(spec: JobSpec) -> None:
    """Bilevel: a family with a bilevel builder (``bilevel`` in its registry entry), a krr
    model; N_k defaults to the evaluation's train_size."""
    from lwl.registry import FAMILIES

    if spec.algorithm.samples_per_iteration is None:
        spec.algorithm.samples_per_iteration = spec.evaluation.train_size
    movable = [e.name for e in FAMILIES.entries() if "bilevel" in e.extra]
    if spec.family.name not in movable:
        moved_by = FAMILIES.get(spec.family.name).extra.get("moved_by")
        raise ValueError(f"algorithm.name: a {spec.family.name} family is moved by {moved_by}" if moved_by else
                         f"algorithm.name: bilevel needs a family among {movable} and a krr model")
    if spec.model.name != "krr":
        raise ValueError(f"algorithm.name: bilevel needs a family among {movable} and a krr model")
    if spec.algorithm.optimizer == "paper" and not FAMILIES.get(spec.family.name).extra.get("paper_optimizer"):
        raise ValueError("algorithm.optimizer: the paper's plain step is defined for the gaussian family; "
                         "use the adaptive optimiser")
    _kle_member_sizes(spec)
    from lwl.q_samples import degenerate_member

    for k, m in enumerate(spec.test_distributions.members):
        if m.samples is not None:
            why = degenerate_member(np.asarray(m.samples, dtype=np.float64))
            if why:
                raise ValueError(f"test_distributions.members.{k}.samples: {why}")


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
    from lwl.measures.truncated import MIN_DESIGN_SHARE
    from lwl.measures import Gaussian, Mixture
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


def _check_initial_data(spec: JobSpec) -> None:
    """Initial data: a budgeted job's, with inputs of the job's input dimension."""
    if spec.budget is None:
        raise ValueError("initial_data: only jobs with a label budget (budget) take initial data")
    d = spec.test_distributions.dim
    if d is None:
        d = spec.dim
    width = len(spec.initial_data.inputs[0])
    if d is not None and width != d:
        raise ValueError(f"initial_data.inputs: rows of {width} inputs, the job's inputs have dimension {d}")


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


def _algorithms():
    from lwl.registry import ALGORITHMS

    return ALGORITHMS


def _check_ama(spec: JobSpec) -> None:
    """AMA: a KLE family, a DeepONet, KLE members matching the family's basis, a synchronous
    oracle with an output grid, bounds for differential evolution."""
    if spec.family.name == "particles":
        raise ValueError("algorithm.name: a particles family is moved by particle_ama")
    _operator_parts(spec, "kle", "KLE", "a synchronous oracle (built-in or http)")
    fam = spec.family.kle_parameters().model_dump(include={"basis", "grid", "modes", "endpoints"})
    for k, m in enumerate(spec.test_distributions.members):
        if m.kle is None:
            raise ValueError(f"test_distributions.members.{k}: ama needs KLE members ('kle') for the "
                             "closed-form W2")
        if m.kle.model_dump(include=set(fam)) != fam:
            raise ValueError(f"test_distributions.members.{k}.kle: basis, grid, modes and endpoints must "
                             "match the family's")
    if spec.algorithm.optimizer == "differential_evolution" and set(spec.family.bounds) != set(spec.family.free):
        raise ValueError("family.bounds: differential evolution needs bounds for every free parameter")
    try:
        spec.oracle.build().output_grid(spec.family.dim)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


def _check_particle_ama(spec: JobSpec) -> None:
    """Particle AMA: a particles family on the oracle's grid, a DeepONet, an oracle with an
    adjoint solver (rte), members whose grids include the boundary."""
    _operator_parts(spec, "particles", "particles", "the oracle's adjoint: a built-in solver (rte)")
    oracle = spec.oracle.build()
    if not hasattr(oracle, "solver"):
        raise ValueError(f"oracle.name: particle_ama needs an oracle with an adjoint solver (rte), "
                         f"not {spec.oracle.name}")
    if oracle.grid != spec.family.grid:
        raise ValueError(f"family.grid: {spec.family.grid} does not match the oracle's grid {oracle.grid}")
    if spec.family.modes > spec.family.grid - 2:
        raise ValueError(f"family.modes: at most grid - 2 = {spec.family.grid - 2} sine modes per axis "
                         "on this grid")
    if any(m.kle is not None and not m.kle.endpoints or m.lognormal is not None and not m.lognormal.endpoints
           for m in spec.test_distributions.members):
        raise ValueError("test_distributions.members: kle and lognormal members of a particles job need "
                         "endpoints: true (the oracle's nodes include the boundary)")
    _kle_member_sizes(spec)


def _check_interval_search(spec: JobSpec) -> None:
    """Interval search: an interval family, AMINO, the eit oracle, scalar members of Q."""
    if spec.family.name != "interval":
        raise ValueError("family.name: interval_search moves an interval family ('interval')")
    if spec.model.name != "amino":
        raise ValueError("model.name: interval_search trains AMINO ('amino')")
    if spec.oracle.name != "eit":
        raise ValueError("oracle.name: interval_search designs the Dirichlet data of the eit oracle")
    if spec.evaluation.baselines:
        raise ValueError("evaluation.baselines: interval_search has no baselines (set [])")
    if spec.algorithm.samples_per_candidate < spec.model.batch_size:
        raise ValueError("algorithm.samples_per_candidate: fewer samples than one batch of the model")


def _rebuild_job_spec() -> None:
    """Re-derive JobSpec's tagged unions from the registries (called when an entry is added)."""
    from typing import Union

    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    changed = False
    accepted = list[Literal[tuple(BASELINES.names())]] | None  # a plugin's baseline too
    if EvaluationSpec.model_fields["baselines"].annotation != accepted:
        EvaluationSpec.model_fields["baselines"].annotation = accepted
        EvaluationSpec.model_rebuild(force=True)
        changed = True
    for field, registry in (("family", FAMILIES), ("model", MODELS), ("algorithm", ALGORITHMS)):
        models = registry.params_models()
        if not models:
            continue
        annotation = Union[models] if len(models) > 1 else models[0]  # noqa: UP007 (a runtime tuple)
        if JobSpec.model_fields[field].annotation != annotation:
            JobSpec.model_fields[field].annotation = annotation
            changed = True
    if changed:
        JobSpec.model_rebuild(force=True)


def _register_builtins() -> None:
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    FAMILIES.register("gaussian", GaussianFamilySpec, bilevel="lwl.design.families.gaussian:build",
                      fill="lwl.design.families.gaussian:fill", paper_optimizer=True)
    FAMILIES.register("mixture", MixtureFamilySpec, bilevel="lwl.design.families.mixture:build",
                      fill="lwl.design.families.mixture:fill")
    FAMILIES.register("auto", AutoFamilySpec, bilevel="lwl.design.families.auto:build",
                      fill="lwl.design.families.auto:fill")
    FAMILIES.register("pool", PoolFamilySpec, bilevel="lwl.design.families.pool:build",
                      fill="lwl.design.families.pool:fill")
    FAMILIES.register("kle", KLEFamilySpec, moved_by="ama")
    FAMILIES.register("particles", ParticlesFamilySpec, moved_by="particle_ama")
    MODELS.register("krr", KRRSpec)
    FAMILIES.register("interval", IntervalFamilySpec, moved_by="interval_search")
    MODELS.register("deeponet", DeepONetSpec)
    MODELS.register("amino", AMINOSpec)
    ALGORITHMS.register("bilevel", BilevelSpec, "lwl.design.bilevel:build", _check_bilevel,
                        evaluate="lwl.design.bilevel:evaluate", final_steps=0, baselines=DEFAULT_BASELINES, domain=True,
                        budgeted="lwl.design.budgeted:build", budget_needs="lwl.design.budgeted:check_budget",
                        budgeted_evaluate="lwl.evaluation.equal_labels:evaluate")
    ALGORITHMS.register("ama", AMASpec, "lwl.design.ama:build", _check_ama,
                        evaluate="lwl.design.ama:evaluate", final_steps=1, prefers_gpu=True)
    ALGORITHMS.register("particle_ama", ParticleAMASpec, "lwl.design.particles:build", _check_particle_ama,
                        evaluate="lwl.design.particles:evaluate", final_steps=1, prefers_gpu=True)
    ALGORITHMS.register("interval_search", IntervalSearchSpec, "lwl.design.interval_search:build",
                        _check_interval_search, evaluate="lwl.design.interval_search:evaluate", final_steps=0,
                        prefers_gpu=True)
    for registry in (FAMILIES, MODELS, ALGORITHMS, BASELINES):
        registry.on_change(_rebuild_job_spec)
    _rebuild_job_spec()


_register_builtins()


class SpecError(ValueError):
    """An invalid job spec; ``errors`` lists (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in errors))


def _union_tags() -> dict[str, list[str]]:
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    return {"family": FAMILIES.names(), "model": MODELS.names(), "algorithm": ALGORITHMS.names()}


def _loc(parts) -> str:
    return ".".join(str(p) for p in parts) or "(root)"


def parse_job_spec(doc: dict[str, Any] | str | bytes, *, strict: bool = False) -> JobSpec:
    """Validate a job spec (a dict or JSON text); raise :class:`SpecError` naming each field.

    ``strict=True`` (documents from the wire or a file: ``POST /v1/jobs``, ``lwl run``) refuses
    values of the wrong JSON type instead of coercing them ("5" for an integer, 1 for a boolean);
    integers are accepted where numbers are expected, as JSON has one number type."""
    try:
        if isinstance(doc, (str, bytes)):
            return JobSpec.model_validate_json(doc, strict=strict)
        return JobSpec.model_validate(doc, strict=strict)
    except ValidationError as exc:
        errors, tags = [], _union_tags()
        for e in exc.errors(include_url=False):
            msg = e["msg"].removeprefix("Value error, ")
            # the branch names of plain unions (initial_data.labels: "list[float]") are no field
            loc = [p for p in e["loc"] if not (isinstance(p, str) and "[" in p)]
            # tagged unions (family, model, algorithm): report "model.lengthscale", not "model.krr.lengthscale"
            if len(loc) >= 2 and loc[1] in tags.get(loc[0], ()):
                del loc[1]
            if e["type"] in ("union_tag_invalid", "union_tag_not_found"):
                loc.append("name")
            # messages of the form "sub.field: why" name a field below the validator's location
            head, sep, rest = msg.partition(": ")
            if sep and " " not in head and head.replace(".", "").replace("_", "").isalnum():
                sub = head.split(".")
                loc = (loc[:-1] if loc and loc[-1] == sub[0] else loc) + sub
                msg = rest
            errors.append((_loc(loc), msg))
        raise SpecError(errors) from None

