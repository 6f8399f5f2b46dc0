"""Prometheus metrics: records appended and read per topic, requests, latency,
group lag, members and owners, partition sizes and the last cleaning's figures.

Each app has its own registry, so several servers in one process (tests)
keep separate counts. Under `--workers N` the counters are prometheus_client's
multiprocess values (PROMETHEUS_MULTIPROC_DIR, set before the workers start),
so a scrape that lands on any worker sums every worker's counts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import Mount

from ...errors import UnknownTopic
from ...log import Log
from ...queues import queue_stats
from ...records import BatchSent

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

# Every label value of the request series comes from a closed set: what a
# client sends before it authenticates (a made-up method, a random path)
# must not make a series of its own. 20,000 made-up methods once made
# 20,001 series, +110 MB a process and a 40 MB scrape (issue 27).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"})
OTHER_METHOD = "other"
UNMATCHED = "unmatched"


def method_label(method: str) -> str:
    """The method as a label: a standard one as it is, anything else "other"."""
    return method if method in METHODS else OTHER_METHOD


def route_label(scope) -> str:
    """The route template the request matched (with its mount's prefix), else "unmatched"."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not path:
        return UNMATCHED
    # A route inside a Mount (the console) has its template relative to the
    # mount, whose prefix is in root_path by then; a Mount that matched last
    # (static files, or no route inside it) is that prefix itself.
    root = scope.get("root_path", "")
    return root if isinstance(route, Mount) else root + path


def status_label(status: int) -> str:
    """The status as a label: one the app answered (100-599), else its class."""
    return str(status) if 100 <= status <= 599 else "other"


class GroupLagCollector(Collector):
    """Per group, read from the log at scrape time: committed offset and lag
    per partition, members, generation, and which member owns each partition."""

    def __init__(self, log: Log):
        self.log = log

    def collect(self) -> Iterator[GaugeMetricFamily]:
        tp = ["group", "topic", "partition"]
        committed = GaugeMetricFamily(
            "tidelog_group_committed_offset", "Committed offset of a group", labels=tp
        )
        lag = GaugeMetricFamily("tidelog_group_lag", "Records after the committed offset", labels=tp)
        members = GaugeMetricFamily(
            "tidelog_group_members", "Live members of a stream group", labels=["group"]
        )
        generation = GaugeMetricFamily(
            "tidelog_group_generation", "Assignment generation of a stream group", labels=["group"]
        )
        owner = GaugeMetricFamily(
            "tidelog_group_partition_owner",
            "1 for the member that holds a partition",
            labels=[*tp, "member"],
        )
        for group in self.log.groups():
            held = self.log.group(group).members()
            subscribed = sorted({t for m in held for t in m.topics})
            if held:
                members.add_metric([group], len(held))
                generation.add_metric([group], held[0].generation)
                for m in held:
                    for topic, partition in m.partitions:
                        owner.add_metric([group, topic, str(partition), m.member], 1)
            for row in self.log.describe_group(group, subscribed):
                labels = [group, row.topic, str(row.partition)]
                committed.add_metric(labels, row.committed)
                lag.add_metric(labels, row.lag)
        yield from (committed, lag, members, generation, owner)


class TopicCollector(Collector):
    """Per partition: first and last offset, records and bytes held; per
    topic: the figures of its last cleaning. Read at scrape time (the byte
    count sums the partition, so a scrape of a large log reads it)."""

    def __init__(self, log: Log):
        self.log = log

    def collect(self) -> Iterator[GaugeMetricFamily]:
        tp = ["topic", "partition"]
        first = GaugeMetricFamily(
            "tidelog_partition_first_offset", "Offset of the oldest record held", labels=tp
        )
        last = GaugeMetricFamily("tidelog_partition_last_offset", "Offset of the newest record", labels=tp)
        records = GaugeMetricFamily("tidelog_partition_records", "Records held", labels=tp)
        size = GaugeMetricFamily("tidelog_partition_bytes", "Value and metadata bytes held", labels=tp)
        clean = {
            key: GaugeMetricFamily(f"tidelog_last_clean_{key}", help_text, labels=["topic"])
            for key, help_text in (
                ("removed", "Records the last cleaning removed"),
                ("bytes_removed", "Bytes the last cleaning removed"),
                ("compacted", "Records the last cleaning removed by compaction"),
                ("duration_ms", "How long the last cleaning took"),
                ("at", "When the last cleaning ran (ms since epoch)"),
            )
        }
        for info in self.log.topics():
            try:
                parts = self.log.describe(info.name).partitions
                report = self.log.last_clean(info.name)
            except UnknownTopic:  # deleted meanwhile
                continue
            for p in parts:
                labels = [info.name, str(p.partition)]
                first.add_metric(labels, p.first_offset)
                last.add_metric(labels, p.last_offset)
                records.add_metric(labels, p.records)
                size.add_metric(labels, p.bytes)
            for key, family in clean.items():
                if report and key in report:
                    family.add_metric([info.name], report[key])
        yield from (first, last, records, size, *clean.values())


class QueueCollector(Collector):
    """Per queue group, read at scrape time: records by state (available, in
    flight, delayed, dead-lettered) and the age of the oldest available one."""

    def __init__(self, log: Log):
        self.log = log

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "tidelog_queue_messages", "Records of a queue group by state", labels=["topic", "group", "state"]
        )
        oldest = GaugeMetricFamily(
            "tidelog_queue_oldest_available_age_seconds",
            "How long the oldest available record has been available (since its append or "
            "deliver-at; a nack or an expired lease does not reset it)",
            labels=["topic", "group"],
        )
        for topic, group in self.log.queue_groups():
            try:
                s = queue_stats(self.log, topic, group)
            except UnknownTopic:  # deleted meanwhile
                continue
            for state in ("available", "in_flight", "delayed", "dead_lettered"):
                depth.add_metric([topic, group, state], getattr(s, state))
            oldest.add_metric([topic, group], s.oldest_available_age_ms / 1000)
        yield from (depth, oldest)


