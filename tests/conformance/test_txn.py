"""Idempotent writes: `Log.write(batches, txn=...)` appends at most once per id."""

from __future__ import annotations

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


def test_a_failed_write_does_not_record_its_txn(store, log):
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


@pytest.mark.parametrize("txn", ["", "has space", "a/b", "x" * 256, 7, b"bytes"])
def test_bad_txn_ids_are_refused(log, txn):
    producer = log.producer()
    log.create_topic("t")
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidRequest, match="txn id"):
        log.write([producer.prepare("t", [b"1"])], txn=txn)
    assert snapshot(log) == before
