"""Idempotent writes: `Log.write(batches, txn=...)` appends at most once per id."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import tidelog

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("txn")


def test_a_write_with_a_recorded_txn_appends_nothing_and_answers_the_same(log):
    log.create_topic("a", partitions=2)
    producer = log.producer()
    first = log.write(
        [producer.prepare("a", [b"1", b"2"], partition=0), producer.prepare("a", [b"3"], partition=1)],
        txn="query-1:batch-7:task-0",
    )
    before = snapshot(log)
    # A replay may carry other records (say, re-computed ones): it still writes nothing.
    again = log.write([producer.prepare("a", [b"x", b"y", b"z"], partition=1)], txn="query-1:batch-7:task-0")
    assert again == first
    assert snapshot(log) == before
    assert [m.value for m in log.read("a", 0)] == [b"1", b"2"]
    assert [m.value for m in log.read("a", 1)] == [b"3"]


def test_another_txn_id_writes(log):
    producer = log.producer()
    a = log.write([producer.prepare("t", [b"1"], partition=0)], txn="w:1")
    b = log.write([producer.prepare("t", [b"2"], partition=0)], txn="w:2")
    c = log.write([producer.prepare("t", [b"3"], partition=0)])
    assert [s.first_offset for s in a + b + c] == [1, 2, 3]


def test_the_txn_is_seen_by_another_connection(store, log):
    producer = log.producer()
    sent = log.write([producer.prepare("t", [b"1", b"2"], partition=0)], txn="spark:q:0:1")
    other = store.open()
    try:
        replay = other.write([other.producer().prepare("t", [b"1", b"2"], partition=0)], txn="spark:q:0:1")
        assert replay == sent
        assert [m.offset for m in other.read("t", 0)] == [1, 2]
    finally:
        other.close()


def test_a_failed_write_does_not_record_its_txn(store):
    log = store.open(auto_create=False)  # else the write would make "doomed" again
    producer = log.producer()
    log.create_topic("keep", partitions=1)
    log.create_topic("doomed", partitions=1)
    prepared = [producer.prepare("keep", [b"1"]), producer.prepare("doomed", [b"2"])]
    other = store.open()
    try:
        other.delete_topic("doomed")
    finally:
        other.close()
    with pytest.raises(tidelog.UnknownTopic):
        log.write(prepared, txn="retry-me")
    # The id was rolled back with the records: the retry writes.
    sent = log.write([producer.prepare("keep", [b"1"])], txn="retry-me")
    assert [(s.topic, s.first_offset, s.count) for s in sent] == [("keep", 1, 1)]
    assert [m.value for m in log.read("keep", 0)] == [b"1"]
    log.close()


@pytest.mark.parametrize("txn", ["", "has space", "a/b", "x" * 256, 7, b"bytes"])
def test_bad_txn_ids_are_refused(log, txn):
    producer = log.producer()
    log.create_topic("t")
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidRequest, match="txn id"):
        log.write([producer.prepare("t", [b"1"])], txn=txn)
    assert snapshot(log) == before


def test_write_stream_appends_batches_as_they_come_in_one_idempotent_transaction(log):
    log.create_topic("s", partitions=2)
    producer = log.producer()
    drawn = []

    def batches():
        for i in range(4):
            drawn.append(i)
            yield producer.prepare("s", [f"{i}a".encode(), f"{i}b".encode()], partition=i % 2)

    sent = log.write_stream(batches(), txn="spark:q:3:0")
    assert [(s.partition, s.first_offset, s.count) for s in sent] == [
        (0, 1, 2),
        (1, 1, 2),
        (0, 3, 2),
        (1, 3, 2),
    ]
    assert [m.value for m in log.read("s", 0)] == [b"0a", b"0b", b"2a", b"2b"]
    before = snapshot(log)
    drawn.clear()
    # The replay answers as the first write did, and writes nothing.
    assert log.write_stream(batches(), txn="spark:q:3:0") == sent
    assert snapshot(log) == before
    assert len(drawn) <= 4


def test_write_stream_failing_mid_way_writes_nothing_and_records_no_txn(log):
    log.create_topic("s", partitions=1)
    producer = log.producer()
    before = snapshot(log)

    def batches():
        yield producer.prepare("s", [b"1"])
        raise tidelog.InvalidValue("the second batch is bad")

    with pytest.raises(tidelog.InvalidValue, match="second batch"):
        log.write_stream(batches(), txn="spark:q:4:0")
    assert snapshot(log) == before
    sent = log.write_stream(iter([producer.prepare("s", [b"2"])]), txn="spark:q:4:0")
    assert [(s.first_offset, s.count) for s in sent] == [(1, 1)]


def test_write_stream_to_two_topics_is_refused_and_writes_nothing(log):
    log.create_topic("s", partitions=1)
    log.create_topic("u", partitions=1)
    producer = log.producer()
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidRequest, match="one topic"):
        log.write_stream(
            iter([producer.prepare("s", [b"1"]), producer.prepare("u", [b"2"])]), txn="spark:q:5:0"
        )
    assert snapshot(log) == before


def test_two_streams_naming_partitions_in_opposite_orders_both_commit(store, log, api):
    if api == "async":
        pytest.skip("the async API's test bridge runs one call at a time: the two streams would wait for it")
    # A store that locks partitions as batches name them would let these two
    # wait for each other in a cycle; the second waits for the first instead.
    log.create_topic("s", partitions=2)
    other = store.open()
    started = threading.Event()
    errors: list[BaseException] = []

    def stream(into: tidelog.Log, order: list[int], txn: str) -> None:
        producer = into.producer()

        def batches() -> Iterator[tidelog.Prepared]:
            for p in order:
                yield producer.prepare("s", [f"{txn}-{p}".encode()], partition=p)
                started.set()
                time.sleep(0.2)  # the other stream starts while this one holds the first partition

        try:
            into.write_stream(batches(), txn=txn)
        except BaseException as e:
            errors.append(e)

    try:
        first = threading.Thread(target=stream, args=(log, [0, 1], "spark:q:6:0"))
        first.start()
        started.wait(10)
        stream(other, [1, 0], "spark:q:6:1")
        first.join(30)
    finally:
        other.close()
    assert errors == []
    values = sorted(m.value for p in (0, 1) for m in log.read("s", p))
    assert values == sorted(f"spark:q:6:{t}-{p}".encode() for t in (0, 1) for p in (0, 1))
