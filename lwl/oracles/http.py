"""The HTTP-callback oracle: labels come from a lab's endpoint.

For each batch the oracle POSTs ``{"batch_id": ..., "inputs": [[...], ...]}`` (JSON) to ``url``,
signed like a Standard Webhook when ``LWL_WEBHOOK_SECRET`` is set, and reads back
``{"labels": [...]}`` (JSON) or the labels as ``.npy`` bytes (``Content-Type:
application/x-npy``); for an operator job (:meth:`HttpOracle.expect_fields`) each label is a
solution field: ``labels`` is a list of rows, or the ``.npy`` an (n, p) array. Failed calls (connection errors, deadlines, 5xx, 429) are retried with
exponential backoff and full jitter until the job's attempt budget (``attempts``) is spent;
answers with the wrong shape or non-finite values, and redirects, fail the job at once, naming
the batch.

Calls go through :mod:`lwl.outbound`: only operator-allowed hosts
(``LWL_ORACLE_ALLOWED_HOSTS``), no loopback/private/link-local address outside
``LWL_ORACLE_ALLOWED_NETWORKS``, checked on the resolved address that the socket then connects
to, redirects never followed, and ``timeout_s`` a deadline for the whole call (connect, send,
the whole answer). A cancel of the job interrupts a call in flight
(:func:`lwl.outbound.cancellation`).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
from typing import Any

import numpy as np

from lwl import outbound, webhooks
from lwl.arrays import read_npy_bytes
from lwl.oracles.base import Oracle, as_numpy, register_oracle
from lwl.outbound import URLNotAllowed, check_url  # noqa: F401  (the spec checks URLs through here)

NPY = "application/x-npy"
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


def answer_limit(n: int, width: int = 1) -> int:
    """Bytes of answer read for a batch of ``n`` inputs with ``width`` values per label: 1 MiB
    plus 64 bytes per value (a JSON float takes at most about 25)."""
    return (1 << 20) + 64 * n * width


class OracleCallError(RuntimeError):
    """The lab endpoint failed for good (budget spent, bad answer); names the batch."""

    def __init__(self, batch_id: str, message: str):
        super().__init__(f"batch {batch_id}: {message}")
        self.batch_id = batch_id


@register_oracle("http")
class HttpOracle(Oracle):
    """Labels from a lab's HTTP endpoint (see the module docstring for the protocol).

    ``label_width``: None for one number per input; p for a field of p values per input (an
    operator job's solve, set by the job through :meth:`expect_fields`:
    :class:`lwl.design.budgeted_ama.BudgetedAMA`), which the lab answers as ``labels`` rows or an
    (n, p) ``.npy``."""

    label_width: int | None = None

    def expect_fields(self, width: int) -> None:
        """Answers are solution fields of ``width`` values per input (checked on every batch).
        A method, so that wrappers forwarding attributes (a counting oracle) reach this oracle."""
        self.label_width = int(width)

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
                answer = outbound.post(self.url, body, {
                    "Content-Type": "application/json", "Accept": f"application/json, {NPY}",
                    **webhooks.headers(self.secret, body)}, timeout_s=self.timeout_s,
                    max_bytes=answer_limit(len(x), self.label_width or 1))
            except (URLNotAllowed, outbound.AnswerTooLarge) as exc:
                raise OracleCallError(batch_id, str(exc)) from None
            except (OSError, http.client.HTTPException) as exc:  # DeadlineExceeded is a TimeoutError
                why = f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= answer.status < 300:
                    return self._parse(batch_id, x, answer.content_type, answer.body, self.label_width)
                if 300 <= answer.status < 400:
                    raise OracleCallError(batch_id, f"the lab answered HTTP {answer.status}, a redirect; "
                                                    "redirects are never followed (give the final URL)")
                if answer.status not in RETRY_STATUS:
                    raise OracleCallError(batch_id, f"the lab answered HTTP {answer.status}")
                why = f"HTTP {answer.status}"
            failures += 1
            self.attempts_left -= 1
            if self.attempts_left <= 0:
                raise OracleCallError(batch_id, f"the lab endpoint kept failing ({failures} failed calls, "
                                                f"last: {why}); the job's attempt budget is spent")
            # exponential backoff with full jitter (a cancel interrupts it)
            outbound.sleep(random.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))))

    @staticmethod
    def _parse(batch_id: str, x: np.ndarray, content_type: str, payload: bytes,
               width: int | None = None) -> np.ndarray:
        try:
            if content_type.startswith(NPY):
                y = read_npy_bytes(payload, max_bytes=len(payload))
            else:
                y = np.asarray(json.loads(payload)["labels"], dtype=np.float64)
        except Exception as exc:
            raise OracleCallError(batch_id, f"unreadable answer ({type(exc).__name__}: {exc})") from None
        y = np.asarray(y, dtype=np.float64)
        if width is None and y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        expected = (len(x),) if width is None else (len(x), width)
        if y.shape != expected:
            what = f"{len(x)} labels" if width is None else f"{len(x)} fields of {width} values"
            raise OracleCallError(batch_id, f"expected {what}, the lab sent shape {y.shape}")
        if not np.all(np.isfinite(y)):
            raise OracleCallError(batch_id, "the lab sent non-finite labels (NaN or infinity)")
        return y
