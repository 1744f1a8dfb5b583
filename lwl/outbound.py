"""Safe outbound HTTP: the one way lwl calls a URL that a job spec named (the HTTP-callback
oracle's lab, the ask/tell ``webhook_url``).

- **Allow-list.** Only hosts the operator listed in ``LWL_ORACLE_ALLOWED_HOSTS`` (names or
  addresses, comma-separated; ``*`` for any) are called. Loopback, private, link-local (cloud
  metadata at 169.254.169.254 included), multicast, reserved and unspecified addresses are
  refused unless they fall in ``LWL_ORACLE_ALLOWED_NETWORKS`` (CIDRs).
- **No check-then-resolve gap.** The host name is resolved once per call, every address it
  resolves to is checked, and the socket connects to a checked address; the ``Host`` header,
  TLS SNI and the certificate check use the URL's name. Nothing resolves the name again
  between the check and the connect (a DNS answer that changes in between cannot move the call).
- **No redirects.** A 3xx answer is returned as it is, never followed; callers refuse it.
- **A deadline for the whole exchange.** ``timeout_s`` bounds connect, sending, the answer's
  head and its body together: a watcher thread shuts the socket down at the deadline, so a
  server trickling one byte at a time cannot hold the call longer.
- **Cancellation.** Inside ``with cancellation(check):`` a call in flight is aborted (and
  :func:`sleep` between retries interrupted) within :data:`CANCEL_POLL_S` once ``check()``
  returns True, raising :class:`Cancelled`.
- **Bounded answers.** At most ``max_bytes`` of body are read (:class:`AnswerTooLarge` above).

Proxies from the environment are not used: a proxy would resolve the name again.
"""

from __future__ import annotations

import contextvars
import http.client
import ipaddress
import os
import socket
import ssl
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator
from urllib.parse import urlsplit

CANCEL_POLL_S = 0.25  # how often a call in flight (or a backoff sleep) asks whether to stop


class URLNotAllowed(ValueError):
    """The URL is not http(s), its host is not allowed, or it resolves to a refused address."""


class DeadlineExceeded(TimeoutError):
    """No complete answer within the call's deadline (a TimeoutError, so an OSError)."""


class Cancelled(Exception):
    """The cancel check of the enclosing :func:`cancellation` said stop."""


class AnswerTooLarge(ValueError):
    """The answer's body is longer than the caller allowed."""


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "") or ""


def _env_list(name: str) -> list[str]:
    return [p.strip() for p in os.environ.get(name, "").split(",") if p.strip()]


def _allowed_networks() -> list:
    nets = []
    for cidr in _env_list("LWL_ORACLE_ALLOWED_NETWORKS"):
        try:
            nets.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise URLNotAllowed(f"LWL_ORACLE_ALLOWED_NETWORKS: {cidr!r} is not a network") from None
    return nets


def refused_address(ip, nets) -> bool:
    """A loopback/private/link-local/multicast/reserved/unspecified address outside ``nets``."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    special = (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
               or ip.is_reserved or ip.is_unspecified)
    return special and not any(ip in n for n in nets)


def check_url(url: str, resolve: bool = True) -> list[str]:
    """Refuse URLs the operator did not allow; returns the checked addresses (resolved once).

    ``resolve=False`` checks only the scheme and the host name (the API does this at
    submission; :func:`post` resolves and checks at every call and connects to what it checked).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise URLNotAllowed(f"{url!r} is not an http(s) URL with a host")
    host = parts.hostname
    allowed = _env_list("LWL_ORACLE_ALLOWED_HOSTS")
    if host not in allowed and "*" not in allowed:
        raise URLNotAllowed(f"host {host!r} is not in LWL_ORACLE_ALLOWED_HOSTS")
    nets = _allowed_networks()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise URLNotAllowed(f"{url!r} has an invalid port") from None
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if not resolve and literal is None:
        return []
    if literal is not None:
        ips = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError) as exc:
            raise URLNotAllowed(f"host {host!r} does not resolve: {exc}") from None
        ips = []
        for info in infos:  # resolver order, without repeats
            ip = ipaddress.ip_address(info[4][0].split("%")[0])
            if ip not in ips:
                ips.append(ip)
    if not ips:
        raise URLNotAllowed(f"host {host!r} does not resolve")
    for ip in ips:  # every address must pass: the resolver's order is not ours to trust
        if refused_address(ip, nets):
            raise URLNotAllowed(f"{host!r} resolves to {ip}, a loopback/private/link-local address "
                                "not in LWL_ORACLE_ALLOWED_NETWORKS")
    return [str(ip) for ip in ips]


