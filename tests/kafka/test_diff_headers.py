"""Record headers, side by side with Apache Kafka 4: a header's null value comes back null
(it came back as empty bytes), with each codec, on both stores, through another broker."""

from __future__ import annotations

import pytest

from kafka_diff import until
from kafka_reference import unique

ck = pytest.importorskip("confluent_kafka")

from test_diff_edges import make_topic  # noqa: E402  (after the skip: it imports confluent_kafka)

HEADERS = [("a", None), ("b", b""), ("c", b"x"), ("a", None), ("", None)]


def produced_and_consumed(target, topic, codec):
    """Records with null, empty and set header values, a batch of them, then a
    consumer's reading of them from another broker of the cluster."""
    producer = ck.Producer(
        {"bootstrap.servers": target.bootstrap, "compression.type": codec, "linger.ms": 50}
    )
    for n in range(3):
        producer.produce(topic, value=b"v%d" % n, key=b"k", headers=HEADERS[n:], partition=0)
    producer.produce(topic, value=b"none", partition=0)
    assert producer.flush(30) == 0
    consumer = ck.Consumer(
        {"bootstrap.servers": target.second, "group.id": unique("headers"), "auto.offset.reset": "earliest"}
    )
    got = []
    try:
        consumer.subscribe([topic])

        def read():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.key(), msg.value(), msg.headers()))
            return len(got) == 4

        until(read, f"the records of {topic}")
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_null_header_values_come_back_null(kafka, tidelog, codec):
    topic = unique("headers")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    ours = produced_and_consumed(tidelog, topic, codec)
    assert ours == produced_and_consumed(kafka, topic, codec)
    assert ours[0][3] == HEADERS
