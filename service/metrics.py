"""Prometheus metrics: request counts and latencies, job counts by state, iteration durations."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from service.core.store import Store


class _StoreCollector:
    def __init__(self, store: Store):
        self.store = store

    def collect(self):
        jobs = GaugeMetricFamily("lwl_jobs", "Jobs by state", labels=["status"])
        for status, n in self.store.counts_by_status().items():
            jobs.add_metric([status], n)
        yield jobs
        count, seconds = self.store.iteration_totals()
        yield CounterMetricFamily("lwl_iterations", "Algorithm iterations completed", value=count)
        yield CounterMetricFamily("lwl_iteration_seconds", "Seconds spent in algorithm iterations", value=seconds)


class Metrics:
    def __init__(self, store: Store):
        self.registry = CollectorRegistry()
        self.requests = Counter("lwl_http_requests", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("lwl_http_request_seconds", "HTTP request latency", ["route"],
                                 registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.registry.register(_StoreCollector(store))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
