"""kafka-python and aiokafka with their defaults against Apache Kafka and tidelog: keyed
records produced, a group that reads them all and commits (on closing, as both do by
default), more records, and the group restarted: it resumes after what it committed."""

from __future__ import annotations

import asyncio
import time

import pytest

from kafka_clients import jsonable, make_topic, reference, run_name

kafka_python = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

WAIT_S = 30
RECORDS, MORE = 300, 30


def kafka_python_produce(target, topic: str, start: int, count: int) -> list[tuple]:
    producer = kafka_python.KafkaProducer(bootstrap_servers=target.bootstrap)
    try:
        futures = [
            producer.send(
                topic, key=f"k{n}".encode(), value=f"v{n}".encode(), headers=[("n", str(n).encode())]
            )
            for n in range(start, start + count)
        ]
        landed = [f.get(timeout=WAIT_S) for f in futures]
    finally:
        producer.close()
    return sorted((m.partition, m.offset) for m in landed)


def kafka_python_consume(target, topic: str, group: str, count: int) -> list[tuple]:
    consumer = kafka_python.KafkaConsumer(
        topic, bootstrap_servers=target.bootstrap, group_id=group, auto_offset_reset="earliest"
    )
    got: list[tuple] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(r.partition, r.offset, r.key, r.value, tuple(r.headers)) for r in records]
    finally:
        consumer.close()  # commits what was read (enable_auto_commit, the default)
    return got


async def aiokafka_produce(target, topic: str, start: int, count: int) -> list[tuple]:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=target.bootstrap)
    await producer.start()
    try:
        sent = [
            await producer.send(
                topic, key=f"k{n}".encode(), value=f"v{n}".encode(), headers=[("n", str(n).encode())]
            )
            for n in range(start, start + count)
        ]
        landed = [await asyncio.wait_for(s, WAIT_S) for s in sent]
    finally:
        await producer.stop()
    return sorted((m.partition, m.offset) for m in landed)


async def aiokafka_consume(target, topic: str, group: str, count: int) -> list[tuple]:
    consumer = aiokafka.AIOKafkaConsumer(
        topic, bootstrap_servers=target.bootstrap, group_id=group, auto_offset_reset="earliest"
    )
    await consumer.start()
    got: list[tuple] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got += [(r.partition, r.offset, r.key, r.value, tuple(r.headers)) for r in records]
    finally:
        await consumer.stop()  # commits what was read (enable_auto_commit, the default)
    return got


def run_sync(f):
    return lambda *args: asyncio.run(f(*args))


CLIENTS = {
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (run_sync(aiokafka_produce), run_sync(aiokafka_consume)),
}


def group_then_restart(client: str, target, topic: str) -> dict:
    produce, consume = CLIENTS[client]
    group = topic
    make_topic(target, topic, 3)
    produced = produce(target, topic, 0, RECORDS)
    first = consume(target, topic, group, RECORDS)
    produce(target, topic, RECORDS, MORE)
    again = consume(target, topic, group, MORE)
    return {
        "produced": produced,
        "consumed": sorted(first),
        "duplicates": len(first) - len(set(first)),
        "restart": sorted(again),
    }


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_group_reads_everything_once_and_a_restart_resumes(client, kafka, tidelog):
    topic = run_name(f"py-restart-{client}")
    got = jsonable(group_then_restart(client, tidelog, topic))
    assert len(got["consumed"]) == RECORDS and len(got["restart"]) == MORE
    assert got == reference(topic, lambda: group_then_restart(client, kafka, topic))
