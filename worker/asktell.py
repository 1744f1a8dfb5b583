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
import http.client
import os

import numpy as np

from lwl import outbound, webhooks
from lwl.oracles import Oracle
from service.core.store import Store
from worker.fencing import Fence

log = logging.getLogger("lwl.asktell")


class AwaitLabels(Exception):
    def __init__(self, batch_ids: list[str], new_round: bool):
        super().__init__(f"awaiting labels for {len(batch_ids)} batch(es)")
        self.batch_ids, self.new_round = batch_ids, new_round


def round_key(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype=np.float64).tobytes()).hexdigest()[:32]


class StoreOracle(Oracle):
    name = "external"
    reports_failures = True  # failed points come back as NaN rows (lwl.outcomes)

    def __init__(self, store: Store, job_id: str, lease: str, batch_size: int | None, fence: Fence | None = None):
        super().__init__(None)
        self.store, self.job_id, self.lease, self.batch_size = store, job_id, lease, batch_size
        self.fence = fence

    def _label(self, inputs):
        if self.fence is not None:  # a slice that lost its lease opens no round
            self.fence.check(self.job_id)
        x = np.asarray(inputs, dtype=np.float64)
        key = round_key(x)
        batches = self.store.round_batches(self.job_id, key)
        if batches and all(b.labels is not None for b in batches):
            return np.concatenate([np.load(io.BytesIO(b.labels), allow_pickle=False) for b in batches])
        if batches:
            raise AwaitLabels([b.batch_id for b in batches if b.labels is None], new_round=False)
        if self.fence is not None:  # opening the round gives the lease back: no theft
            self.fence.release()
        ids = self.store.open_round(self.job_id, self.lease, key, x, self.batch_size)
        raise AwaitLabels(ids, new_round=True)


WEBHOOK_TIMEOUT_S = 10.0  # deadline of one announcement, the whole exchange


def announce(webhook_url: str | None, job_id: str, batch_ids: list[str]) -> None:
    """POST a signed ``lwl.queries`` event (best effort: a lab can always poll), through
    :mod:`lwl.outbound`: the allow-list checked on the address connected to, no redirects
    followed, a deadline of :data:`WEBHOOK_TIMEOUT_S` for the whole exchange."""
    if not webhook_url:
        return
    body = json.dumps({"type": "lwl.queries", "job_id": job_id, "batch_ids": batch_ids,
                       "queries_url": f"/v1/jobs/{job_id}/queries"}).encode()
    try:
        answer = outbound.post(webhook_url, body, {
            "Content-Type": "application/json", **webhooks.headers(os.environ.get("LWL_WEBHOOK_SECRET"), body)},
            timeout_s=WEBHOOK_TIMEOUT_S, max_bytes=64 * 1024)
    except (outbound.URLNotAllowed, outbound.AnswerTooLarge, outbound.Cancelled, OSError,
            http.client.HTTPException) as exc:
        log.warning("job %s: webhook to %s failed: %s", job_id, webhook_url, exc)
        return
    if 300 <= answer.status < 400:
        log.warning("job %s: webhook to %s answered HTTP %d, a redirect: not followed", job_id, webhook_url,
                    answer.status)
    elif not 200 <= answer.status < 300:
        log.warning("job %s: webhook to %s answered HTTP %d", job_id, webhook_url, answer.status)
