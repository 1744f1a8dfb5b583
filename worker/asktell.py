"""The worker's side of ask/tell: an oracle whose labels come from the job store.

``label(inputs)`` returns the stored labels of the round whose inputs hash to the same key;
otherwise it opens the round (batches of ``batch_size``) or finds it still open, and raises
:class:`AwaitLabels` so the slice pauses the job in ``awaiting_labels`` and frees the worker.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import urllib.request

import numpy as np

from lwl import webhooks
from lwl.oracles import Oracle
from lwl.oracles.http import URLNotAllowed, check_url
from service.core.store import Store

log = logging.getLogger("lwl.asktell")


class AwaitLabels(Exception):
    def __init__(self, batch_ids: list[str], new_round: bool):
        super().__init__(f"awaiting labels for {len(batch_ids)} batch(es)")
        self.batch_ids, self.new_round = batch_ids, new_round


def round_key(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype=np.float64).tobytes()).hexdigest()[:32]


class StoreOracle(Oracle):
    name = "external"

    def __init__(self, store: Store, job_id: str, lease: str, batch_size: int | None):
        super().__init__(None)
        self.store, self.job_id, self.lease, self.batch_size = store, job_id, lease, batch_size

    def _label(self, inputs):
        x = np.asarray(inputs, dtype=np.float64)
        key = round_key(x)
        batches = self.store.round_batches(self.job_id, key)
        if batches and all(b["labels"] is not None for b in batches):
            return np.concatenate([np.load(io.BytesIO(b["labels"]), allow_pickle=False) for b in batches])
        if batches:
            raise AwaitLabels([b["batch_id"] for b in batches if b["labels"] is None], new_round=False)
        ids = self.store.open_round(self.job_id, self.lease, key, x, self.batch_size)
        raise AwaitLabels(ids, new_round=True)


def announce(webhook_url: str | None, job_id: str, batch_ids: list[str]) -> None:
    """POST a signed ``lwl.queries`` event (best effort: a lab can always poll)."""
    if not webhook_url:
        return
    body = json.dumps({"type": "lwl.queries", "job_id": job_id, "batch_ids": batch_ids,
                       "queries_url": f"/v1/jobs/{job_id}/queries"}).encode()
    try:
        check_url(webhook_url)
        req = urllib.request.Request(webhook_url, data=body, method="POST", headers={
            "Content-Type": "application/json", **webhooks.headers(os.environ.get("LWL_WEBHOOK_SECRET"), body)})
        urllib.request.urlopen(req, timeout=10).close()
    except (URLNotAllowed, OSError) as exc:
        log.warning("job %s: webhook to %s failed: %s", job_id, webhook_url, exc)
