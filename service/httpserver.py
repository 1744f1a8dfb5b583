"""The HTTP server ``lwl serve`` runs: uvicorn with its pure-Python h11 protocol, limited.

- Request line + headers at most ``LWL_MAX_HEADER_BYTES`` (h11's ``max_incomplete_event_size``):
  431 with a problem document above (uvicorn's own h11 protocol answers every protocol error
  with a bare 400, and its httptools protocol has no header limit at all).
- The request head must arrive within ``LWL_HEADER_TIMEOUT_S`` of the connection opening or of
  the previous response (408, then the connection closes); so must the rest of a body the
  application left unread. An idle keep-alive connection closes after ``LWL_KEEP_ALIVE_S``
  (uvicorn's ``timeout_keep_alive``). The body's own deadline is the ASGI guard's
  (:mod:`service.guard`, ``LWL_BODY_TIMEOUT_S``).
- After an error answer, and when a connection closes with a request body still unread (the
  guard refused it before reading), the server stops writing and discards what the client still
  sends, for up to :data:`LINGER_S` and :data:`LINGER_BYTES`, before closing: a client that sent
  a little more reads the answer instead of a reset, and a large body is still never read.
"""

from __future__ import annotations

import http
import json

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.core.settings import Settings
from service.problems import PROBLEM

LINGER_S = 1.0
LINGER_BYTES = 256 * 1024


class _LingeringTransport:
    """The connection's transport, whose ``close`` lingers while the client is still sending a
    body nobody will read (uvicorn closes at once after a ``Connection: close`` answer, and a
    close with unread input makes the kernel send a reset that can destroy the answer)."""

    def __init__(self, transport, protocol: "GuardedH11Protocol"):
        self._transport, self._protocol = transport, protocol

    def __getattr__(self, name):
        return getattr(self._transport, name)

    def close(self) -> None:
        p = self._protocol
        if not p._draining and not self._transport.is_closing() and p.conn.their_state is h11.SEND_BODY:
            p._linger()
        else:
            self._transport.close()


class _Connection(h11.Connection):
    """Remembers the status h11 suggests for the last protocol error (431 for a head too long)."""

    error_status = 400

    def next_event(self):
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.error_status = getattr(exc, "error_status_hint", 400) or 400
            raise


class GuardedH11Protocol(H11Protocol):
    header_timeout_s = 10.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        size = self.config.h11_max_incomplete_event_size
        self.conn = _Connection(h11.SERVER, size if size is not None else DEFAULT_MAX_INCOMPLETE_EVENT_SIZE)
        self._head_timer = None
        self._draining = False
        self._drained = 0

    # -- the head timer: armed whenever the server waits on the client with no request running
    def _waiting_on_client(self) -> bool:
        if self.transport is None or self.transport.is_closing() or self._draining:
            return False
        ours, theirs = self.conn.our_state, self.conn.their_state
        head = ours is h11.IDLE and theirs is h11.IDLE
        unread_body = ours in (h11.DONE, h11.MUST_CLOSE) and theirs is h11.SEND_BODY
        return head or unread_body

    def _sync_timer(self) -> None:
        if self._waiting_on_client():
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.header_timeout_s, self._timed_out)
        elif self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE:
            self._send_error(408, "Request timeout", f"the request head did not arrive within "
                             f"{self.header_timeout_s:g} s (LWL_HEADER_TIMEOUT_S)")
        else:
            self.transport.close()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._raw_transport = transport
        self.transport = _LingeringTransport(transport, self)  # type: ignore[assignment]
        self._sync_timer()

    def data_received(self, data: bytes) -> None:
        if self._draining:  # after an error answer: discarded, never parsed or kept
            self._drained += len(data)
            if self._drained > LINGER_BYTES:
                self._raw_transport.close()
            return
        super().data_received(data)
        self._sync_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._sync_timer()

    def connection_lost(self, exc) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    # -- error answers: a problem document, then a lingering close
    def send_400_response(self, msg: str) -> None:
        status = self.conn.error_status
        if status == 431:
            self._send_error(431, "Request header fields too large",
                             f"the request line and headers exceed {self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE} bytes "
                             "(LWL_MAX_HEADER_BYTES)")
        else:
            self._send_error(400, "Malformed HTTP request", msg)

    def _send_error(self, status: int, title: str, detail: str) -> None:
        body = json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail}).encode()
        headers = [(b"content-type", PROBLEM.encode()), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        try:
            reason = http.HTTPStatus(status).phrase.encode()
            out = self.conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
            out += self.conn.send(h11.Data(data=body))
            out += self.conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            out = (b"HTTP/1.1 %d %s\r\n" % (status, http.HTTPStatus(status).phrase.encode())
                   + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n" + body)
        self.transport.write(out)
        self._linger()

    def _linger(self) -> None:
        """Stop writing (the answer goes out), discard what comes in, close after LINGER_S or
        LINGER_BYTES."""
        t = self._raw_transport
        self._draining = True
        if t.can_write_eof():
            t.write_eof()
        t.resume_reading()  # flow control may have paused it
        self.loop.call_later(LINGER_S, t.close)


def protocol_for(settings: Settings) -> type:
    """The protocol class with the settings' head timeout."""
    return type("LwlH11Protocol", (GuardedH11Protocol,), {"header_timeout_s": settings.header_timeout_s})


def server_options(settings: Settings) -> dict:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config``."""
    return {"http": protocol_for(settings), "h11_max_incomplete_event_size": settings.max_header_bytes,
            "timeout_keep_alive": settings.keep_alive_s}
