"""The worker's Prometheus metrics, in a registry of its own.

Counters move as batches are delivered or fail; lag is computed from the
log when `/metrics` is scraped (the group's committed offset against the
partition's last offset), so it is never stale and costs nothing between
scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..errors import ConfigurationError
from ..log import Log
from .config import WorkerConfig

LABELS = ("group", "topic", "partition")


class Metrics:
    def __init__(self, log: Log, config: WorkerConfig):
        self.registry = CollectorRegistry()
        self.batches = Counter(
            "tidelog_worker_batches_delivered",
            "Batches the endpoint accepted (2xx) and the group committed.",
            LABELS,
            registry=self.registry,
        )
        self.records = Counter(
            "tidelog_worker_records_delivered",
            "Records in delivered batches.",
            LABELS,
            registry=self.registry,
        )
        self.failures = Counter(
            "tidelog_worker_failures",
            "Failed posts by cause: http_<status>, timeout or connection.",
            (*LABELS, "cause"),
            registry=self.registry,
        )
        self.registry.register(_Lag(log, config))
        self._server: Any = None

    def delivered(self, group: str, topic: str, partition: int, records: int, batches: int = 1) -> None:
        labels = (group, topic, str(partition))
        self.batches.labels(*labels).inc(batches)
        self.records.labels(*labels).inc(records)

    def failed(self, group: str, topic: str, partition: int, cause: str) -> None:
        self.failures.labels(group, topic, str(partition), cause).inc()

    def value(self, name: str, **labels: Any) -> float:
        """A sample's current value (0 when never set): for tests and benchmarks."""
        found = self.registry.get_sample_value(name, {k: str(v) for k, v in labels.items()})
        return found or 0.0

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Serve /metrics on a thread; returns the port (useful with 0)."""
        try:
            self._server, _thread = start_http_server(port, host, registry=self.registry)
        except OSError as e:
            raise ConfigurationError(f"cannot serve /metrics on port {port}: {e.strerror or e}") from None
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Lag(Collector):
    def __init__(self, log: Log, config: WorkerConfig):
        self.log = log
        self.wanted: dict[tuple[str, str], set[int]] = {}
        for f in config.feeds:
            self.wanted.setdefault((f.group, f.topic), set()).update(f.partitions or ())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "tidelog_worker_lag", "Records after the group's committed offset, per partition.", labels=LABELS
        )
        for (group, topic), partitions in sorted(self.wanted.items()):
            for row in self.log.describe_group(group, [topic]):
                if row.topic == topic and row.partition in partitions:
                    gauge.add_metric([group, topic, str(row.partition)], row.lag)
        yield gauge
