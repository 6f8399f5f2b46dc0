"""Retention and compaction: what a topic keeps, on every store."""

from __future__ import annotations

import threading

import pytest

import tidelog

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("retention")

HOUR = 3_600_000


def offsets(log, topic, partition=0):
    return [m.offset for m in log.read(topic, partition, limit=10_000)]


def test_time_retention_removes_an_old_prefix(clocked_log, clock):
    clocked_log.create_topic("t", partitions=1, retention_ms="1h")
    producer = clocked_log.producer()
    producer.send_batch("t", [b"old"] * 5)
    clock.advance(1800)
    producer.send_batch("t", [b"mid"] * 3)
    clock.advance(1801)  # the first five are now over an hour old
    (report,) = clocked_log.clean("t")
    assert report.removed == 5
    assert offsets(clocked_log, "t") == [6, 7, 8]  # offsets never change
    (p,) = clocked_log.describe("t").partitions
    assert (p.first_offset, p.last_offset, p.records) == (6, 8, 3)
    assert clocked_log.last_clean("t")["removed"] == 5
    assert producer.send("t", b"new").offset == 9


def test_emptied_partition_never_reuses_offsets(clocked_log, clock):
    clocked_log.create_topic("t", partitions=1, retention_ms=1000)
    clocked_log.producer().send_batch("t", [b"x"] * 4)
    clock.advance(2)
    clocked_log.clean()
    assert clocked_log.describe("t").partitions[0].records == 0
    assert clocked_log.producer().send("t", b"y").offset == 5


def test_size_retention_keeps_the_newest_within_the_limit(clocked_log):
    clocked_log.create_topic("t", partitions=1, retention_bytes=250)
    clocked_log.producer().send_batch("t", [b"x" * 100] * 5)
    clocked_log.clean("t")
    assert offsets(clocked_log, "t") == [4, 5]
    assert clocked_log.describe("t").partitions[0].bytes == 200


def test_reading_below_the_first_offset(clocked_log, clock):
    clocked_log.create_topic("t", partitions=1, retention_ms="1h")
    clocked_log.producer().send_batch("t", [b"a"] * 3)
    for group in ("e", "l", "x", "m"):
        clocked_log.consumer(group).commit(
            "t", 0, 1
        )  # these groups read offset 1, then retention passes them
    clock.advance(3601)
    clocked_log.producer().send_batch("t", [b"b"] * 2)
    clocked_log.clean("t")
    with pytest.raises(tidelog.OffsetOutOfRange) as err:
        clocked_log.read("t", 0, after=1)
    assert err.value.first == 4
    assert [m.offset for m in clocked_log.read("t", 0, after=3)] == [4, 5]
    consumer = clocked_log.consumer("g")
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.OffsetOutOfRange):
        consumer.seek("t", 0, 1)
    assert snapshot(clocked_log) == before
    # auto_reset decides where a stream group goes on.
    assert [m.offset for m in clocked_log.consumer("e", auto_reset="earliest").fetch("t", 0)] == [4, 5]
    assert clocked_log.consumer("l", auto_reset="latest").fetch("t", 0) == []
    with pytest.raises(tidelog.OffsetOutOfRange):
        clocked_log.consumer("x", auto_reset="error").fetch("t", 0)
    with pytest.raises(tidelog.InvalidRequest):
        clocked_log.consumer("x", auto_reset="sometimes")
    member = clocked_log.consumer("m", topics=["t"], heartbeat_interval=0)
    assert [m.offset for m in member.poll(timeout=0)] == [4, 5]


@pytest.mark.store_feature("queues")
def test_queue_groups_move_on_and_keep_what_they_hold(clocked_log, clock):
    clocked_log.create_topic("q", partitions=1, retention_ms="1h")
    q = clocked_log.queue("q")
    q.send_batch([b"1", b"2", b"3", b"4"])
    (held,) = q.receive()  # offset 1 stays leased
    clock.advance(3601)
    q.send(b"5")
    clocked_log.clean("q")
    # Nothing the group holds in flight is removed, so nothing before it either.
    assert offsets(clocked_log, "q") == [1, 2, 3, 4, 5]
    q.ack(held)
    clocked_log.clean("q")
    assert offsets(clocked_log, "q") == [5]
    assert [d.offset for d in q.receive(max_messages=10)] == [5]  # it moves on past the gap


@pytest.mark.store_feature("queues")
def test_retention_consumed_removes_what_every_group_finished(clocked_log):
    clocked_log.create_topic("w", partitions=1, retention="consumed", retention_ms=None)
    clocked_log.producer().send_batch("w", [b"x"] * 6)
    clocked_log.clean("w")
    assert offsets(clocked_log, "w") == [1, 2, 3, 4, 5, 6]  # no group yet: nothing is consumed
    stream = clocked_log.consumer("s")
    stream.commit("w", 0, 4)
    q = clocked_log.queue("w", group="workers")
    deliveries = q.receive(max_messages=3)  # offsets 1, 2, 3
    q.ack(deliveries[0])
    q.ack(deliveries[2])
    clocked_log.clean("w")
    # The queue group finished 1 and 3, but 2 is in flight: only 1 may go.
    assert offsets(clocked_log, "w") == [2, 3, 4, 5, 6]
    q.ack(deliveries[1])
    clocked_log.clean("w")
    assert offsets(clocked_log, "w") == [4, 5, 6]  # the queue group finished 1..3, the stream group 1..4
    stream.commit("w", 0, 6)
    for d in q.receive(max_messages=10):
        q.ack(d)
    clocked_log.clean("w")
    assert offsets(clocked_log, "w") == []


