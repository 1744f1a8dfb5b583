"""The API's answers as pydantic models: each route declares one (``response_model``), so the
OpenAPI document states every answer's fields and FastAPI checks what a handler returns.
Models whose records carry open-ended data (a worker's hardware facts, the catalog's schemas)
allow extra fields: nothing a handler returns is dropped. The documents a job produced (its
result, distribution and accepted spec) are :class:`OpenDocument` models: checked, and sent as
they were stored, key order included. Answers that may also be binary (``.npy``, ``.npz``)
are written by their handlers; their JSON variant's model documents them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.store import JobStatus


class JobCreated(BaseModel):
    id: str
    status: JobStatus


class JobView(BaseModel):
    """A job as ``GET /v1/jobs/{id}`` shows it (documentation of the response; the handler
    serialises :func:`service.routers.jobs.job_view`'s dict with orjson on the polling path).
    ``progress`` carries iteration/total, objective, validation error, elapsed seconds and
    ``labels_used`` (oracle labels asked for so far; 0 for a new job), and a budgeted job's
    ``budget``, ``round`` and ``labels_failed`` from the start; ``error`` the problem document of
    a failed job; ``verdict`` the held-out comparison of a finished bilevel job, its candidates
    and baselines named in words in ``verdict.names``; ``conditions`` why a queued job waits;
    ``links`` the job's resources (``training_set`` only for a budgeted job)."""
    id: str
    status: JobStatus
    created_at: float
    updated_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    progress: dict[str, Any] | None = None
    error: dict[str, Any] | None = Field(default=None, description="a failed job's problem document (RFC 9457)")
    attempts: int
    worker: str | None = None
    cancel_requested: bool = Field(description="a cancel was asked for: a running job stops at its next "
                                                 "step boundary, then shows status cancelled")
    kind: dict[str, str] | None = None  # {"algorithm", "family", "oracle"} names
    queue: str | None = None
    conditions: list[dict[str, Any]]
    verdict: dict[str, Any] | None = None
    warnings: list[str]
    links: dict[str, str]


class JobList(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(description="pass back as cursor for the next page; null on the last")


class JobHistory(BaseModel):
    id: str
    history: list[dict[str, Any]] = Field(description="one record per iteration: objective, validation Err, "
                                                      "step size, nugget, seconds")


class DatasetView(BaseModel):
    id: str
    shape: list[int]
    dtype: str
    created_at: float


class WorkerView(BaseModel):
    """One worker process; its hardware facts (host, pid, version, GPU name and memory) follow
    as further fields."""
    model_config = ConfigDict(extra="allow")

    name: str
    device: str
    queues: list[str]
    alive: bool
    last_heartbeat_seconds: float
    started_at: float
    slices: int
    busy: bool
    current_job: str | None = Field(description="the caller's job it runs, if any")


class WorkerList(BaseModel):
    items: list[WorkerView]
    alive: dict[str, int] = Field(description="live workers per device (cpu, cuda)")


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    status: str
    checks: dict[str, str] = Field(description="store and broker; with embedded workers (lwl serve without "
                                               "--no-worker) also workers: ready once one is live")
    workers: dict[str, int] = Field(description="live workers per device (cpu, cuda): reported; required only "
                                                "of embedded workers (checks.workers)")


class Catalog(BaseModel):
    """Every oracle, family, model and algorithm a job spec can name, with its parameters'
    JSON schema, and the schemas of the evaluation block and of the whole job spec."""
    model_config = ConfigDict(extra="allow")

    oracles: list[dict[str, Any]]
    families: list[dict[str, Any]]
    models: list[dict[str, Any]]
    algorithms: list[dict[str, Any]]
    evaluation: dict[str, Any]
    job_spec: dict[str, Any]


class OpenDocument(BaseModel):
    """A stored JSON document with some fields declared and any others passed through. The
    routes serve the document as stored and use these models to document it, not to rewrite
    it: a document an older release stored is neither coerced nor refused."""
    model_config = ConfigDict(extra="allow")


class DistributionDocument(OpenDocument):
    """A distribution spec: the document ``lwl.measures.from_spec`` turns back into a sampler.
    Its family's parameters follow as further fields (a Gaussian's ``mean``, ``cov``, ...)."""

    kind: str | None = Field(default=None, description='"lwl.distribution"')
    version: int | None = Field(default=None, description="version of the distribution spec format")
    lwl_version: str | None = Field(default=None, description="the lwl that wrote it")
    family: str = Field(description="the family whose fields follow (GET /v1/catalog lists them)")


class ModelFallback(BaseModel):
    """Why a succeeded budgeted job serves no model (``result.model`` null): it ends succeeded all
    the same, with every paid label in its training set (``GET /v1/jobs/{id}/training-set``)."""
    model_config = ConfigDict(extra="allow")

    reason: Literal["fit_failed", "too_few_points"] = Field(
        description="fit_failed: fitting the served model to the training set raised (error says what); "
                    "too_few_points: under two labelled points")
    error: str | None = Field(default=None, description='the fit\'s error, "<type>: <message>" (e.g. '
                                                        '"LinAlgError: ..."); null for too_few_points')
    points: int = Field(description="labelled points in the training set the fit was given")


class OutputDiagnosis(OpenDocument):
    """One output's reading of a budgeted job's served GP (``lwl.models.gp_diagnosis``)."""

    noise_share: float = Field(description="the fitted noise variance over Q's mean square label (the job's "
                                           "validation labels, members weighted)")
    err_floor: float = Field(description="sqrt(noise_share): the held-out Err the served GP will not go much below")
    loo_err: float | None = Field(default=None, description="the served GP's Err on Q estimated by leave-one-out at "
                                                            "Q's validation labels, members weighted")
    loo_coverage_1sd: float | None = Field(default=None, description="share of Q's validation labels within 1 sd of "
                                                                     "their left-out prediction (calibrated: 0.68)")
    loo_coverage_2sd: float | None = Field(default=None, description="... within 2 sd (calibrated: 0.95)")
    loo_residuals: list[float] | None = Field(
        default=None, description="the leave-one-out residual y_i - mean_{-i}(x_i) at each of Q's validation labels "
                                  "(the training set's first rows), in the labels' units; absent in older results")
    loo_sd: list[float] | None = Field(
        default=None, description="the std of each of those left-out predictions of the measurement (latent + "
                                  "noise), in the labels' units; absent in older results")


class ModelDiagnosis(OpenDocument):
    """A budgeted gp job's reading of its served GP: one entry per output."""

    outputs: list[OutputDiagnosis]
    equation: str | None = Field(default=None, description="the definitions, in one line")


class JobResult(OpenDocument):
    """A succeeded job's result document (``lwl.run_job``'s, plus the worker that finished it).
    Algorithms add their own fields (``last_distribution``, ``checks``, ``lipschitz``,
    ``labels_used``, ...); every field but ``distribution`` is present only where it applies."""

    distribution: DistributionDocument = Field(description="the optimised distribution")
    history: list[dict[str, Any]] | None = Field(default=None, description="one record per iteration")
    selected: dict[str, Any] | None = Field(default=None, description="the iteration kept, and by which rule")
    warnings: list[str] | None = Field(default=None, description="what the user must know about the result")
    evaluation: dict[str, Any] | None = Field(
        default=None, description="held-out errors of models trained on the design and on the baselines")
    verdict: dict[str, Any] | None = Field(default=None, description="the held-out comparison, in short")
    training_set: dict[str, Any] | None = Field(
        default=None, description="a budgeted job's labelled points: inputs (n, d) and labels (n,) (an operator "
                                  "job's: (n, p) fields), those its served model is trained on")
    left_out: dict[str, Any] | None = Field(
        default=None, description="a budgeted job's left-out check (check: the dropped candidates, points, "
                                  "score_all, score_without, z, rank_p, left_out; the points are left out on z alone, rank_p "
                                  "is recorded, not applied; null where none ran: krr jobs) and the inputs and labels it kept out of the served model's training set: "
                                  "paid for, counted in labels_used")
    model_fallback: ModelFallback | None = Field(
        default=None, description="a budgeted job's reason for serving no model (model null): null where the "
                                  "served model was fitted; its labels and training set are there either way")
    model_diagnosis: ModelDiagnosis | None = Field(
        default=None, description="a budgeted gp job's reading of its served GP (outputs: noise_share, the fitted "
                                  "noise over Q's mean square label (the job's validation labels), and err_floor, its square root, the "
                                  "held-out Err the served GP will not go much below, and loo_err, its Err on Q estimated by leave-one-out at "
                                  "Q's validation labels, members weighted; loo_coverage_1sd/2sd; loo_residuals and loo_sd "
                                  "at each of those labels); null for other models")
    timings: dict[str, Any] | None = Field(default=None, description="design, last slice and evaluation seconds")
    views: dict[str, Any] | None = Field(default=None, description="the numbers of the dashboard's pictures")
    names: dict[str, str] | None = Field(default=None, description="every candidate and baseline id the result "
                                                                   "names (broadened_4, q_mixture, nipv, ...), in words")
    spec: dict[str, Any] | None = Field(default=None, description="the spec run, with the values derived "
                                                                   "from the data")
    worker: str | None = Field(default=None, description="the worker that finished the job")


class AcceptedJobSpec(OpenDocument):
    """The job spec as accepted: the ``JobSpec`` sent to ``POST /v1/jobs`` with lwl's defaults
    written in (each block as the ``JobSpec`` schema describes it)."""

    oracle: dict[str, Any]
    test_distributions: dict[str, Any]
    domain: dict[str, Any] | None = None
    family: dict[str, Any] | None = None
    model: dict[str, Any] | None = None
    algorithm: dict[str, Any] | None = None
    budget: int | None = None
    initial_data: dict[str, Any] | None = None
    evaluation: dict[str, Any] | None = None
    seed: int | None = None
    device: str | None = None
    derived: list[str] | None = None


#: the JSON variants below answer a field ``d`` (the dimension) that their models state in words:
#: a property named ``d`` breaks the clients openapi-python-client (0.29) writes, whose
#: ``from_dict`` keeps the document in a local variable ``d`` (they read it as an extra field)
_WITH_D = ConfigDict(extra="allow")


class Samples(BaseModel):
    """The JSON variant of ``POST /v1/jobs/{id}/samples``; with them ``d``, the dimension."""
    model_config = _WITH_D

    n: int
    seed: int
    samples: list[list[float]] = Field(description="(n, d): the same numbers as "
                                                   "lwl.measures.from_spec(distribution).sample(n, seed)")


class TrainingSet(BaseModel):
    """The JSON variant of ``GET /v1/jobs/{id}/training-set``; with them ``d``, the dimension."""
    model_config = _WITH_D

    status: JobStatus = Field(description="the job's status: a succeeded job's points are its result's training "
                                          "set; any other's, the labels it holds so far (a failed or cancelled "
                                          "job's are all it will have)")
    rounds: int | None = Field(default=None, description="labelling rounds in inputs (the validation round "
                                                          "included)")
    n: int
    inputs: list[list[float]] = Field(description="(n, d)")
    labels: list[float] | list[list[float]] = Field(description="(n,), or (n, p) fields (an operator job)")
    left_out_inputs: list[list[float]] = Field(default_factory=list, description=(
        "(m, d): paid labels the served model was trained without (the result's left_out: they made it "
        "validate worse on Q's labels); not in inputs"))
    left_out_labels: list[float] | list[list[float]] = Field(default_factory=list, description="(m,) or (m, p)")
    told_inputs: list[list[float]] | None = Field(default=None, description=(
        "an ask/tell job without a result: the rows told so far of the round it was in, not yet taken into "
        "inputs (the oracle's rows as asked: an EIT point's L pairs are L rows); absent otherwise"))
    told_labels: list[float] | list[list[float]] | None = Field(default=None, description="their labels")


class PendingBatch(BaseModel):
    """One batch of the round that waits for labels (``GET /v1/jobs/{id}/batches``)."""

    batch_id: str = Field(description='"<round>.<position>": ask for it with GET /queries?batch_id=')
    position: int = Field(description="its place in the round (0-based): one instrument per position")
    n: int = Field(description="points in the batch")
    pending_points: int = Field(description="points still without an outcome")
    failed_points: int = Field(description="points told as failed")


class BatchList(BaseModel):
    """The pending batches of an ask/tell job's current round: several instruments each take one
    (``GET /queries?batch_id=``) and tell it independently; the round resumes once all are told."""

    job_id: str
    status: str = Field(description="the job's status; only an awaiting_labels job has pending batches")
    round: int = Field(description="the job's current ask/tell round (1, 2, ...; 0 before the first)")
    batches: list[PendingBatch] = Field(description="in position order; empty unless the job awaits labels")


class Queries(BaseModel):
    """The JSON variant of ``GET /v1/jobs/{id}/queries``: one batch to label; with them ``d``,
    the dimension."""
    model_config = _WITH_D

    batch_id: str
    n: int = Field(description="points in the batch")
    pending_batches: int = Field(description="batches of the round still waiting for labels")
    pending: list[int] = Field(description="positions of the points still to be told")
    failed: list[int] = Field(description="positions of the points told as failed")
    inputs: list[list[float]] = Field(description="(n, d): every point of the batch, positions fixed")