# -- cancellation ---------------------------------------------------------------------------------
_CANCEL: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar("lwl_cancel", default=None)


@contextmanager
def cancellation(check: Callable[[], bool]) -> Iterator[None]:
    """Calls and sleeps inside the block stop (raising :class:`Cancelled`) once ``check()`` is
    True; ``check`` is polled every :data:`CANCEL_POLL_S` from a watcher thread."""
    token = _CANCEL.set(check)
    try:
        yield
    finally:
        _CANCEL.reset(token)


def _asked_to_stop(check: Callable[[], bool] | None) -> bool:
    if check is None:
        return False
    try:
        return bool(check())
    except Exception:  # a failing check (store unreachable) does not cancel anything
        return False


def sleep(seconds: float) -> None:
    """``time.sleep`` that raises :class:`Cancelled` when the enclosing cancellation asks."""
    check = _CANCEL.get()
    end = time.monotonic() + seconds
    while True:
        if _asked_to_stop(check):
            raise Cancelled("cancel requested")
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, CANCEL_POLL_S))


# -- connections pinned to a checked address -------------------------------------------------------
class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to ``address`` (already checked); ``host`` names the server in ``Host``."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self):
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """TLS to ``address`` (already checked), with SNI and certificate check for ``host``."""

    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext):
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def _abort(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a recv/send blocked in the calling thread
        except OSError:
            pass


def post(url: str, body: bytes, headers: dict[str, str], *, timeout_s: float,
         max_bytes: int = 16 * 1024 * 1024) -> Answer:
    """POST ``body`` to ``url`` under the rules of this module; returns the answer, whatever its
    status (3xx included: never followed). Raises :class:`URLNotAllowed`, :class:`Cancelled`,
    :class:`DeadlineExceeded`, :class:`AnswerTooLarge`, ``OSError`` (connection errors) or
    ``http.client.HTTPException`` (a malformed answer)."""
    check = _CANCEL.get()
    if _asked_to_stop(check):
        raise Cancelled("cancel requested")
    start = time.monotonic()
    deadline = start + timeout_s
    parts = urlsplit(url)
    addresses = check_url(url)  # resolved once; the connection goes to one of these
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # the socket itself: http.client drops conn.sock once the answer's head is in (the answer
    # then reads through a file over the same socket), so the watcher keeps its own reference
    state: dict = {"sock": None, "why": None}
    done = threading.Event()

    def watch():
        next_poll = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= deadline:
                state["why"] = "deadline"
            elif now >= next_poll:
                next_poll = now + CANCEL_POLL_S
                if _asked_to_stop(check):
                    state["why"] = "cancelled"
            if state["why"]:
                _abort(state["sock"])
                return
            if done.wait(max(0.0, min(deadline, next_poll) - time.monotonic())):
                return

    watcher = threading.Thread(target=watch, daemon=True, name="lwl-outbound-deadline")
    watcher.start()

    def stopped() -> Exception | None:
        if state["why"] == "cancelled":
            return Cancelled("cancel requested during the call")
        if state["why"] == "deadline":
            return DeadlineExceeded(f"no complete answer within the deadline of {timeout_s:g} s")
        return None

    conn = None
    try:
        last: OSError | None = None
        for address in addresses:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(f"no connection within the deadline of {timeout_s:g} s")
            conn = (_PinnedHTTPSConnection(parts.hostname, port, address, left, ssl.create_default_context())
                    if https else _PinnedHTTPConnection(parts.hostname, port, address, left))
            try:
                conn.connect()
                break
            except OSError as exc:
                last, conn = exc, None
                if state["why"]:
                    break
        if conn is None:
            raise stopped() or last or OSError("no address to connect to")
        state["sock"] = conn.sock
        if state["why"]:  # the watcher fired while connecting
            _abort(conn.sock)
        conn.request("POST", target, body=body, headers={**headers, "Connection": "close"})
        resp = conn.getresponse()
        declared = resp.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
            raise AnswerTooLarge(f"the answer declares {int(declared)} bytes; at most {max_bytes} are read")
        data = resp.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise AnswerTooLarge(f"the answer is longer than {max_bytes} bytes")
        why = stopped()  # a server that closed early after the abort: the partial answer is void
        if why is not None:
            raise why
        return Answer(resp.status, resp.headers, data)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        why = stopped()
        if why is not None and not isinstance(exc, DeadlineExceeded):
            raise why from None  # the abort surfaced as a reset or a short read
        raise
    finally:
        done.set()
        if conn is not None:
            conn.close()
