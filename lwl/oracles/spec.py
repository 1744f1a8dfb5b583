"""The job spec's ``oracle`` block (:class:`OracleSpec`): which registered oracle labels the
job's inputs, with its parameters; validated by building the oracle once."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from lwl.params import StrictModel


def _oracle_names(schema: dict) -> None:
    """The JSON schema's ``oracle.name`` lists the registered oracles (what the validator accepts)."""
    from lwl.oracles import oracle_names

    schema["properties"]["name"]["enum"] = oracle_names()


class OracleSpec(StrictModel):
    """The labelling oracle.

    Built-in functions (``sobol_g``, ``friedman1``, ``friedman2``, ``kernel_expansion``) take
    ``params``. ``external`` is ask/tell through the service (``batch_size`` inputs per batch,
    optional ``webhook_url`` announcing new queries); ``http`` posts batches to a lab's ``url``
    (``batch_size``; ``timeout_s``: the deadline of one call, the whole exchange, at most 600;
    ``attempts``: the job's budget of failed calls, at most 100).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra=_oracle_names)

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    batch_size: int | None = Field(default=None, ge=1, le=1_000_000)
    url: str | None = Field(default=None, max_length=2000)
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    attempts: int = Field(default=8, ge=1, le=100)
    webhook_url: str | None = Field(default=None, max_length=2000)
    _built: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _buildable(self):
        from lwl.oracles import make_oracle
        from lwl.oracles.http import URLNotAllowed, check_url

        if self.name in ("external", "http") and self.params:
            raise ValueError(f"params: the {self.name} oracle takes no params")
        if self.name != "http" and self.url is not None:
            raise ValueError("url: only the http oracle takes a url")
        if self.name != "external" and self.webhook_url is not None:
            raise ValueError("webhook_url: only the external oracle announces queries")
        if self.name == "http":
            if self.url is None:
                raise ValueError("url: the http oracle needs the lab's endpoint")
            try:
                check_url(self.url, resolve=False)  # the resolved address is checked at every call
            except URLNotAllowed as exc:
                raise ValueError(f"url: {exc}") from None
        if self.webhook_url is not None:
            try:
                check_url(self.webhook_url, resolve=False)
            except URLNotAllowed as exc:
                raise ValueError(f"webhook_url: {exc}") from None
        self._built = make_oracle(self.model_dump())  # raises "oracle.name: ..." / "oracle.params: ..."
        return self

    def __eq__(self, other: object) -> bool:  # the built oracle is a cache, not part of the value
        return isinstance(other, OracleSpec) and self.model_dump() == other.model_dump()

    def build(self):
        """The oracle, built once when the spec was validated (every check and the run share it)."""
        if self._built is None:
            from lwl.oracles import make_oracle

            self._built = make_oracle(self.model_dump())
        return self._built

    @property
    def is_external(self) -> bool:
        return self.name == "external"

    @property
    def is_lab(self) -> bool:
        """Labels come from a lab's own solver (ask/tell or its HTTP endpoint): an operator job's
        lab returns each solution field on its input's grid (lwl has no output grid of its own)."""
        return self.name in ("external", "http")