# /proc/PID/status fields, by the kind the memory gauge labels them with.
MEMORY_FIELDS = {"VmRSS:": "resident", "RssAnon:": "anonymous", "RssFile:": "file", "RssShmem:": "shared"}


def _status_memory(pid: int) -> dict[str, int]:
    """A process's memory by kind, in bytes, from /proc (empty where there is none)."""
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                fields = line.split()  # "VmRSS:", "140072", "kB"
                kind = MEMORY_FIELDS.get(fields[0]) if fields else None
                if kind is not None:
                    found[kind] = int(fields[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return found


def _server_pids() -> list[int]:
    """This process, or under --workers N the supervisor and every worker (its children)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return [os.getpid()]
    root = os.getppid()
    pids = [root]
    try:
        for task in os.listdir(f"/proc/{root}/task"):
            with open(f"/proc/{root}/task/{task}/children") as f:
                pids += [int(c) for c in f.read().split()]
    except OSError:
        return [os.getpid()]
    return pids


class MemoryCollector(Collector):
    """The server's memory by kind, summed over its processes (Linux).

    Alert on `anonymous`: the heap and every other page only this server
    holds. `resident` also counts file pages mapped in, above all SQLite's
    memory-mapped database (store/sqlite, mmap_size), which the kernel takes
    back under pressure and which reads the size of the file's hot part: a
    resident size that stays high after a burst of reads is not a leak.
    """

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tidelog_memory_bytes",
            "The server's memory (every process of it) by kind: resident (all pages in RAM),"
            " anonymous (its own: alert on this), file (mapped files, SQLite's pages among them),"
            " shared (shared memory)",
            labels=["kind"],
        )
        totals: dict[str, int] = {}
        for pid in _server_pids():
            for kind, value in _status_memory(pid).items():
                totals[kind] = totals.get(kind, 0) + value
        for kind in MEMORY_FIELDS.values():
            if kind in totals:
                family.add_metric([kind], totals[kind])
        yield family


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
        self.disconnects = Counter(
            "tidelog_http_client_disconnects",
            "HTTP requests whose client went away before the answer",
            registry=r,
        )
        self.auth = Counter(
            "tidelog_auth_refusals",
            "Authentications refused, by front (http, console, resp, kafka) and outcome: failed (a wrong"
            " token) or throttled (refused unread: the address failed too often, server/throttle.py)",
            ["front", "outcome"],
            registry=r,
        )
        self.commits = Counter("tidelog_group_commits", "Transactions of the group-commit writer", registry=r)
        qg = ["topic", "group"]
        self.deliveries = Counter(
            "tidelog_queue_deliveries", "Records a queue group handed out over HTTP", qg, registry=r
        )
        self.acks = Counter("tidelog_queue_acks", "Records acked over HTTP", qg, registry=r)
        self.dead_letters = Counter(
            "tidelog_queue_dead_letters",
            "Records rejected to the dead-letter topic over HTTP",
            qg,
            registry=r,
        )
        # What a scrape reads: this registry, or every process's counters
        # (read from their files) when several share the port.
        self.exposed = r
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            self.exposed = CollectorRegistry()
            multiprocess.MultiProcessCollector(self.exposed)
        for collector in (
            GroupLagCollector(log),
            TopicCollector(log),
            QueueCollector(log),
            MemoryCollector(),
        ):
            self.exposed.register(collector)

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
    """Counts requests and times them, labelled by method, route template
    and status, each from a closed set (`method_label`, `route_label`)."""

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
            method, route = method_label(scope["method"]), route_label(scope)
            self.metrics.requests.labels(method, route, status_label(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)
