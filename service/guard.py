"""The front door: what every HTTP request passes before any route reads it (pure ASGI).

In order, before the application sees the request:

1. at most ``LWL_MAX_HEADERS`` header fields (431);
2. without ``LWL_API_KEYS`` (loopback mode), the ``Host`` header must name the loopback address
   the server is bound to, with its port: ``127.0.0.1:PORT``, ``localhost:PORT`` or
   ``[::1]:PORT`` (421 otherwise; a DNS-rebinding page sends its own name);
3. with keys, every ``/v1`` route (and ``/metrics`` when ``LWL_METRICS_PUBLIC=false``) needs
   ``Authorization: Bearer <key>``, checked with ``hmac.compare_digest`` against every
   configured key (401) -- before a byte of the body is read;
4. routes that take a body check its media type (415): ``application/json`` for job specs,
   sampling requests and JSON labels (``application/x-npy`` too for labels); dataset uploads
   refuse the types a browser may send cross-site without asking (``text/plain``,
   ``application/x-www-form-urlencoded``, ``multipart/form-data``), and in loopback mode also
   a missing ``Content-Type``;
5. the body is capped per route (``LWL_MAX_BODY_BYTES`` for job specs and labels,
   ``LWL_MAX_DATASET_BYTES`` for datasets, :data:`SMALL_BODY` elsewhere): a declared
   ``Content-Length`` above the cap gets 413 at once, a streamed body is counted and cut at the
   cap (413);
6. the whole body must arrive within ``LWL_BODY_TIMEOUT_S`` of the request head (408).

A refusal made before the body was read closes the connection (``Connection: close``): the
unread body is never read. No CORS headers are ever sent, so browsers keep other origins'
pages from reading any answer. Header size and the request-head timeout are the HTTP server's
(:mod:`service.httpserver`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from dataclasses import dataclass

from service.core.settings import Settings
from service.problems import PROBLEM

SMALL_BODY = 64 * 1024  # bytes of body for routes that take a small JSON document or none
NPY = "application/x-npy"
# the media types a browser sends cross-origin without a CORS preflight
SIMPLE_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
UNAUTHORIZED = "send Authorization: Bearer <api key>"


@dataclass(frozen=True)
class BodyRule:
    method: str
    path: re.Pattern
    limit: str | int  # a Settings attribute (bytes) or a number of bytes
    accept: tuple[str, ...] | None  # media types; None: any but SIMPLE_TYPES


BODY_RULES = (
    BodyRule("POST", re.compile(r"/v1/jobs"), "max_body_bytes", ("application/json",)),
    BodyRule("POST", re.compile(r"/v1/jobs/[^/]+/labels"), "max_body_bytes", ("application/json", NPY)),
    BodyRule("POST", re.compile(r"/v1/jobs/[^/]+/predict"), "max_body_bytes", ("application/json", NPY)),
    BodyRule("POST", re.compile(r"/v1/jobs/[^/]+/samples"), SMALL_BODY, ("application/json",)),
    BodyRule("POST", re.compile(r"/v1/datasets"), "max_dataset_bytes", None),
)


def owner_for_key(keys: dict[str, str], given: str | None) -> str | None:
    """The owner whose key is ``given``, comparing with every configured key in constant time
    (no early exit, no dict lookup on the secret)."""
    if not given:
        return None
    probe = given.encode()
    found = None
    for key, owner in keys.items():
        if hmac.compare_digest(key.encode(), probe):
            found = owner
    return found


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def loopback_host(host: str | None, server: tuple | None) -> bool:
    """``host`` names the loopback address this server answers on, with its port."""
    if not host:
        return False
    host = host.strip().lower()
    port = server[1] if server else None
    return any(host == f"{name}:{port}" or (host == name and port in (80, None)) for name in LOOPBACK_NAMES)


def media_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


class _State:
    __slots__ = ("started", "refused")

    def __init__(self):
        self.started = False
        self.refused = False


class GuardMiddleware:
    """See the module docstring. ``keys`` maps API key -> owner (empty: loopback mode)."""

    def __init__(self, app, settings: Settings, keys: dict[str, str]):
        self.app, self.settings, self.keys = app, settings, keys

    def needs_key(self, path: str) -> bool:
        return path == "/v1" or path.startswith("/v1/") or (path == "/metrics" and not self.settings.metrics_public)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        settings = self.settings
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers[name] = value  # the names of interest appear once in a valid request
        declared = headers.get(b"content-length", b"").decode("latin-1").strip()
        length = int(declared) if declared.isdigit() else None
        has_body = bool(length) or b"transfer-encoding" in headers

        async def refuse(status: int, title: str, detail: str, extra_headers: dict | None = None, **more):
            doc = {"type": "about:blank", "title": title, "status": status, "detail": detail,
                   "instance": scope["path"], **more}
            body = json.dumps(doc).encode()
            out = [(b"content-type", PROBLEM.encode()), (b"content-length", str(len(body)).encode())]
            out += [(k.lower().encode(), v.encode()) for k, v in (extra_headers or {}).items()]
            if has_body:  # the body stays unread: the connection cannot carry another request
                out.append((b"connection", b"close"))
            await send({"type": "http.response.start", "status": status, "headers": out})
            await send({"type": "http.response.body", "body": body})

        if len(scope["headers"]) > settings.max_headers:
            return await refuse(431, "Too many header fields",
                                f"at most {settings.max_headers} header fields (LWL_MAX_HEADERS)")
        if not self.keys:
            host = headers.get(b"host", b"").decode("latin-1")
            if not loopback_host(host, scope.get("server")):
                port = (scope.get("server") or (None, "PORT"))[1]
                return await refuse(421, "Misdirected request",
                                    f"without LWL_API_KEYS this service answers only requests addressed to "
                                    f"127.0.0.1:{port}, localhost:{port} or [::1]:{port}, not {host!r}")
        path, method = scope["path"], scope["method"]
        if self.keys and self.needs_key(path):
            key = bearer(headers.get(b"authorization", b"").decode("latin-1"))
            if owner_for_key(self.keys, key) is None:
                return await refuse(401, "Unauthorized", UNAUTHORIZED, {"WWW-Authenticate": "Bearer"})
        rule = next((r for r in BODY_RULES if r.method == method and r.path.fullmatch(path)), None)
        mtype = media_type(headers.get(b"content-type", b"").decode("latin-1"))
        if rule is not None:
            if rule.accept is not None and mtype not in rule.accept:
                return await refuse(415, "Unsupported media type",
                                    f"send Content-Type: {' or '.join(rule.accept)}, not {mtype or 'none'}")
            if rule.accept is None and (mtype in SIMPLE_TYPES or (mtype is None and not self.keys)):
                return await refuse(415, "Unsupported media type",
                                    f"send the array with Content-Type: application/octet-stream "
                                    f"(or application/x-npy), not {mtype or 'none'}")
        limit = SMALL_BODY if rule is None else (
            getattr(settings, rule.limit) if isinstance(rule.limit, str) else rule.limit)
        if length is not None and length > limit:
            return await refuse(413, "Request body too large", f"the limit is {limit} bytes", limit=limit)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.body_timeout_s
        state = _State()
        counted = [0, False]  # bytes received, body complete

        async def guarded_send(message):
            if state.refused:
                return  # our own answer went out already
            if message["type"] == "http.response.start":
                state.started = True
            await send(message)

        async def stop(status: int, title: str, detail: str, **more):
            if not state.started:
                await refuse(status, title, detail, **more)
            state.refused = True
            return {"type": "http.disconnect"}

        async def guarded_receive():
            if state.refused:
                return {"type": "http.disconnect"}
            if counted[1] or state.started:
                return await receive()  # the body is in (or answered): e.g. a disconnect listener
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                return await stop(408, "Request timeout", f"the body did not arrive within "
                                  f"{settings.body_timeout_s:g} s (LWL_BODY_TIMEOUT_S)")
            if message["type"] == "http.request":
                counted[0] += len(message.get("body", b""))
                if counted[0] > limit:
                    return await stop(413, "Request body too large", f"the limit is {limit} bytes", limit=limit)
                if not message.get("more_body", False):
                    counted[1] = True
            return message

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if not state.refused:
                raise  # the app's own failure: the server's error handling answers it
