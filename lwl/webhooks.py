"""Standard Webhooks signatures (https://www.standardwebhooks.com), used for lwl's webhooks and
for the requests an HTTP-callback oracle sends to a lab.

Headers: ``webhook-id`` (unique message id), ``webhook-timestamp`` (Unix seconds) and
``webhook-signature: v1,<base64 HMAC-SHA256(key, f"{id}.{timestamp}.{body}")>`` where the key is
the base64-decoded secret after its ``whsec_`` prefix.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import uuid

TOLERANCE_S = 300


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def headers(secret: str | None, body: bytes, msg_id: str | None = None) -> dict[str, str]:
    """The three headers for ``body`` (signature only when a secret is configured)."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    ts = int(time.time())
    out = {"webhook-id": msg_id, "webhook-timestamp": str(ts)}
    if secret:
        out["webhook-signature"] = sign(secret, msg_id, ts, body)
    return out


def verify(secret: str, headers_: dict[str, str], body: bytes, tolerance_s: int = TOLERANCE_S) -> None:
    """Raise ValueError unless the headers carry a valid, recent signature of ``body``."""
    h = {k.lower(): v for k, v in headers_.items()}
    try:
        msg_id, ts = h["webhook-id"], int(h["webhook-timestamp"])
        given = h["webhook-signature"].split()
    except (KeyError, ValueError):
        raise ValueError("missing or malformed webhook-id / webhook-timestamp / webhook-signature") from None
    if abs(time.time() - ts) > tolerance_s:
        raise ValueError("webhook-timestamp outside the tolerance window")
    want = sign(secret, msg_id, ts, body)
    if not any(hmac.compare_digest(want, g) for g in given):
        raise ValueError("webhook-signature does not match")
