"""RFC 9457 problem documents (``application/problem+json``) for every error the API returns."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import BaseModel, Field
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.core.outage import StoreUnavailable, TellContended, is_store_outage

PROBLEM = "application/problem+json"
BODY_PARSE_ERROR = "There was an error parsing the body"  # FastAPI's HTTPException(400) detail


class Problem(Exception):
    def __init__(self, status: int, title: str, detail: str = "", *, field: str | None = None,
                 errors: list[dict] | None = None, headers: dict | None = None, **extra: Any):
        self.status, self.title, self.detail = status, title, detail
        self.field, self.errors, self.headers, self.extra = field, errors, headers, extra

    def document(self, instance: str | None = None) -> dict:
        doc: dict[str, Any] = {"type": "about:blank", "title": self.title, "status": self.status}
        if self.detail:
            doc["detail"] = self.detail
        if instance:
            doc["instance"] = instance
        if self.field:
            doc["field"] = self.field
        if self.errors:
            doc["errors"] = self.errors
        doc.update(self.extra)
        return doc


def problem_response(p: Problem, request: Request | None = None) -> JSONResponse:
    instance = str(request.url.path) if request is not None else None
    return JSONResponse(p.document(instance), status_code=p.status, media_type=PROBLEM, headers=p.headers)


RETRY_AFTER_S = 5  # what a 503 asks a client to wait: about the backoff of a worker's store retries


def store_unavailable() -> Problem:
    """503 while the job store cannot be reached (it restarts, fails over): nothing changed."""
    return Problem(503, "Store unavailable", "the job store cannot be reached; nothing was changed by this "
                   f"request: retry after {RETRY_AFTER_S} s", headers={"Retry-After": str(RETRY_AFTER_S)})


def tell_contended(exc: TellContended) -> Problem:
    """503 for a tell that concurrent tells of its batch kept beating: nothing of it was stored."""
    return Problem(503, "Batch busy", f"{exc}; nothing of this tell was stored: retry after {RETRY_CONTENDED_S} s",
                   field="batch_id", headers={"Retry-After": str(RETRY_CONTENDED_S)}, batch_id=exc.batch_id)


RETRY_CONTENDED_S = 1  # a contended batch frees up as soon as the other tells commit


def spec_problem(errors: list[tuple[str, str]], title: str = "Invalid job spec") -> Problem:
    items = [{"field": loc, "message": msg} for loc, msg in errors]
    detail = "; ".join(f"{loc}: {msg}" for loc, msg in errors)
    return Problem(422, title, detail, field=items[0]["field"] if items else None, errors=items)


def install(app) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem):
        return problem_response(exc, request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        # a body FastAPI could not parse is malformed JSON (400), as service.deps.parse_json
        # answers for the routes that read their body themselves: one answer on every route
        for e in exc.errors():
            if e.get("type") == "json_invalid":
                why = (e.get("ctx") or {}).get("error", e.get("msg", ""))
                where = e["loc"][-1] if isinstance(e["loc"][-1], int) else None
                return problem_response(Problem(400, "Malformed JSON", f"{why}" + (
                    f" (char {where})" if where is not None else "")), request)
        errors = []
        for e in exc.errors():
            loc = [str(p) for p in e["loc"] if p not in ("body", "query", "path", "header")]
            errors.append((".".join(loc) or "(body)", e["msg"].removeprefix("Value error, ")))
        return problem_response(spec_problem(errors, "Invalid request"), request)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        titles = {404: "Not found", 405: "Method not allowed", 401: "Unauthorized"}
        headers = getattr(exc, "headers", None)
        if exc.status_code == 400 and exc.detail == BODY_PARSE_ERROR:  # e.g. JSON nested past the parser's recursion limit
            return problem_response(Problem(400, "Malformed JSON", "the body could not be parsed as JSON "
                                            "(nested too deeply?)"), request)
        if exc.status_code == 405:  # Starlette names the first matching route's methods only
            headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
        return problem_response(Problem(exc.status_code, titles.get(exc.status_code, "HTTP error"),
                                        str(exc.detail or ""), headers=headers), request)

    @app.exception_handler(DBAPIError)
    async def _store(request: Request, exc: DBAPIError):
        # the store restarting or unreachable is no bug of the request: come back shortly
        if is_store_outage(exc):
            return problem_response(store_unavailable(), request)
        return problem_response(Problem(500, "Internal server error", type(exc).__name__), request)

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(request: Request, exc: StoreUnavailable):
        return problem_response(store_unavailable(), request)

    @app.exception_handler(TellContended)
    async def _contended(request: Request, exc: TellContended):
        return problem_response(tell_contended(exc), request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        return problem_response(Problem(500, "Internal server error", type(exc).__name__), request)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at this path."""
    from starlette.routing import Match

    methods: set[str] = set()
    scope = {**request.scope, "method": "GET"}
    for route in request.app.routes:
        match, _ = route.matches(scope)
        if match != Match.NONE and getattr(route, "methods", None):
            methods |= set(route.methods)
    return sorted(methods)


class FieldError(BaseModel):
    field: str
    message: str


class ProblemDocument(BaseModel):
    """An RFC 9457 problem document: every 4xx/5xx answer of the API has this body."""
    type: str = Field(default="about:blank")
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    field: str | None = Field(default=None, description="the request field at fault, as a dotted path")
    errors: list[FieldError] | None = Field(default=None, description="every field at fault (422)")


_WHY = {400: "Malformed request (JSON syntax, nesting, an unreadable array, a bad cursor)",
        401: "Missing or wrong bearer key", 404: "No such resource for this owner",
        409: "Conflict with the resource's state", 413: "Request body (or a dataset's uncompressed array) too large",
        415: "Unsupported Content-Type for this route",
        422: "Invalid content; `field` / `errors` name what is wrong", 503: "The job store (or the broker) is unreachable, or the resource is contended: nothing was changed; retry after "
             "the Retry-After seconds"}


RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}


def responses(*statuses: int) -> dict[int, dict]:
    """OpenAPI ``responses`` for these statuses: application/problem+json bodies (a 503 with
    its ``Retry-After`` header)."""
    return {s: {"description": _WHY[s], "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/ProblemDocument"}}},
                **({"headers": RETRY_AFTER} if s == 503 else {})}
            for s in statuses}


#: the responses of a router whose every operation reads or writes the job store
STORE = responses(503)
