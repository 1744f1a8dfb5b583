"""The FastAPI application: wiring only. No algorithm code, no routes.

:func:`create_app` puts the store, the queue, the settings and the metrics on ``app.state``
(read by :mod:`service.deps`), installs the problem+json error handlers and includes one
router per resource (:mod:`service.routers`). Validation comes from :mod:`lwl.spec`, state
from :class:`service.core.store.Store`, work goes to the queue as one message per job slice.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Callable

from fastapi import FastAPI

import lwl
from lwl.measures import from_spec
from lwl.registry import load_plugins
from service import problems
from service.core.settings import Settings, get_settings
from service.core.store import Store
from service.guard import GuardMiddleware
from service.metrics import Metrics
from service.routers import asktell, datasets, jobs, ops, surrogate, ui, workers


def create_app(settings: Settings | None = None, store: Store | None = None,
               enqueue: Callable[[str, int], None] | None = None,
               broker_check: Callable[[], None] | None = None, embedded_workers: int = 0,
               after_tell_commit: Callable[[], None] | None = None) -> FastAPI:
    """The application. ``after_tell_commit`` is a fault-injection hook for tests only (run
    between a round-completing tell's commit and its message: tests/service/tell_killer.py);
    nothing in production passes one."""
    load_plugins()  # LWL_PLUGINS: components registered by the user's modules
    settings = settings or get_settings()
    app = FastAPI(title="lwl", version=lwl.__version__,
                  description="Training-data distribution design for scientific machine learning "
                              "(learning where to learn). Errors are application/problem+json.")
    app.state.settings = settings
    app.state.keys = settings.owners_by_key()
    own_store = store is None
    store = store or Store(settings.resolved_database_url())
    if own_store or enqueue is None:
        from service.core.queue import make_celery, sender

        celery = make_celery(settings)
        enqueue = enqueue or sender(celery, store.job_queue)

        def broker_check():  # noqa: F811
            with celery.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)

    app.state.store = store
    app.state.enqueue = enqueue
    app.state.broker_check = broker_check
    app.state.embedded_workers = embedded_workers  # /readyz waits for one of them
    app.state.after_tell_commit = after_tell_commit

    @lru_cache(maxsize=256)
    def measure_for(job_id: str):  # results never change once a job succeeded
        return from_spec(app.state.store.result(job_id)["distribution"])

    app.state.measure_for = measure_for
    metrics = Metrics(app.state.store)
    app.state.metrics = metrics
    problems.install(app)
    # the guard runs inside the metrics (refusals are counted) and before every route
    app.add_middleware(GuardMiddleware, settings=settings, keys=app.state.keys)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    for router in (ops.router, ops.metrics_router(settings.metrics_public), jobs.router, surrogate.router, asktell.router,
                   datasets.router, workers.router, ui.router):
        app.include_router(router)
    app.openapi = lambda: openapi_with_job_spec(app)
    return app


def openapi_with_job_spec(app: FastAPI) -> dict:
    """The generated schema, with the job spec (read from the raw body) as a component."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        from lwl.spec import JobSpec

        schema = get_openapi(title=app.title, version=app.version, description=app.description,
                             routes=app.routes)
        spec = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, sub in spec.pop("$defs", {}).items():
            comps.setdefault(name, sub)
        comps["JobSpec"] = spec
        comps["LabelsRequest"] = asktell.LabelsRequest.model_json_schema(ref_template="#/components/schemas/{model}")
        problem = problems.ProblemDocument.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in problem.pop("$defs", {}).items():
            comps.setdefault(name, sub)
        comps["ProblemDocument"] = problem
        # FastAPI documents request-validation errors as its own JSON; this API answers them
        # (like every error) with a problem document
        for operations in schema["paths"].values():
            for op in operations.values():
                if "422" in op.get("responses", {}):
                    op["responses"]["422"] = problems.responses(422)[422]
        for name in ("HTTPValidationError", "ValidationError"):
            comps.pop(name, None)
        app.openapi_schema = schema
    return app.openapi_schema


class MetricsMiddleware:
    """Counts requests and latencies per route (plain ASGI: no per-request task overhead)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            self.metrics.observe(scope["method"], getattr(route, "path", "unmatched"), status[0],
                                 time.perf_counter() - t0)
