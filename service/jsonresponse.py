"""``FastJSONResponse``: a JSON answer serialised by orjson, for the hot polling path.

FastAPI deprecated its ``ORJSONResponse`` (0.16x: every app that uses it warns on its first
request). ``GET /v1/jobs/{id}`` answers a dict built by :func:`service.routers.jobs.job_view`
without a response model, so FastAPI's own pydantic fast path does not apply; orjson writes
it about 5x faster than the standard library, and numpy arrays too. One small class keeps that
without a deprecated import.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


class FastJSONResponse(JSONResponse):  # a JSONResponse: OpenAPI documents it as JSON

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
