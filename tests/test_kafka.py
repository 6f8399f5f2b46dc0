"""Kafka's own clients against a real `tidelog serve`: kcat, confluent-kafka
(librdkafka), kafka-python and aiokafka produce and consume, and what they
write is the same log the Python API and HTTP read."""

from __future__ import annotations

import asyncio
import subprocess
import time

import httpx
import pytest

import tidelog
from kafka_serve import KafkaServe, kcat
from tidelog.records import NewRecord

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
WAIT_S = 15


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with KafkaServe(tmp_path_factory.mktemp("kafka") / "k.db", "--default-partitions", "3") as server:
        yield server


def consume_assigned(served, topic, partitions, count, **config):
    """`count` records of `topic`'s partitions from the start, without a group (assign)."""
    consumer = ck.Consumer(
        served.client_config(**{"group.id": "unused", "enable.auto.commit": False, **config})
    )
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
        return got
    finally:
        consumer.close()


def test_kcat_lists_produces_and_consumes(served):
    binary = kcat()
    subprocess.run(
        [binary, "-b", served.bootstrap, "-P", "-t", "kcat-topic", "-p", "1", "-k", "k1", "-H", "h=v"],
        input=b"one\ntwo\n",
        check=True,
        timeout=WAIT_S,
    )
    listed = subprocess.run(
        [binary, "-b", served.bootstrap, "-L", "-t", "kcat-topic"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert listed.returncode == 0, listed.stderr
    assert 'topic "kcat-topic" with 3 partitions' in listed.stdout
    out = subprocess.run(
        [binary, "-b", served.bootstrap, "-C", "-t", "kcat-topic", "-p", "1", "-e", "-f", "%o %k %s %h\n"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["0 k1 one h=v", "1 k1 two h=v"]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_produces_with_every_codec_and_keys_keep_their_partition(served, codec):
    topic = f"codec-{codec}"
    producer = ck.Producer(served.client_config(**{"compression.type": codec, "linger.ms": 5}))
    failures = []
    for i in range(300):
        producer.produce(
            topic,
            value=b"value-%d" % i,
            key=b"key-%d" % (i % 10),
            headers=[("n", str(i).encode())],
            timestamp=1_700_000_000_000 + i,
            on_delivery=lambda err, msg: err and failures.append(err),
        )
    assert producer.flush(WAIT_S) == 0
    assert failures == []
    got = consume_assigned(served, topic, range(3), 300)
    assert len(got) == 300
    where: dict[bytes, set[int]] = {}
    for msg in got:
        where.setdefault(msg.key(), set()).add(msg.partition())
        i = int(msg.headers()[0][1])
        assert msg.value() == b"value-%d" % i
        assert msg.timestamp() == (ck.TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + i)
    assert all(len(parts) == 1 for parts in where.values())  # a key stays on one partition
    # Offsets are dense from 0 in each partition.
    for p in range(3):
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == list(range(len(offsets)))


def test_an_idempotent_producer_writes_each_record_once(served):
    producer = ck.Producer(served.client_config(**{"enable.idempotence": True, "compression.type": "lz4"}))
    for i in range(500):
        producer.produce("idempotent", value=b"%d" % i, partition=0)
    assert producer.flush(WAIT_S) == 0
    got = consume_assigned(served, "idempotent", [0], 500)
    assert [int(m.value()) for m in got] == list(range(500))


def test_kafka_records_are_tidelog_records_and_back(served):
    producer = ck.Producer(served.client_config())
    producer.produce(
        "shared",
        value=b"from-kafka",
        key=b"k",
        headers=[("h", b"1"), ("n", None)],
        partition=2,
        timestamp=1234,
    )
    producer.produce("shared", value=None, key=b"gone", partition=2)  # a tombstone
    assert producer.flush(WAIT_S) == 0
    # Python, on the same file.
    with tidelog.open(served.target) as log:
        first, tomb = log.read("shared", 2)
        assert (first.offset, first.value, first.key, first.headers, first.timestamp) == (
            1,
            b"from-kafka",
            b"k",
            [("h", b"1"), ("n", b"")],  # a null value: tidelog's headers are (str, bytes)
            1234,
        )
        assert (tomb.data, tomb.format, tomb.key) == (None, "json", b"gone")  # tidelog's null value
        log.producer().send("shared", {"made": "by tidelog"}, key="py", partition=2, headers={"x": "y"})
    # HTTP.
    body = httpx.get(f"{served.http_url}/v1/topics/shared/partitions/2/records", params={"after": 0}).json()
    assert [r["offset"] for r in body["records"]] == [1, 2, 3]
    # And back through Kafka: offset n - 1, the JSON value as its text.
    got = consume_assigned(served, "shared", [2], 3)
    assert [(m.offset(), m.value(), m.key()) for m in got] == [
        (0, b"from-kafka", b"k"),
        (1, None, b"gone"),
        (2, b'{"made":"by tidelog"}', b"py"),
    ]
    assert got[0].headers() == [("h", b"1"), ("n", None)]  # Kafka's null value kept
    assert got[2].headers() == [("x", b"y")]


def test_kafka_python_produces_consumes_and_lists_offsets_by_time(served):
    producer = kafka.KafkaProducer(bootstrap_servers=served.bootstrap, compression_type="gzip")
    for i in range(50):
        producer.send("kp", value=b"v%d" % i, key=b"k", partition=0, timestamp_ms=1_700_000_000_000 + 10 * i)
    producer.flush(WAIT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=served.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000
    )
    tp = kafka.TopicPartition("kp", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = list(consumer)
    assert [m.value for m in got] == [b"v%d" % i for i in range(50)]
    assert got[7].timestamp == 1_700_000_000_070 and got[7].offset == 7
    found = consumer.offsets_for_times({tp: 1_700_000_000_095})[tp]
    assert (found.offset, found.timestamp) == (10, 1_700_000_000_100)
    assert consumer.offsets_for_times({tp: 1_800_000_000_000})[tp] is None  # nothing that late
    assert consumer.beginning_offsets([tp])[tp] == 0 and consumer.end_offsets([tp])[tp] == 50
    consumer.close()


def test_aiokafka_produces_idempotently_and_consumes(served):
    async def run():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=served.bootstrap, compression_type="zstd", enable_idempotence=True
        )
        await producer.start()
        try:
            for i in range(40):
                await producer.send("aio", value=b"a%d" % i, key=b"k", headers=[("h", b"z")], partition=1)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=served.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition("aio", 1)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < 40 and time.monotonic() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500)
                got.extend(batch.get(tp, []))
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert [m.value for m in got] == [b"a%d" % i for i in range(40)]
    assert got[0].headers == (("h", b"z"),)


def test_a_fetch_waits_for_an_append(served):
    """A consumer at the end long-polls: a record written meanwhile arrives without a new fetch round."""
    with tidelog.open(served.target) as log:
        log.create_topic("waiting", 1)
    consumer = ck.Consumer(
        served.client_config(**{"group.id": "unused", "enable.auto.commit": False, "fetch.wait.max.ms": 5000})
    )
    try:
        consumer.assign([ck.TopicPartition("waiting", 0, ck.OFFSET_END)])
        assert consumer.poll(1.0) is None
        with tidelog.open(served.target) as log:
            log.write([log.producer().prepare("waiting", [NewRecord(b"late")], partition=0)])
        deadline = time.monotonic() + WAIT_S
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.value() == b"late"
    finally:
        consumer.close()


def test_admin_topics_configs_partitions_and_deleted_records(served):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient(served.client_config())
    made = admin.create_topics(
        [NewTopic("admin-made", 2, 1, config={"retention.ms": "3600000", "cleanup.policy": "compact"})]
    )
    made["admin-made"].result(timeout=WAIT_S)
    refused = admin.create_topics([NewTopic("admin-bad", 1, 1, config={"flush.ms": "1"})])
    with pytest.raises(ck.KafkaException, match="not supported"):
        refused["admin-bad"].result(timeout=WAIT_S)
    again = admin.create_topics([NewTopic("admin-made", 2, 1)])
    with pytest.raises(ck.KafkaException, match="already exists"):
        again["admin-made"].result(timeout=WAIT_S)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "admin-made")])
    configs = next(iter(described.values())).result(timeout=WAIT_S)
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "compact"
    admin.create_partitions([NewPartitions("admin-made", 5)])["admin-made"].result(timeout=WAIT_S)
    with tidelog.open(served.target) as log:
        info = log.topic("admin-made")
        assert (info.partitions, info.config["retention_ms"], info.config["cleanup_policy"]) == (
            5,
            3600000,
            "compact",
        )
        assert "admin-bad" not in [t.name for t in log.topics()]
        log.producer().send_batch("admin-made", [b"0", b"1", b"2", b"3"], partition=0)
    # DeleteRecords: Kafka offsets below 2 go, the log start moves to 2.
    deleted = admin.delete_records([ck.TopicPartition("admin-made", 0, 2)])
    assert next(iter(deleted.values())).result(timeout=WAIT_S).low_watermark == 2
    got = consume_assigned(served, "admin-made", [0], 2)
    assert [(m.offset(), m.value()) for m in got] == [(2, b"2"), (3, b"3")]
    admin.delete_topics(["admin-made"])["admin-made"].result(timeout=WAIT_S)
    with tidelog.open(served.target) as log:
        assert "admin-made" not in [t.name for t in log.topics()]


def test_transactions_are_refused_clearly(served):
    producer = ck.Producer(served.client_config(**{"transactional.id": "tx-1"}))
    with pytest.raises(ck.KafkaException) as refused:
        producer.init_transactions(10)
    assert "not supported" in str(refused.value).lower()
