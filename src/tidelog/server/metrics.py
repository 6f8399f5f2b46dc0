"""Prometheus metrics: records appended and read per topic, requests, latency, group lag.

Each app has its own registry, so several servers in one process (tests)
keep separate counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..log import Log
from ..records import BatchSent

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class GroupLagCollector(Collector):
    """Lag per group and partition, read from the log at scrape time."""

    def __init__(self, log: Log):
        self.log = log

    def collect(self) -> Iterator[GaugeMetricFamily]:
        committed = GaugeMetricFamily(
            "tidelog_group_committed_offset",
            "Committed offset of a group",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "tidelog_group_lag", "Records after the committed offset", labels=["group", "topic", "partition"]
        )
        for group in self.log.groups():
            for row in self.log.describe_group(group):
                labels = [group, row.topic, str(row.partition)]
                committed.add_metric(labels, row.committed)
                lag.add_metric(labels, row.lag)
        yield committed
        yield lag


class Metrics:
    def __init__(self, log: Log):
        self.registry = CollectorRegistry()
        r = self.registry
        self.appended = Counter("tidelog_records_appended", "Records appended", ["topic"], registry=r)
        self.read = Counter("tidelog_records_read", "Records handed to readers", ["topic"], registry=r)
        self.requests = Counter(
            "tidelog_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "tidelog_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.commits = Counter("tidelog_group_commits", "Transactions of the group-commit writer", registry=r)
        r.register(GroupLagCollector(log))

    def written(self, sent: list[BatchSent]) -> None:
        self.commits.inc()
        by_topic: dict[str, int] = {}
        for s in sent:
            by_topic[s.topic] = by_topic.get(s.topic, 0) + s.count
        for topic, n in by_topic.items():
            self.appended.labels(topic).inc(n)

    def records_read(self, topic: str, n: int) -> None:
        if n:
            self.read.labels(topic).inc(n)


class MetricsMiddleware:
    """Counts requests and times them, labelled by route template (not raw path)."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            method = scope["method"]
            self.metrics.requests.labels(method, path, str(status)).inc()
            self.metrics.latency.labels(method, path).observe(time.perf_counter() - start)
