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
from tidelog.server.kafka.wire import APIS

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
    "newest-versions": "tidelog's newest versions stop below Kafka 4.4's: before a version that needs topic ids "
    "(Produce 13, Fetch 13, Metadata 13, OffsetCommit 10, OffsetFetch 8, DeleteTopics 6), and below the newest "
    "ListOffsets (8-11), FindCoordinator (5-6), DescribeGroups (6), ListGroups (5), ApiVersions (4), InitProducerId "
    "(5), DescribeCluster (2) and DeleteGroups (3), which add tiered storage's and share groups' asks, group types, "
    "fenced brokers, transactions' error codes and the like (a client uses the newest version both offer); the "
    "APIs of transactions, ACLs, quotas, KIP-848 and share groups are not served",
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
    "cleanup-policy-order": "a topic that both deletes and compacts has `cleanup.policy` `compact,delete` however "
    "the two were named; Kafka keeps them in the order they were set or appended",
    "empty-cleanup-policy": "an IncrementalAlterConfigs SUBTRACT that would leave `cleanup.policy` empty is refused "
    "(`INVALID_CONFIG`): a tidelog topic deletes, compacts or both; Kafka 4 keeps the empty list (nothing deleted, "
    "nothing compacted)",
    "features": "ApiVersions lists no features; Kafka's names the versions of what a KRaft cluster runs "
    "(`metadata.version`, `kraft.version`, `group.version`, `transaction.version`, ...), none of which tidelog has",
    "record-batches": "a Fetch answers with the producer's batch as it came where the store kept it (compressed "
    "batches on SQLite), else with the records in a batch made for the answer, and may stop at a kept batch: a "
    "consumer reads the same records, but not always as many in one answer, and within a byte limit smaller "
    "than a batch Kafka answers its first whole batch where tidelog answers its first record",
    "produce-log-start": "a Produce answer's `log_start_offset` is -1 (unknown), so that a write reads nothing "
    "more; Kafka answers the partition's log start, also to a batch it refused once it found the partition "
    "(Fetch and ListOffsets answer it on both)",
    "produce-creates": "with auto-create on (`tidelog serve`'s default), a Produce to a missing topic makes it, "
    "as a write of every other front does; Kafka's Produce answers `UNKNOWN_TOPIC_OR_PARTITION` and only a "
    "Metadata request makes the topic, which a client then asks for before it sends again",
    "produce-null-records": "a Produce whose records are null is answered `INVALID_RECORD`; Kafka fails inside "
    "on it and never answers",
    "idempotent-producers": "a retried batch (the same producer id, epoch and sequence) is written once and "
    "answered with its first offsets, as on Kafka, but sequences are not checked: Kafka refuses a gap or a "
    "stale epoch (`OUT_OF_ORDER_SEQUENCE_NUMBER`) where tidelog writes the batch, and answers a retry with its "
    "batch's time as `log_append_time` where tidelog answers -1",
    "no-timestamp": "a record sent without a timestamp (-1) gets the log's clock; Kafka keeps -1",
    "log-append-time": "topics have no `message.timestamp.type`: every record keeps its producer's timestamp "
    "(CreateTime), and a topic asked for with `LogAppendTime` is refused (`INVALID_CONFIG`)",
    "rebalance-leader": "the member whose JoinGroup completes a rebalance leads the new generation, as its answer "
    "comes inside its own request (a client that drops an answer that came between its polls joins again, and a "
    "leader that did would start a rebalance each generation); Kafka's leader stays while it is a member",
    "unknown-member-join": "a JoinGroup naming a member id the group does not have joins it as that member "
    "(tidelog keeps no list of the ids it handed out to members yet to join, KIP-394's pending members); "
    "Kafka answers `UNKNOWN_MEMBER_ID`, and the client joins again without an id",
    "replication-factor": "CreateTopics takes any replication factor above 0 (a store keeps one durable copy, and "
    "tools often ask for 3) and answers 1; Kafka refuses one above its number of brokers "
    "(`INVALID_REPLICATION_FACTOR`)",
    "timestamps-rise": "ListOffsets by time (and for the max timestamp) searches the records as if timestamps "
    "rose with offsets, as the log's clock does; Kafka keeps a time index of the largest timestamp so far, so "
    "where a producer's clock steps back, tidelog may answer a later record than Kafka",
}


