"""Per-key ordering: `log.queue(topic, ordering="key")` hands out the records
of one key in offset order, at most one in flight per key; other keys (and
records without a key) go out in parallel."""

from __future__ import annotations

import threading

import pytest

import tidelog

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("queues")


def values(deliveries):
    return [d.value for d in deliveries]


def send_keyed(q, pairs):
    for key, value in pairs:
        q.send(value.encode(), key=key)


def test_one_in_flight_per_key_in_offset_order(clocked_log):
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=60)
    send_keyed(q, [("a", "a1"), ("a", "a2"), ("b", "b1"), ("a", "a3"), ("b", "b2")])
    first = q.receive(max_messages=10)
    assert values(first) == [b"a1", b"b1"]  # one per key
    assert q.receive(max_messages=10) == []
    q.ack(first[0])
    assert values(q.receive(max_messages=10)) == [b"a2"]
    q.ack(first[1])
    (b2,) = q.receive(max_messages=10)
    assert b2.value == b"b2"
    assert q.receive() == []


def test_records_without_a_key_are_unordered(clocked_log):
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=60)
    q.send_batch([b"x", b"y", b"z"])
    send_keyed(q, [("a", "a1"), ("a", "a2")])
    assert values(q.receive(max_messages=10)) == [b"x", b"y", b"z", b"a1"]


def test_a_nack_holds_back_the_key(clocked_log, clock):
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=60)
    send_keyed(q, [("a", "a1"), ("a", "a2"), ("b", "b1")])
    a1, b1 = q.receive(max_messages=10)
    q.nack(a1, delay=30)
    q.ack(b1)
    assert q.receive(max_messages=10) == []  # a2 waits for a1
    clock.advance(31)
    (again,) = q.receive(max_messages=10)
    assert (again.value, again.delivery_count) == (b"a1", 2)
    q.ack(again)
    assert values(q.receive(max_messages=10)) == [b"a2"]


def test_a_nack_to_the_back_stays_ahead_of_its_own_key(clocked_log):
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=60)
    send_keyed(q, [("a", "a1"), ("a", "a2"), ("b", "b1")])
    (a1,) = q.receive()
    q.nack(a1, back=True)
    got = q.receive(max_messages=10)
    assert values(got) == [b"b1", b"a1"]


def test_an_expired_lease_holds_back_the_key(clocked_log, clock):
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=10)
    send_keyed(q, [("a", "a1"), ("a", "a2")])
    (a1,) = q.receive()
    clock.advance(5)
    assert q.receive() == []
    clock.advance(6)
    (again,) = q.receive(max_messages=10)
    assert (again.value, again.delivery_count) == (b"a1", 2)
    with pytest.raises(tidelog.LeaseLost):
        q.ack(a1)
    q.ack(again)
    assert values(q.receive()) == [b"a2"]


def test_a_dead_letter_releases_the_key(clocked_log, clock):
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=10, max_deliveries=2)
    send_keyed(q, [("a", "a1"), ("a", "a2"), ("a", "a3")])
    (a1,) = q.receive()
    q.reject(a1, "bad")
    (a2,) = q.receive()
    assert a2.value == b"a2"
    clock.advance(11)
    assert values(q.receive()) == [b"a2"]  # delivery 2
    clock.advance(11)
    # a2 reached max deliveries: dead-lettered by this receive, which hands out a3
    assert values(q.receive()) == [b"a3"]
    dead = clocked_log.read("orders.dlq", 0, after=0, limit=10)
    assert [m.value for m in dead] == [b"a1", b"a2"]


def test_priority_does_not_break_key_order(clocked_log):
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=60)
    q.send(b"a1", key="a")
    q.send(b"a2", key="a", priority=9)
    q.send(b"b1", key="b", priority=5)
    assert values(q.receive(max_messages=10)) == [b"b1", b"a1"]


def test_several_partitions(clocked_log):
    clocked_log.create_topic("orders", partitions=4)
    q = clocked_log.queue("orders", ordering="key", visibility_timeout=60)
    keys = [f"k{i}" for i in range(8)]
    for n in range(3):
        for k in keys:
            q.send(f"{k}-{n}".encode(), key=k)
    for n in range(3):
        got = q.receive(max_messages=100)
        assert sorted(values(got)) == sorted(f"{k}-{n}".encode() for k in keys)
        assert q.receive(max_messages=100) == []
        q.ack_many(got)


def test_receivers_in_threads_never_hold_two_of_a_key(store):
    log = store.open()
    try:
        q = log.queue("orders", ordering="key", visibility_timeout=600)
        keys = [f"k{i}".encode() for i in range(10)]
        for n in range(40):
            q.send(f"{n:03d}".encode(), key=keys[(n * 7) % 10])
        held: set[bytes] = set()
        order: dict[bytes, list[int]] = {}
        violations: list[str] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def worker() -> None:
            try:
                mine = log.queue("orders")
                idle = 0
                while idle < 3:
                    got = mine.receive(max_messages=3, wait=0.05)
                    if not got:
                        idle += 1
                        continue
                    idle = 0
                    with lock:
                        for d in got:
                            if d.key in held:
                                violations.append(f"{d.key!r} held twice")
                            held.add(d.key)
                            order.setdefault(d.key, []).append(d.offset)
                    with lock:  # released before the ack: the next of the key waits for the ack
                        held.difference_update(d.key for d in got)
                    assert mine.ack_many(got) == [None] * len(got)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert violations == []
        assert sum(map(len, order.values())) == 40
        assert all(offsets == sorted(offsets) for offsets in order.values())
    finally:
        log.close()


def test_a_group_keeps_its_ordering(clocked_log):
    clocked_log.queue("orders", group="g", ordering="key")
    assert clocked_log.queue("orders", group="g").ordering == "key"
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.GroupConflict, match="has ordering 'key'"):
        clocked_log.queue("orders", group="g", ordering="none")
    plain = clocked_log.queue("orders", group="plain")
    assert plain.ordering == "none"
    with pytest.raises(tidelog.GroupConflict, match="has ordering 'none'"):
        clocked_log.queue("orders", group="plain", ordering="key")
    with pytest.raises(tidelog.InvalidRequest, match="ordering"):
        clocked_log.queue("orders", group="other", ordering="fifo")
    assert snapshot(clocked_log)[0] == before[0]
