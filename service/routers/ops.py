"""Operations: liveness, readiness, Prometheus metrics, and the catalog of what a job can name."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Request, Response

from service.catalog import catalog
from service.deps import OwnerDep, metrics_dep
from service import problems
from service.problems import Problem
from service.schemas import Catalog, Health, Ready

router = APIRouter()


@router.get("/healthz", tags=["ops"], response_model=Health)
def healthz() -> dict:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz", tags=["ops"], response_model=Ready, responses=problems.responses(503))
def readyz(request: Request):
    """The job store and the broker are reachable; and, when ``lwl serve`` runs embedded
    workers, one of them is live (``checks.workers``): until then a job would only queue."""
    state = request.app.state
    checks = {}
    for name, check in (("store", state.store.ping), ("broker", state.broker_check)):
        try:
            if check is not None:
                check()
            checks[name] = "ok"
        except Exception as exc:
            checks[name] = f"unreachable: {type(exc).__name__}"
    live = state.store.list_workers(within=state.settings.stale_seconds) if checks["store"] == "ok" else []
    embedded = getattr(state, "embedded_workers", 0)
    if embedded:  # the server started its own workers: ready once one has registered
        checks["workers"] = "ok" if live else f"no live worker yet ({embedded} embedded worker(s) starting)"
    # without embedded workers (lwl serve --no-worker) workers are reported, not required: the
    # API accepts jobs while none runs (they queue, and a job's conditions say why)
    if any(v != "ok" for v in checks.values()):
        raise Problem(503, "Not ready", json.dumps(checks), checks=checks,
                      headers={"Retry-After": str(problems.RETRY_AFTER_S)})
    return {"status": "ready", "checks": checks,
            "workers": {"cpu": sum(w.device == "cpu" for w in live), "cuda": sum(w.device == "cuda" for w in live)}}


def prometheus(request: Request) -> Response:
    """Prometheus metrics: requests, job counts by state, iteration durations."""
    body, content_type = request.app.state.metrics.render()
    return Response(body, media_type=content_type)


def metrics_router(public: bool) -> APIRouter:
    """``GET /metrics``: open (``LWL_METRICS_PUBLIC=true``, the default: a scraper on a private
    network needs no key) or behind any owner's bearer key; the OpenAPI document says which."""
    out = APIRouter()
    text = {200: {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}}
    if public:
        out.add_api_route("/metrics", prometheus, methods=["GET"], tags=["ops"], responses={**text, **problems.STORE})
    else:
        out.add_api_route("/metrics", prometheus, methods=["GET"], tags=["ops"], dependencies=[Depends(metrics_dep)],
                          responses={**text, **problems.responses(401, 503)})
    return out


@router.get("/v1/catalog", tags=["catalog"], response_model=Catalog, responses=problems.responses(401))
def get_catalog(owner: OwnerDep) -> dict:
    """Oracles, families, models and algorithms with their parameter schemas."""
    return catalog()
