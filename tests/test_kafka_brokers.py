"""Two `tidelog serve` processes over one PostgreSQL as two Kafka brokers:
what one takes in the other serves, and one consumer group spans both."""

from __future__ import annotations

import time

import pytest

import tidelog
from kafka_serve import KafkaServe
from pgschema import postgres_schema

ck = pytest.importorskip("confluent_kafka")

WAIT_S = 30


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kafka-brokers")
    with (
        postgres_schema() as url,
        KafkaServe(url, log_dir=tmp) as first,
        KafkaServe(url, log_dir=tmp) as second,
    ):
        yield url, first, second


def until(check, what):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
    pytest.fail(f"timed out waiting for {what}")


def test_each_broker_serves_what_the_other_took(brokers):
    url, first, second = brokers
    producer = ck.Producer(first.client_config(**{"enable.idempotence": True, "compression.type": "lz4"}))
    for i in range(100):
        producer.produce("shared-pg", value=b"%d" % i, key=b"k%d" % (i % 5))
    assert producer.flush(WAIT_S) == 0
    consumer = ck.Consumer(second.client_config(**{"group.id": "unused", "enable.auto.commit": False}))
    consumer.assign([ck.TopicPartition("shared-pg", 0, ck.OFFSET_BEGINNING)])
    got = []
    until(
        lambda: (
            got.extend(m for m in [consumer.poll(0.2)] if m is not None and m.error() is None)
            or len(got) == 100
        ),
        "the records",
    )
    consumer.close()
    assert sorted(int(m.value()) for m in got) == list(range(100))
    with tidelog.open(url) as log:
        assert log.offsets("shared-pg")[0].last_offset == 100


def test_a_group_spans_both_brokers(brokers):
    url, first, second = brokers
    with tidelog.open(url) as log:
        log.create_topic("spanned", 4)
        producer = log.producer()
        for i in range(40):
            producer.send("spanned", b"%d" % i, partition=i % 4)

    def member(server, name):
        consumer = ck.Consumer(
            server.client_config(
                **{
                    "group.id": "spanning",
                    "client.id": name,
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": 6000,
                }
            )
        )
        consumer.subscribe(["spanned"])
        return consumer

    a = member(first, "on-first")
    until(lambda: a.poll(0.1) is not None or len(a.assignment()) == 4, "the first member's assignment")
    b = member(second, "on-second")
    until(
        lambda: (a.poll(0.1), b.poll(0.1)) and len(a.assignment()) == len(b.assignment()) == 2,
        "the two members, one a broker, to share the partitions",
    )
    b.close()
    until(lambda: a.poll(0.1) is not None or len(a.assignment()) == 4, "the rebalance after a leave")
    a.close()
    with tidelog.open(url) as log:
        state, members = log.store.classic_describe("spanning")
        assert (state.phase, members) == ("empty", [])
