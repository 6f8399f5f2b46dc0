"""What the differential suite (tests/kafka/) compares: a broker to run a scenario on, and
a response as the values a client reads from it.

    def test_x(kafka, tidelog):
        assert scenario(tidelog) == scenario(kafka)

A `Target` is Apache Kafka (the reference, tests/kafka_reference.py) or `tidelog
serve` on SQLite, or on PostgreSQL with two serves over one database (its second
broker is another process: a scenario that reads from `second` what it wrote
to `first` checks they agree). `seen(response)` turns kio's dataclasses into
plain values and normalises what must differ between two clusters and nothing
else: the cluster id, node ids, hosts and ports, throttle times and topic ids
(random in each). Every other difference fails the comparison, unless the
test names it as one of the deliberate differences of docs/guides/kafka.md
(`differences.py`).
"""

from __future__ import annotations

import datetime
import enum
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from kafka_wire import KafkaWire

WAIT_S = 30

# Fields that name the cluster rather than say something about what it holds.
NODE_FIELDS = frozenset(
    {
        "node_id",
        "leader_id",
        "controller_id",
        "coordinator_id",
        "broker_id",
        "host",
        "port",
        "cluster_id",
        "replica_nodes",
        "isr_nodes",
        "offline_replicas",
        "eligible_leader_replicas",
        "last_known_elr",
        "broker_epoch",
    }
)
NORMALISED = NODE_FIELDS | {"throttle_time", "topic_id"}


@dataclass(frozen=True)
class Target:
    """A cluster under test: its brokers' addresses and, for tidelog, its store."""

    name: str  # "kafka", "sqlite" or "postgres"
    bootstraps: tuple[str, ...]
    store: str | None = None  # tidelog's store URL (tests/dumps.py); None for Kafka

    @property
    def bootstrap(self) -> str:
        return self.bootstraps[0]

    @property
    def second(self) -> str:
        """Another broker of the cluster where there is one (PostgreSQL), else the first."""
        return self.bootstraps[-1]

    @property
    def is_kafka(self) -> bool:
        return self.name == "kafka"

    def wire(self, which: int = 0) -> KafkaWire:
        host, port = self.bootstraps[which].rsplit(":", 1)
        return KafkaWire(host, int(port))

    def __str__(self) -> str:
        return self.name


def plain(value: Any) -> Any:
    """kio's response as dicts, lists and ints (an error code as its number, a duration in ms)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def seen(response: Any, drop: frozenset[str] = frozenset()) -> Any:
    """What a client reads from `response`, but the fields that name the cluster
    (NORMALISED: set to "*" where the response has a value) and `drop` (left out)."""
    return _normalise(plain(response), drop)


def _normalise(value: Any, drop: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: ("*" if k in NORMALISED and v not in (None, -1) else _normalise(v, drop))
            for k, v in value.items()
            if k not in drop
        }
    if isinstance(value, list):
        return [_normalise(v, drop) for v in value]
    return value


def until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Poll `check` until it returns something true; that value. Fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# The deliberate differences: each is named by the tests that meet it (`differs`), and
# docs/guides/kafka.md carries them as a table that tests/kafka/test_diff_guide.py checks.
DIFFERENCES = {
    "broker-per-serve": "each `tidelog serve` is a broker that answers Metadata with itself alone, the leader "
    "of every partition and the coordinator of every group (node ids, hosts and ports are not compared); "
    "Kafka's brokers list one another and share the partitions out",
    "internal-topics": "Kafka lists its internal topics (`__consumer_offsets`); tidelog has none to list",
    "newest-versions": "tidelog serves no version that needs topic ids (Produce 13, Fetch 13, Metadata 13, "
    "OffsetCommit 10, OffsetFetch 8 and later) nor the APIs of transactions, ACLs, quotas, KIP-848 and share groups",
    "commit-past-the-end": "an OffsetCommit past a partition's end is refused (`OFFSET_OUT_OF_RANGE`): "
    "Kafka keeps any offset",
    "max-message-bytes": "a topic's `max.message.bytes` bounds each record, 1 MiB (1048576) by default; "
    "Kafka's bounds a batch, 1048588 by default",
    "config-details": "DescribeConfigs answers tidelog's six topic settings and its serve flags, "
    "without Kafka's broker-level synonyms, documentation and the other settings Kafka lists",
    "refused-commit-group": "an OffsetCommit from outside a group (a tool's) that commits nothing leaves no "
    "group behind, as Kafka's does but where every partition was refused as `OFFSET_METADATA_TOO_LARGE`: "
    "its coordinator then keeps an empty group in memory, which DeleteGroups deletes",
    "replicas": "Kafka 4 makes a topic with `min.insync.replicas` and describes its partitions' eligible "
    "leader replicas (DescribeTopicPartitions, which `kafka-topics --describe` uses); tidelog keeps no "
    "replicas: it has neither setting nor API, and the tool prints N/A for them",
}


def differs(key: str) -> str:
    """Name a deliberate difference where a test meets it (DIFFERENCES)."""
    assert key in DIFFERENCES, key
    return key


def without_internal(topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metadata's topics but Kafka's internal ones (`differs("internal-topics")`)."""
    differs("internal-topics")
    return [t for t in topics if not (t.get("name") or "").startswith("__")]
