"""Prometheus metrics of one App: HTTP requests, SMTP outcomes, verification waits, job
queue depth.

Each App owns its registry (no process-global state, so tests and several Apps in one
process never mix counts). The API serves it at ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _QueueDepth(Collector):
    """Pending and claimed jobs by type, read from the database at scrape time."""

    def __init__(self, read: Callable[[], list[tuple[str, str, int]]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "postroom_jobs", "Jobs in the durable queue by type and state", labels=["type", "state"]
        )
        try:
            rows = self._read()
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB is down
            rows = []
        for job_type, state, count in rows:
            family.add_metric([job_type, state], count)
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "postroom_http_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "postroom_http_request_duration_seconds",
            "HTTP request latency by route",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.smtp_messages = Counter(
            "postroom_smtp_messages",
            "SMTP messages accepted (250 after commit) or refused, by reply class",
            ["outcome"],
            registry=self.registry,
        )
        self.smtp_recipients = Counter(
            "postroom_smtp_recipients",
            "SMTP RCPT TO answers by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.code_waits = Gauge(
            "postroom_code_waits",
            "Verification waits (codes.wait long-polls) in progress",
            registry=self.registry,
        )
        self.code_waits_started = Counter(
            "postroom_code_waits_started",
            "Verification waits (codes.wait long-polls) begun",
            registry=self.registry,
        )
        self._queue_collector: _QueueDepth | None = None

    def watch_queue(self, read: Callable[[], list[tuple[str, str, int]]]) -> None:
        """Export the job queue's depth, read by ``read`` at each scrape."""
        if self._queue_collector is None:
            self._queue_collector = _QueueDepth(read)
            self.registry.register(self._queue_collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
