"""Spark's own Kafka connector (spark-sql-kafka-0-10, format "kafka") against
`tidelog serve`, side by side with Apache Kafka: the same jobs on each broker
(Apache Kafka, tidelog on SQLite, tidelog on PostgreSQL behind two serves),
and what a Kafka client then reads from each compared.

Two Spark drivers with the connector, each a process of its own
(kafka_connector.py): one runs the streaming jobs and is SIGKILLed, the
other restarts them from their checkpoints and runs the batch reads.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import need_service  # tests/conftest.py
from kafka_diff import Target  # tests/kafka_diff.py
from kafka_reference import unique  # tests/kafka_reference.py
from worker_process import kill_all  # tests/worker_process.py

from .conftest import spark_available
from .kafka_connector import ConnectorProcess, connector_jars, connector_version, job_argv, spark_version

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.spark

PARTITIONS = 2
FIRST_RUN = 30  # records a partition before the first run
WHILE_DOWN = 10  # records a partition written while the job is down
PER_TRIGGER = 20  # maxOffsetsPerTrigger: micro-batches of 10 records a partition
STALL = (1, 10)  # partition 1's first record of micro-batch 1, where the first run stalls
AT_KILL = {0: 20, 1: 10}  # micro-batch 0 and partition 0's half of micro-batch 1
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def jars() -> list[str]:
    missing = spark_available()
    if missing:
        need_service("Spark", missing)
    return connector_jars()


@pytest.fixture(scope="module")
def connector(jars: list[str], tmp_path_factory: Any) -> Iterator[ConnectorProcess]:
    log = tmp_path_factory.mktemp("spark-kafka") / "connector.log"
    with ConnectorProcess(jars, log) as spark:
        yield spark


@pytest.fixture
def brokers(kafka: Target, tidelog_sqlite: Target, tidelog_postgres: Target) -> list[Target]:
    """Apache Kafka first: the reference every other broker's output is compared with."""
    return [kafka, tidelog_sqlite, tidelog_postgres]


def bootstrap(target: Target) -> str:
    # Every broker of the cluster: on PostgreSQL, Spark's clients meet both serves.
    return ",".join(target.bootstraps)


def create(target: Target, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(target)})
    for made in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        made.result(30)


def record(partition: int, i: int) -> dict[str, Any]:
    """Input record i of a partition: a key (none on every fifth), a UTF-8 value, two headers."""
    return {
        "partition": partition,
        "key": None if i % 5 == 4 else f"customer-{i % 3}".encode(),
        "value": f"café {partition}-{i}".encode(),
        "headers": [("n", str(i).encode()), ("source", b"test")],
    }


def produce(target: Target, topic: str, numbers: range, t0: int | None = None) -> None:
    """Records `numbers` of each partition; record i's timestamp t0 + i s when t0 is given.
    (Recent ones: Apache Kafka deletes records older than its 7 days' retention at once.)"""
    producer = ck.Producer({"bootstrap.servers": bootstrap(target)})
    for p in range(PARTITIONS):
        for i in numbers:
            stamp = {} if t0 is None else {"timestamp": t0 + 1000 * i}
            producer.produce(topic, **record(p, i), **stamp)
    assert producer.flush(30) == 0, f"{target}: records not sent"


def high_watermarks(consumer: Any, topic: str) -> dict[int, int]:
    tp = ck.TopicPartition
    return {p: consumer.get_watermark_offsets(tp(topic, p), timeout=10)[1] for p in range(PARTITIONS)}


def written(target: Target, topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """Every record of `topic` as a consumer reads it, by partition: offset, key, value, headers."""
    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap(target), "group.id": unique("check"), "enable.partition.eof": True}
    )
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out: dict[int, list[tuple[Any, ...]]] = {p: [] for p in range(PARTITIONS)}
        ended: set[int] = set()
        while len(ended) < PARTITIONS:
            m = consumer.poll(30)
            assert m is not None, f"{target}: no record nor end of {topic} in 30 s"
            if m.error():
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                ended.add(m.partition())
                continue
            out[m.partition()].append((m.offset(), m.key(), m.value(), m.headers()))
        return out
    finally:
        consumer.close()