def test_compaction_keeps_the_latest_per_key(clocked_log, clock):
    clocked_log.create_topic("c", partitions=1, cleanup_policy="compact", delete_retention_ms="10s")
    producer = clocked_log.producer()
    for i in range(9):
        producer.send("c", {"v": i}, key=f"k{i % 3}")
    producer.send("c", "no key")
    producer.send("c", None, key="k0")  # a tombstone for k0
    (report,) = clocked_log.clean("c")
    kept = [(m.offset, m.key, m.data) for m in clocked_log.read("c", 0)]
    assert kept == [(8, b"k1", {"v": 7}), (9, b"k2", {"v": 8}), (10, None, "no key"), (11, b"k0", None)]
    assert report.compacted == 7
    clock.advance(11)
    clocked_log.clean("c")
    assert [m.offset for m in clocked_log.read("c", 0)] == [8, 9, 10]  # the tombstone went after its delay
    assert producer.send("c", b"z", key="k9").offset == 12


def test_compaction_never_touches_the_newest_lag(clocked_log, clock):
    clocked_log.create_topic("c", partitions=1, cleanup_policy="compact", min_compaction_lag_ms="1m")
    producer = clocked_log.producer()
    producer.send("c", b"1", key="k")
    producer.send("c", b"2", key="k")
    clocked_log.clean("c")
    assert offsets(clocked_log, "c") == [1, 2]
    clock.advance(61)
    clocked_log.clean("c")
    assert offsets(clocked_log, "c") == [2]


def test_compaction_without_keys_keeps_everything_and_says_so(clocked_log):
    clocked_log.create_topic("c", partitions=1, cleanup_policy="compact,delete")
    clocked_log.producer().send_batch("c", [b"a", b"b"])
    (report,) = clocked_log.clean("c")
    assert report.removed == 0
    assert "no record has a key" in report.notes[0]


def test_alter_topic_changes_retention(clocked_log, clock):
    clocked_log.create_topic("t", partitions=1)
    clocked_log.producer().send_batch("t", [b"x"] * 3)
    clock.advance(60)
    clocked_log.clean()
    assert len(offsets(clocked_log, "t")) == 3  # default: seven days
    clocked_log.alter_topic("t", retention_ms="30s")
    assert clocked_log.topic("t").config["retention_ms"] == 30_000
    clocked_log.clean()
    assert offsets(clocked_log, "t") == []


@pytest.mark.parametrize(
    "settings",
    [
        {"retention_ms": "-1h"},
        {"retention_ms": -5},
        {"retention_ms": "forever"},
        {"retention_bytes": "1 parsec"},
        {"retention_bytes": -1},
        {"cleanup_policy": "shred"},
        {"retention": "whenever"},
        {"delete_retention_ms": "1y"},
        {"min_compaction_lag_ms": True},
        {"retention_bytes": 1 << 70},  # settings travel as JSON: 64 bits at most
    ],
)
def test_bad_settings_are_refused_and_change_nothing(clocked_log, settings):
    clocked_log.create_topic("t", partitions=1)
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.InvalidRequest):
        clocked_log.create_topic("u", partitions=1, **settings)
    with pytest.raises(tidelog.InvalidRequest):
        clocked_log.alter_topic("t", **settings)
    assert snapshot(clocked_log) == before


def test_durations_and_sizes_parse():
    from tidelog.config import parse_duration_ms, parse_size_bytes

    assert [parse_duration_ms("d", v) for v in ("7d", "12h", "30m", "10s", "500ms", 42)] == [
        604_800_000,
        43_200_000,
        1_800_000,
        10_000,
        500,
        42,
    ]
    assert [parse_size_bytes("s", v) for v in ("1GiB", "500MB", "64KiB", "100B", 7)] == [
        1 << 30,
        500_000_000,
        65_536,
        100,
        7,
    ]


def test_cleaning_beside_producers_and_consumers_loses_nothing_unallowed(store):
    log = store.open()
    log.create_topic("busy", partitions=2, retention="consumed", retention_ms=None)
    sent: list[tuple[int, int]] = []
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def produce() -> None:
        with store.open() as mine:
            producer = mine.producer()
            for i in range(300):
                s = producer.send("busy", {"i": i}, partition=i % 2)
                sent.append((s.partition, s.offset))
        done.set()

    def consume() -> None:
        with store.open() as mine:
            consumer = mine.consumer("readers")
            while not done.is_set() or any(x.lag for x in mine.describe_group("readers", ["busy"])):
                for p in (0, 1):
                    msgs = consumer.fetch("busy", p, max_messages=20)
                    seen.extend((m.partition, m.offset) for m in msgs)
                    if msgs:
                        consumer.commit(msgs[-1])

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    while not done.is_set():
        log.clean("busy", chunk=7)
    for t in threads:
        t.join()
    log.clean("busy")
    # Every record was read by the group before cleaning removed it, exactly once in order.
    assert sorted(seen) == sorted(sent)
    assert len(seen) == len(set(seen)) == 300
    assert log.describe("busy").records == 0
    log.close()
