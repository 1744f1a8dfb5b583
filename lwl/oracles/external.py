"""Oracles that live outside lwl: ask/tell (``external``) and HTTP callbacks (``http``).

``external``: the labels come from a client. lwl itself cannot call it; the service's worker
pauses the job (``awaiting_labels``) and hands the batch out (``GET /v1/jobs/{id}/queries``).
Its ``label`` raises :class:`LabelsRequired` so a stepper loop knows to pause.
"""

from __future__ import annotations

from typing import Any

from lwl.oracles.base import Oracle, register_oracle


class LabelsRequired(Exception):
    """Raised by an ask/tell oracle: ``inputs`` must be labelled outside lwl first."""

    def __init__(self, inputs):
        super().__init__(f"{len(inputs)} inputs need labels from outside")
        self.inputs = inputs


@register_oracle("external")
class ExternalOracle(Oracle):
    """Ask/tell: labelled by a client of the service, ``batch_size`` inputs per batch."""

    external = True
    reports_failures = True  # a lab tells failed points (lwl.outcomes)

    def __init__(self, batch_size: int | None = None, webhook_url: str | None = None):
        super().__init__(None)
        self.batch_size = batch_size
        self.webhook_url = webhook_url

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "ExternalOracle":
        return cls(spec.get("batch_size"), spec.get("webhook_url"))

    def _label(self, inputs):
        raise LabelsRequired(inputs)