def expected_output() -> dict[int, list[tuple[Any, ...]]]:
    """What the job writes through the kill and restart, on Apache Kafka as on any broker
    that behaves as it does: every record once, but partition 0's half of micro-batch 1,
    written before the kill and again when the restart runs the batch anew."""
    total = FIRST_RUN + WHILE_DOWN
    numbers = {0: [*range(AT_KILL[0]), *range(STALL[1], total)], 1: list(range(total))}
    out = {}
    for p, seq in numbers.items():
        rows = []
        for offset, i in enumerate(seq):
            r = record(p, i)
            rows.append((offset, r["key"], f"p{p}o{i}:{r['value'].decode().upper()}".encode(), r["headers"]))
        out[p] = rows
    return out


def wait_for_stall(proc: subprocess.Popen[bytes], log: Path, brokers: list[Target], sink: str) -> None:
    """Until every sink holds AT_KILL, the job stalled at STALL on every broker."""
    consumers = [ck.Consumer({"bootstrap.servers": bootstrap(t), "group.id": unique("w")}) for t in brokers]
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (seen := [high_watermarks(c, sink) for c in consumers]) != [AT_KILL] * len(brokers):
            if proc.poll() is not None:
                raise AssertionError(f"the job exited before the kill: {log.read_text()[-3000:]}")
            assert time.monotonic() < deadline, f"the sinks held {seen}, not {AT_KILL}, after {TIMEOUT_S} s"
            assert all(n <= AT_KILL[p] for s in seen for p, n in s.items()), f"past the stall: {seen}"
            time.sleep(0.5)
    finally:
        for c in consumers:
            c.close()


def test_a_streaming_job_killed_mid_batch_and_restarted_writes_on_tidelog_what_it_writes_on_kafka(
    brokers, jars, request, tmp_path, tried
):
    """format("kafka") to format("kafka") with a checkpoint, SIGKILLed mid-batch and
    restarted, on each broker; every sink's records are compared with Apache Kafka's:
    per partition, in order, with their offsets, keys, values and headers.

    Spark's Kafka sink is at least once: a micro-batch cut short by a crash is run again
    from the same offsets after a restart, and what it had written before the crash is
    written twice. Where the kill lands decides how many records that is, so the first
    run stalls at one record (kafka_job.py, `stall`): partition 1's task of micro-batch 1
    sleeps before its first record while partition 0's task writes its ten and ends. The
    kill comes once every sink shows exactly that, so the duplicates are the same ten
    records on every broker, and the outputs must be equal, duplicates included: tidelog
    may not duplicate, lose or reorder a record that Apache Kafka does not. Ten records
    more a partition arrive while the job is down; the restart runs to the end of them.
    """
    tried(connector=f"{connector_version()} on Spark {spark_version()}", kills=1, brokers=len(brokers))
    source, sink = unique("spark-in"), unique("spark-out")
    jobs = []
    for target in brokers:
        create(target, source, sink)
        produce(target, source, range(FIRST_RUN))
        checkpoint = tmp_path / f"checkpoint-{target.name}"
        jobs.append(
            {
                "bootstrap": bootstrap(target),
                "source": source,
                "sink": sink,
                "checkpoint": str(checkpoint),
                "max_per_trigger": PER_TRIGGER,
            }
        )
    stalled = [{**job, "stall": STALL} for job in jobs]
    log = tmp_path / "killed.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            job_argv("run", jars, json.dumps(stalled)), stdout=out, stderr=out, start_new_session=True
        )
    try:
        connector = request.getfixturevalue("connector")  # the restart's driver, started meanwhile
        wait_for_stall(proc, log, brokers, sink)
    finally:
        kill_all(proc)

    for target in brokers:
        produce(target, source, range(FIRST_RUN, FIRST_RUN + WHILE_DOWN))
    batches = connector.call("drain", jobs=jobs, timeout=TIMEOUT_S)

    outputs = {target.name: written(target, sink) for target in brokers}
    assert outputs["kafka"] == expected_output()
    for target in brokers[1:]:
        assert outputs[target.name] == outputs["kafka"], f"{target} differs from Apache Kafka"
    # The rerun of micro-batch 1, then the rest of the first records and those written while down.
    assert batches == [3] * len(brokers)


