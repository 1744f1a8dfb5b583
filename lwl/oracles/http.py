"""The HTTP-callback oracle: labels come from a lab's endpoint.

For each batch the oracle POSTs ``{"batch_id": ..., "inputs": [[...], ...]}`` (JSON) to ``url``,
signed like a Standard Webhook when ``LWL_WEBHOOK_SECRET`` is set, and reads back
``{"labels": [...]}`` (JSON) or the labels as ``.npy`` bytes (``Content-Type:
application/x-npy``). Failed calls (connection errors, timeouts, 5xx, 429) are retried with
exponential backoff and full jitter until the job's attempt budget (``attempts``) is spent;
answers with the wrong shape or non-finite values fail the job at once, naming the batch.

Only operator-allowed hosts are called (``LWL_ORACLE_ALLOWED_HOSTS``, comma-separated names
or addresses). Loopback, private, link-local (cloud metadata at 169.254.169.254 included),
multicast and reserved addresses are refused unless they fall in
``LWL_ORACLE_ALLOWED_NETWORKS`` (CIDRs), and the check runs on the resolved addresses before
every call.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import random
import socket
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from lwl import webhooks
from lwl.oracles.base import Oracle, as_numpy, register_oracle

NPY = "application/x-npy"
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


class OracleCallError(RuntimeError):
    """The lab endpoint failed for good (budget spent, bad answer); names the batch."""

    def __init__(self, batch_id: str, message: str):
        super().__init__(f"batch {batch_id}: {message}")
        self.batch_id = batch_id


class URLNotAllowed(ValueError):
    pass


def _env_list(name: str) -> list[str]:
    return [p.strip() for p in os.environ.get(name, "").split(",") if p.strip()]


def check_url(url: str, resolve: bool = True) -> list[str]:
    """Refuse URLs the operator did not allow; returns the resolved addresses.

    ``resolve=False`` checks only the scheme and the host name (the API does this at submission;
    the worker checks the resolved addresses at every call).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise URLNotAllowed(f"{url!r} is not an http(s) URL with a host")
    host = parts.hostname
    allowed = _env_list("LWL_ORACLE_ALLOWED_HOSTS")
    if host not in allowed and "*" not in allowed:
        raise URLNotAllowed(f"host {host!r} is not in LWL_ORACLE_ALLOWED_HOSTS")
    nets = []
    for cidr in _env_list("LWL_ORACLE_ALLOWED_NETWORKS"):
        try:
            nets.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise URLNotAllowed(f"LWL_ORACLE_ALLOWED_NETWORKS: {cidr!r} is not a network") from None
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if not resolve and literal is None:
        return []
    try:
        infos = [literal] if literal else {ipaddress.ip_address(i[4][0]) for i in socket.getaddrinfo(
            host, parts.port or (443 if parts.scheme == "https" else 80), proto=socket.IPPROTO_TCP)}
    except socket.gaierror as exc:
        raise URLNotAllowed(f"host {host!r} does not resolve: {exc}") from None
    for ip in infos:
        special = (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
                   or ip.is_reserved or ip.is_unspecified)
        if special and not any(ip in n for n in nets):
            raise URLNotAllowed(f"{host!r} resolves to {ip}, a loopback/private/link-local address "
                                "not in LWL_ORACLE_ALLOWED_NETWORKS")
    return [str(ip) for ip in infos]


@register_oracle("http")
class HttpOracle(Oracle):
    """Labels from a lab's HTTP endpoint (see the module docstring for the protocol)."""

    def __init__(self, url: str, batch_size: int | None = None, timeout_s: float = 30.0, attempts: int = 8,
                 backoff_s: float | None = None, max_backoff_s: float = 30.0):
        super().__init__(None)
        self.url, self.batch_size, self.timeout_s = url, batch_size, timeout_s
        self.attempts_left = attempts
        self.backoff_s = float(os.environ.get("LWL_ORACLE_BACKOFF_S", "0.5")) if backoff_s is None else backoff_s
        self.max_backoff_s = max_backoff_s
        self.secret = os.environ.get("LWL_WEBHOOK_SECRET") or None

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "HttpOracle":
        return cls(spec["url"], spec.get("batch_size"), spec.get("timeout_s", 30.0), spec.get("attempts", 8))

    def _label(self, inputs):
        x = np.ascontiguousarray(as_numpy(inputs), dtype=np.float64)
        size = self.batch_size or len(x)
        # batch ids derive from the inputs, so a retried or resumed call names the same batch
        key = hashlib.sha256(x.tobytes()).hexdigest()[:12]
        parts = [self._call(f"{key}.{pos}", x[i:i + size]) for pos, i in enumerate(range(0, len(x), size))]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _call(self, batch_id: str, x: np.ndarray) -> np.ndarray:
        body = json.dumps({"batch_id": batch_id, "inputs": x.tolist()}).encode()
        failures = 0
        while True:
            try:
                check_url(self.url)  # on the resolved address, at every call
                req = urllib.request.Request(self.url, data=body, method="POST", headers={
                    "Content-Type": "application/json", "Accept": f"application/json, {NPY}",
                    **webhooks.headers(self.secret, body)})
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return self._parse(batch_id, x, resp.headers.get("Content-Type", ""), resp.read())
            except URLNotAllowed as exc:
                raise OracleCallError(batch_id, str(exc)) from None
            except urllib.error.HTTPError as exc:
                if exc.code not in RETRY_STATUS:
                    raise OracleCallError(batch_id, f"the lab answered HTTP {exc.code}") from None
                why = f"HTTP {exc.code}"
            except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError) as exc:
                why = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            failures += 1
            self.attempts_left -= 1
            if self.attempts_left <= 0:
                raise OracleCallError(batch_id, f"the lab endpoint kept failing ({failures} failed calls, "
                                                f"last: {why}); the job's attempt budget is spent")
            # exponential backoff with full jitter
            time.sleep(random.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))))

    @staticmethod
    def _parse(batch_id: str, x: np.ndarray, content_type: str, payload: bytes) -> np.ndarray:
        try:
            if content_type.startswith(NPY):
                y = np.load(io.BytesIO(payload), allow_pickle=False)
            else:
                y = np.asarray(json.loads(payload)["labels"], dtype=np.float64)
        except Exception as exc:
            raise OracleCallError(batch_id, f"unreadable answer ({type(exc).__name__}: {exc})") from None
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.shape != (len(x),):
            raise OracleCallError(batch_id, f"expected {len(x)} labels, the lab sent shape {y.shape}")
        if not np.all(np.isfinite(y)):
            raise OracleCallError(batch_id, "the lab sent non-finite labels (NaN or infinity)")
        return y
