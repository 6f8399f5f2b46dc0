"""Consumer.set_position: move a consumer's next fetch without touching the group."""

from __future__ import annotations

import pytest

import tidelog

from .conftest import snapshot


@pytest.fixture
def filled(log):
    log.create_topic("orders", partitions=2)
    log.producer().send_batch("orders", [{"n": i} for i in range(1, 11)], partition=0)
    return log


def test_set_position_rereads_without_rewinding_the_group(filled):
    consumer = filled.consumer("g")
    consumer.commit("orders", 0, 6)
    consumer.set_position("orders", 0, 2)
    assert [m.offset for m in consumer.fetch("orders", 0, max_messages=3)] == [3, 4, 5]
    assert consumer.committed("orders", 0) == 6
    consumer.commit()  # the position (5) is below the committed offset: ignored
    assert consumer.committed("orders", 0) == 6


def test_set_position_skips_ahead_and_commits_move_forward(filled):
    consumer = filled.consumer("g")
    consumer.set_position("orders", 0, 10)
    assert consumer.fetch("orders", 0) == []
    assert consumer.committed("orders", 0) == 0
    filled.producer().send("orders", {"n": 11}, partition=0)
    [msg] = consumer.fetch("orders", 0)
    assert msg.offset == 11
    consumer.commit(msg)
    assert consumer.committed("orders", 0) == 11


def test_set_position_is_private_to_the_consumer(store, filled):
    consumer = filled.consumer("g")
    consumer.set_position("orders", 0, 8)
    other = store.open()
    try:
        assert [m.offset for m in other.consumer("g").fetch("orders", 0, max_messages=2)] == [1, 2]
    finally:
        other.close()


@pytest.mark.parametrize(
    "topic, partition, offset, error",
    [
        ("orders", 0, 11, tidelog.OffsetOutOfRange),
        ("orders", 1, 1, tidelog.OffsetOutOfRange),
        ("orders", 2, 0, tidelog.UnknownPartition),
        ("nope", 0, 0, tidelog.UnknownTopic),
        ("orders", 0, -1, tidelog.InvalidRequest),
        ("bad name", 0, 0, tidelog.InvalidName),
    ],
)
def test_set_position_refuses_bad_input_and_changes_nothing(filled, topic, partition, offset, error):
    consumer = filled.consumer("g")
    before = snapshot(filled)
    with pytest.raises(error):
        consumer.set_position(topic, partition, offset)
    assert snapshot(filled) == before
    assert [m.offset for m in consumer.fetch("orders", 0, max_messages=1)] == [1]
