"""Operator settings, read from ``LWL_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LWL_", extra="ignore")

    data_dir: Path = Field(default=Path("lwl-data"), description="embedded mode: SQLite store and broker")
    database_url: str | None = Field(default=None, description="default sqlite:///DATA_DIR/lwl.db")
    broker_url: str | None = Field(default=None, description="default sqla+sqlite:///DATA_DIR/broker.db")
    api_keys: str = Field(default="", description='"owner1:key1,owner2:key2"; empty = no auth')
    max_body_bytes: int = 64 * 1024 * 1024
    max_dataset_bytes: int = 64 * 1024 * 1024
    max_samples: int = 20_000_000  # floats per sampling request
    # the HTTP server's own limits (service.guard; docs/service.md "Security")
    max_header_bytes: int = Field(default=32 * 1024, ge=1024, description="request line + headers; 431 above")
    max_headers: int = Field(default=100, ge=8, description="header fields per request; 431 above")
    header_timeout_s: float = Field(default=10.0, gt=0, description="a request's head must arrive within this")
    body_timeout_s: float = Field(default=60.0, gt=0, description="a request's body must arrive within this (408)")
    keep_alive_s: float = Field(default=5.0, gt=0, description="an idle keep-alive connection is closed after this")
    slice_seconds: float = 60.0  # one Celery task steps a job at most this long
    max_attempts: int = 3  # slices that started without finishing, before the job fails
    heartbeat_seconds: float = 2.0
    # a running job whose heartbeat (every heartbeat_seconds, from a thread of its slice) is older
    # is re-enqueued from its checkpoint; the lease and generation fence a slow-but-alive slice
    stale_seconds: float = 10.0
    reaper_interval: float = 2.0
    # a queued job not taken this long after its last slice message, while its broker queue holds
    # fewer messages than there are queued jobs, is sent again (service.core.dispatch)
    redispatch_seconds: float = Field(default=20.0, gt=0)
    # ...and one whose last message is older than this is sent again whatever the broker holds:
    # stale copies (messages of ended jobs or old generations) count in the broker's size too
    redispatch_hold_seconds: float = Field(default=300.0, gt=0)
    # how long a worker's slice waits for an unreachable store before giving its message back
    # to the broker (service.core.outage); below Redis' visibility timeout (1 h)
    store_wait_seconds: float = Field(default=1800.0, gt=0)
    worker_device: str = Field(default="auto", description="auto|cpu|cuda for jobs whose spec says auto")
    # a worker process exits after this many slices, or when its resident memory passes this
    # many MiB, once its slice has ended (0: never); lwl serve, lwl worker --gpus and compose's
    # restart policy start a fresh one, so leaks and fragmented GPU memory do not pile up
    worker_max_slices: int = Field(default=0, ge=0)
    worker_max_rss_mb: float = Field(default=0.0, ge=0)
    metrics_public: bool = Field(
        default=True, description="GET /metrics without a key (for a Prometheus scraper on a private network); "
                                  "false: the bearer key of any owner is required")

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'lwl.db').resolve()}"

    def resolved_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{(self.data_dir / 'broker.db').resolve()}"

    def owners_by_key(self) -> dict[str, str]:
        out = {}
        for item in filter(None, (p.strip() for p in self.api_keys.split(","))):
            owner, sep, key = item.partition(":")
            if not sep or not owner or not key:
                raise ValueError("LWL_API_KEYS: expected 'owner:key' pairs separated by commas")
            out[key] = owner
        return out


@lru_cache
def get_settings() -> Settings:
    return Settings()


def use_data_dir(data_dir) -> None:
    """``--data-dir`` of ``lwl serve`` / ``lwl worker``: the embedded store and broker's folder,
    passed on as LWL_DATA_DIR so that settings read later (and worker processes) see it."""
    import os

    if data_dir is not None:
        os.environ["LWL_DATA_DIR"] = str(data_dir)