def differs(key: str) -> str:
    """Name a deliberate difference where a test meets it (DIFFERENCES)."""
    assert key in DIFFERENCES, key
    return key


def without_internal(topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metadata's topics but Kafka's internal ones (`differs("internal-topics")`)."""
    differs("internal-topics")
    return [t for t in topics if not (t.get("name") or "").startswith("__")]


def versions(api_key: int) -> range:
    """The versions of an API the listener serves (its table, tidelog.server.kafka.wire.APIS),
    which the suite compares one by one with Kafka's answers."""
    _, lowest, highest = APIS[api_key]
    return range(lowest, highest + 1)


def clip(api_key: int, version: int) -> int:
    """`version` brought within the versions the listener serves of `api_key`: a
    scenario of several APIs runs at the n-th version of each where it has one."""
    served = versions(api_key)
    return max(served.start, min(version, served.stop - 1))


def make_topic(target: Target, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> Any:
    """CreateTopics of `topic`; returns once every broker of the cluster knows it
    (Kafka's brokers learn of a topic a moment after it is made)."""
    with target.wire() as wire:
        made = wire.call(
            19,
            7,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                    }
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
    assert made.topics[0].error_code == 0, made
    # Kafka's broker leads the new partitions once its metadata and its logs have them:
    # a ListOffsets of each partition answered without error says both happened
    # (Metadata alone may name the topic while a Produce still finds NOT_LEADER_OR_FOLLOWER).
    asked = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                    for p in range(partitions)
                ],
            }
        ],
    }
    for which in (0, -1):
        with target.wire(which) as wire:
            until(
                lambda wire=wire: all(p.error_code == 0 for p in wire.call(2, 7, asked).topics[0].partitions),
                f"{target} to lead {topic}",
            )
    return made


_barriers: dict[str, str] = {}


def settled(target: Target) -> None:
    """Return once Kafka's broker serves every change its controller took before now.

    A KRaft broker answers an AlterConfigs or a CreateTopics once the controller has
    the change, and applies it to what it serves (DescribeConfigs, Metadata) a moment
    later, in order: a change made now to a topic of its own, seen, is a barrier for
    the ones before it. tidelog answers after its store has the change: nothing to wait for.
    """
    if not target.is_kafka:
        return
    barrier = _barriers.get(target.bootstrap)
    if barrier is None:
        barrier = _barriers[target.bootstrap] = f"barrier-{uuid.uuid4().hex[:8]}"
        make_topic(target, barrier)
    mark = str(uuid.uuid4().int % 10**12 + 1000)
    with target.wire() as wire:
        config = {"name": "retention.ms", "config_operation": 0, "value": mark}
        resource = {"resource_type": 2, "resource_name": barrier, "configs": [config]}
        assert (
            wire.call(44, 1, {"resources": [resource], "validate_only": False}).responses[0].error_code == 0
        )
        asked = {"resource_type": 2, "resource_name": barrier, "configuration_keys": ["retention.ms"]}
        until(
            lambda: wire.call(32, 4, {"resources": [asked]}).results[0].configs[0].value == mark,
            "Kafka's broker to apply its controller's changes",
        )


def differences(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Where two answers (plain values) differ, one line a leaf: `path: tidelog=... kafka=...`,
    for a failure message that shows the values pytest's own diff cuts short."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = []
        for key in [*ours, *[k for k in theirs if k not in ours]]:
            if key not in ours or key not in theirs:
                out.append(
                    f"{path}.{key}: tidelog={ours.get(key, 'absent')!r} kafka={theirs.get(key, 'absent')!r}"
                )
            else:
                out += differences(ours[key], theirs[key], f"{path}.{key}")
        return out
    if isinstance(ours, list | tuple) and isinstance(theirs, list | tuple) and len(ours) == len(theirs):
        return [
            line for i, (a, b) in enumerate(zip(ours, theirs)) for line in differences(a, b, f"{path}[{i}]")
        ]
    return [] if ours == theirs else [f"{path}: tidelog={ours!r} kafka={theirs!r}"]


def assert_same(ours: Any, theirs: Any) -> None:
    """`assert ours == theirs` (tidelog's answers, Kafka's), failing with where they differ."""
    if ours != theirs:
        raise AssertionError("tidelog and Kafka differ:\n" + "\n".join(differences(ours, theirs)))
