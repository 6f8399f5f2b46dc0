"""Stream group offsets: commit, committed, seek, resume after restart."""

from __future__ import annotations

import pytest

import tidelog

from .conftest import snapshot


@pytest.fixture
def filled(log):
    log.create_topic("orders", partitions=2)
    log.producer().send_batch("orders", [{"n": i} for i in range(1, 11)], partition=0)
    return log


def test_committed_is_zero_before_any_commit(filled):
    assert filled.consumer("g").committed("orders", 0) == 0


def test_fetch_commit_resume(store, filled):
    consumer = filled.consumer("g")
    msgs = consumer.fetch("orders", 0, max_messages=4)
    assert [m.offset for m in msgs] == [1, 2, 3, 4]
    for msg in msgs:
        consumer.commit(msg)
    assert consumer.committed("orders", 0) == 4
    # The next fetch continues from the position, the committed offset stays.
    assert [m.offset for m in consumer.fetch("orders", 0, max_messages=2)] == [5, 6]
    assert consumer.committed("orders", 0) == 4
    # A restarted consumer (a new handle on the same store) resumes at committed + 1.
    again = store.open()
    try:
        assert [m.offset for m in again.consumer("g").fetch("orders", 0, max_messages=3)] == [5, 6, 7]
    finally:
        again.close()


def test_commits_are_monotonic(filled):
    consumer = filled.consumer("g")
    consumer.commit("orders", 0, 7)
    consumer.commit("orders", 0, 3)  # lower: ignored, not an error
    assert consumer.committed("orders", 0) == 7
    consumer.commit("orders", 0, 7)
    consumer.commit("orders", 0, 8)
    assert consumer.committed("orders", 0) == 8


def test_commit_without_arguments_commits_positions(filled):
    consumer = filled.consumer("g")
    consumer.fetch("orders", 0, max_messages=3)
    consumer.fetch("orders", 1)  # empty partition: nothing to commit there
    consumer.commit()
    assert consumer.committed("orders", 0) == 3
    assert consumer.committed("orders", 1) == 0


def test_seek_is_the_way_back(filled):
    consumer = filled.consumer("g")
    consumer.commit("orders", 0, 9)
    consumer.seek("orders", 0, 5)
    assert consumer.committed("orders", 0) == 5
    assert [m.offset for m in consumer.fetch("orders", 0, max_messages=2)] == [6, 7]
    consumer.seek("orders", 0, 0)
    assert consumer.fetch("orders", 0, max_messages=1)[0].offset == 1


def test_seek_and_commit_past_the_end_are_refused(filled):
    consumer = filled.consumer("g")
    consumer.commit("orders", 0, 4)
    before = snapshot(filled)
    with pytest.raises(tidelog.OffsetOutOfRange, match="past the end") as err:
        consumer.seek("orders", 0, 11)
    assert err.value.last == 10
    with pytest.raises(tidelog.OffsetOutOfRange):
        consumer.commit("orders", 0, 11)
    with pytest.raises(tidelog.OffsetOutOfRange):
        consumer.seek("orders", 1, 1)
    with pytest.raises(tidelog.InvalidRequest):
        consumer.seek("orders", 0, -1)
    with pytest.raises(tidelog.InvalidRequest):
        consumer.commit("orders", 0, -1)
    assert snapshot(filled) == before
    consumer.seek("orders", 0, 10)  # exactly the end is fine
    assert consumer.fetch("orders", 0) == []


@pytest.mark.parametrize("offset", [1 << 40, (1 << 63) + 5, 1 << 70])
def test_offsets_past_what_a_store_holds_are_past_the_end(filled, offset):
    # Found by schemathesis through /api's ack: past 2^63 SQLite raised
    # OverflowError and PostgreSQL "bigint out of range".
    consumer = filled.consumer("g")
    consumer.commit("orders", 0, 4)
    before = snapshot(filled)
    with pytest.raises(tidelog.OffsetOutOfRange, match=f"offset {offset} is past the end") as err:
        consumer.commit("orders", 0, offset)
    assert err.value.last == 10
    with pytest.raises(tidelog.OffsetOutOfRange, match=f"offset {offset} is past the end"):
        consumer.seek("orders", 0, offset)
    assert snapshot(filled) == before


def test_groups_are_independent(filled):
    a, b = filled.consumer("a"), filled.consumer("b")
    a.commit("orders", 0, 6)
    assert b.committed("orders", 0) == 0
    assert [m.offset for m in b.fetch("orders", 0, max_messages=1)] == [1]
    assert set(filled.groups()) >= {"a", "b"}
    assert [(o.topic, o.partition, o.committed) for o in filled.group_offsets("a")] == [("orders", 0, 6)]


def test_bad_group_and_partition_input(filled):
    with pytest.raises(tidelog.InvalidName):
        filled.consumer("bad group")
    consumer = filled.consumer("g")
    before = snapshot(filled)
    with pytest.raises(tidelog.UnknownPartition):
        consumer.fetch("orders", 2)
    with pytest.raises(tidelog.UnknownPartition):
        consumer.commit("orders", 7, 1)
    with pytest.raises(tidelog.UnknownTopic):
        consumer.fetch("missing", 0)
    with pytest.raises(tidelog.UnknownTopic):
        consumer.commit("missing", 0, 1)
    with pytest.raises(tidelog.InvalidRequest):
        consumer.fetch("orders", 0, max_messages=0)
    assert snapshot(filled) == before


def test_wait_for_records_wakes_on_append(store, log):
    import threading
    import time

    log.create_topic("w", partitions=1)
    assert log.wait_for_records("w", 0, 0, timeout=0.05) is False

    def later() -> None:
        time.sleep(0.2)
        log.producer().send("w", b"x")

    threading.Thread(target=later).start()
    start = time.monotonic()
    assert log.wait_for_records("w", 0, 0, timeout=10) is True
    assert time.monotonic() - start < 5


def test_wait_sees_appends_from_another_handle(store, log):
    import threading
    import time

    log.create_topic("w", partitions=1)
    other = store.open()
    heard: list[tuple] = []
    stop = log.listen(lambda *args: heard.append(args))

    def later() -> None:
        time.sleep(0.2)
        other.producer().send("w", b"x")

    threading.Thread(target=later).start()
    try:
        assert log.wait_for_records("w", 0, 0, timeout=10) is True
    finally:
        stop()
        other.close()
    assert heard  # the listener heard about it too


def test_describe_group_reports_lag(filled):
    filled.consumer("g").commit("orders", 0, 4)
    lags = filled.describe_group("g")
    assert [(x.topic, x.partition, x.committed, x.last_offset, x.lag) for x in lags] == [
        ("orders", 0, 4, 10, 6),
        ("orders", 1, 0, 0, 0),
    ]
    assert filled.describe_group("nobody") == []
    assert [x.lag for x in filled.describe_group("nobody", topics=["orders"])] == [10, 0]