def offsets_json(topic: str, offsets: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in offsets.items()}})


def test_batch_reads_with_offsets_json_read_on_tidelog_what_they_read_on_kafka(brokers, connector):
    """spark.read.format("kafka") with startingOffsets/endingOffsets JSON (an offset,
    -2 earliest, -1 latest), "earliest"/"latest" split by minPartitions, and by
    timestamp, on a topic whose partition 1 lost its first record to DeleteRecords:
    the rows (partition, offset, key, value, timestamp and its type, headers) equal
    Apache Kafka's.

    Offsets are Kafka's on both: the listener numbers a partition from 0 as Kafka
    does (tidelog's offset n is the listener's n - 1). Through tidelog's own source,
    format("tidelog"), the same records carry tidelog's offsets, one higher, so the
    same JSON starts a record earlier: the last read shows that difference.
    """
    topic = unique("spark-read")
    t0 = (int(time.time()) - 3600) * 1000
    for target in brokers:
        create(target, topic)
        produce(target, topic, range(5), t0)
        admin = AdminClient({"bootstrap.servers": bootstrap(target)})
        for deleted in admin.delete_records([ck.TopicPartition(topic, 1, 1)]).values():
            deleted.result(30)
    reads = {
        "offsets": {
            "startingOffsets": offsets_json(topic, {0: 2, 1: -2}),
            "endingOffsets": offsets_json(topic, {0: -1, 1: 3}),
        },
        # Four Spark partitions over two Kafka ones: tasks fetch from inside a producer's batch.
        "earliest to latest": {
            "startingOffsets": "earliest",
            "endingOffsets": "latest",
            "minPartitions": "4",
        },
        # Partition 1's end lies past its last record: Spark reads to its latest offset.
        "by timestamp": {
            "startingOffsetsByTimestamp": offsets_json(topic, {0: t0 + 2500, 1: t0}),
            "endingOffsetsByTimestamp": offsets_json(topic, {0: t0 + 4000, 1: t0 + 60_000}),
        },
    }
    seen: dict[str, dict[str, list[list[Any]]]] = {}
    for name, options in reads.items():
        for target in brokers:
            options = {**options, "kafka.bootstrap.servers": bootstrap(target), "subscribe": topic}
            rows = connector.call("read", format="kafka", options={**options, "includeHeaders": "true"})
            seen.setdefault(name, {})[target.name] = rows
    positions = {name: [(r[0], r[1]) for r in by["kafka"]] for name, by in seen.items()}
    assert positions == {
        "offsets": [(0, 2), (0, 3), (0, 4), (1, 1), (1, 2)],
        "earliest to latest": [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 1), (1, 2), (1, 3), (1, 4)],
        "by timestamp": [(0, 3), (1, 1), (1, 2), (1, 3), (1, 4)],
    }
    headers = [["n", "2"], ["source", "test"]]
    assert seen["offsets"]["kafka"][0] == [0, 2, "customer-2", "café 0-2", t0 + 2000, 0, headers]
    for name, by in seen.items():
        for target in brokers[1:]:
            assert by[target.name] == by["kafka"], f"{name}: {target} differs from Apache Kafka"

    # The same JSON through tidelog's own source on the same store names tidelog's offsets:
    # {"0": 2} there is Kafka's offset 1, the record before the one the connector starts at.
    sqlite = next(t for t in brokers if t.name == "sqlite")
    own = connector.call(
        "read",
        format="tidelog",
        options={"url": sqlite.store, "subscribe": topic, "includeHeaders": "true", **reads["offsets"]},
    )
    assert [(r[0], r[1]) for r in own] == [(0, 2), (0, 3), (0, 4), (0, 5), (1, 2)]
    by_kafka_offset = {(r[0], r[1]): r for r in seen["earliest to latest"]["sqlite"]}
    # The same records, but for the timestamp's type: the source calls every timestamp
    # append time (1), the listener a producer's timestamp CreateTime (0), as Kafka does.
    assert [r[5] for r in own] == [1] * len(own)
    kafka_rows = [by_kafka_offset[r[0], r[1] - 1] for r in own]
    assert [[r[0], r[1] - 1, *r[2:5], r[6]] for r in own] == [[*r[:5], r[6]] for r in kafka_rows]
