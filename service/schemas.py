"""The API's answers as pydantic models: each route declares one (``response_model``), so the
OpenAPI document states every answer's fields and FastAPI checks what a handler returns.
Models whose records carry open-ended data (a worker's hardware facts, the catalog's schemas)
allow extra fields: nothing a handler returns is dropped."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.core.store import JobStatus


class JobCreated(BaseModel):
    id: str
    status: JobStatus


class JobView(BaseModel):
    """A job as ``GET /v1/jobs/{id}`` shows it (documentation of the response; the handler
    serialises :func:`service.routers.jobs.job_view`'s dict with orjson on the polling path).
    ``progress`` carries iteration/total, objective, validation error and elapsed seconds;
    ``error`` the problem document of a failed job; ``verdict`` the held-out comparison of a
    finished bilevel job; ``conditions`` why a queued job waits."""
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
    checks: dict[str, str]
    workers: dict[str, int] = Field(description="live workers per device (cpu, cuda): reported, not required")


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
