"""Topics: create, describe, grow, delete, and the bad input around them."""

from __future__ import annotations

import pytest

import tidelog

from .conftest import snapshot


def test_create_is_idempotent_when_config_matches(log):
    first = log.create_topic("orders", partitions=4)
    again = log.create_topic("orders", partitions=4)
    assert first.partitions == again.partitions == 4
    assert [t.name for t in log.topics()] == ["orders"]


def test_create_with_other_partitions_is_a_conflict(log):
    log.create_topic("orders", partitions=4)
    before = snapshot(log)
    with pytest.raises(tidelog.TopicConflict, match="4 partitions"):
        log.create_topic("orders", partitions=2)
    assert snapshot(log) == before


def test_create_with_other_settings_is_a_conflict(log):
    log.create_topic("orders", partitions=1, max_message_bytes=1000)
    log.create_topic("orders", partitions=1)  # settings not given are not compared
    with pytest.raises(tidelog.TopicConflict, match="max_message_bytes"):
        log.create_topic("orders", partitions=1, max_message_bytes=2000)


@pytest.mark.parametrize(
    "name", ["", "has space", "semi;colon", "x" * 201, "quote'", "slash/", "ümlaut", None, 7]
)
def test_invalid_topic_names_are_refused(log, name):
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidName):
        log.create_topic(name)
    with pytest.raises(tidelog.InvalidName):
        log.producer().send(name, b"x")
    assert snapshot(log) == before


def test_sql_looking_names_are_just_names(log):
    # Valid characters only, but shaped like an attack: stored as a value.
    log.create_topic("records--", partitions=1)
    log.producer().send("records--", b"x")
    assert log.read("records--", 0)[0].value == b"x"


@pytest.mark.parametrize("partitions", [0, -1, 10_001, 1.5, "2", True])
def test_bad_partition_counts_are_refused(log, partitions):
    with pytest.raises(tidelog.InvalidRequest):
        log.create_topic("orders", partitions=partitions)
    assert log.topics() == []


def test_unknown_setting_is_refused(log):
    with pytest.raises(tidelog.InvalidRequest, match="unknown topic setting"):
        log.create_topic("orders", retention_forever=True)
    assert log.topics() == []


def test_describe_reports_offsets_and_counts(log):
    log.create_topic("orders", partitions=2)
    producer = log.producer()
    producer.send_batch("orders", [b"a", b"b", b"c"], partition=1)
    desc = log.describe("orders")
    assert [(p.partition, p.first_offset, p.last_offset, p.records) for p in desc.partitions] == [
        (0, 1, 0, 0),
        (1, 1, 3, 3),
    ]
    assert desc.records == 3
    assert desc.config["max_message_bytes"] == 1 << 20


def test_describe_unknown_topic(log):
    with pytest.raises(tidelog.UnknownTopic):
        log.describe("missing")


def test_add_partitions_grows_and_never_shrinks(log):
    log.create_topic("orders", partitions=2)
    log.producer().send("orders", b"x", partition=1)
    assert log.add_partitions("orders", 5).partitions == 5
    log.producer().send("orders", b"y", partition=4)
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidRequest, match="never shrink"):
        log.add_partitions("orders", 3)
    assert snapshot(log) == before
    assert log.read("orders", 1)[0].value == b"x"
    with pytest.raises(tidelog.UnknownTopic):
        log.add_partitions("missing", 3)


def test_delete_topic_removes_records_and_offsets(log):
    producer = log.producer()
    producer.send("orders", b"x")
    consumer = log.consumer("g")
    consumer.commit("orders", 0, 1)
    assert log.delete_topic("orders") is True
    assert log.delete_topic("orders") is False
    with pytest.raises(tidelog.UnknownTopic):
        log.describe("orders")
    # A topic made again under the same name starts empty, at offset 1.
    assert producer.send("orders", b"y").offset == 1
    assert [m.value for m in log.read("orders", 0)] == [b"y"]
    assert log.consumer("g").committed("orders", 0) == 0


def test_delete_seen_by_another_handle(store):
    a, b = store.open(), store.open()
    try:
        a.producer().send("orders", b"x")
        assert b.read("orders", 0)[0].value == b"x"
        a.delete_topic("orders")
        a.create_topic("orders", partitions=1)
        assert b.read("orders", 0) == []
        sent = b.producer().send("orders", b"z")
        assert sent.offset == 1
        assert [m.value for m in a.read("orders", 0)] == [b"z"]
    finally:
        a.close()
        b.close()


def test_offsets_match_describe_without_counting(store):
    """`Log.offsets` (the Spark planner's call) gives describe's first and last
    offsets: empty partitions, a trimmed prefix and compaction's gaps too."""
    now = [1_800_000_000_000]
    log = store.open(clock=lambda: now[0])
    log.create_topic("o", partitions=3, retention_ms=1000)
    producer = log.producer()
    producer.send_batch("o", [1, 2, 3], partition=0)
    producer.send_batch("o", [1, 2], partition=2)
    now[0] += 5000
    producer.send_batch("o", [4, 5], partition=0)
    log.clean("o")  # removes the old prefix of 0 and all of 2
    described = [(p.partition, p.first_offset, p.last_offset) for p in log.describe("o").partitions]
    assert [tuple(o) for o in log.offsets("o")] == described
    assert described == [(0, 4, 5), (1, 1, 0), (2, 3, 2)]
    with pytest.raises(tidelog.UnknownTopic):
        log.offsets("missing")
    with pytest.raises(tidelog.InvalidName):
        log.offsets("bad name")
    log.close()
