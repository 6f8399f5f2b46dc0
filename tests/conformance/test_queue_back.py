"""A nack to the back is strictly behind every record waiting at that moment
(issue 14, item 3): whatever the clock's resolution, also when the records
waiting were appended in the same millisecond as the nack."""

from __future__ import annotations

import pytest

from .conftest import Clock

pytestmark = pytest.mark.store_feature("queues")

ROUNDS = 200


def back_round(q, n: int) -> list[bytes]:
    """send a, b, c; receive a; nack a; receive a; nack(back) a; receive x3."""
    q.send_batch([f"{n}a".encode(), f"{n}b".encode(), f"{n}c".encode()])
    (a,) = q.receive()
    assert a.value == f"{n}a".encode()
    q.nack(a)
    (a,) = q.receive()
    assert (a.value, a.delivery_count) == (f"{n}a".encode(), 2)
    q.nack(a, back=True)
    got = [q.receive()[0] for _ in range(3)]
    for d in got:
        q.ack(d)
    return [d.value for d in got]


def test_back_in_a_tight_loop_on_the_wall_clock(store):
    log = store.open()
    try:
        q = log.queue("jobs")
        orders = [back_round(q, n) for n in range(ROUNDS)]
        wrong = [(n, o) for n, o in enumerate(orders) if o != [f"{n}{c}".encode() for c in "bca"]]
        assert wrong == []
        assert q.receive() == []
    finally:
        log.close()


def test_back_with_a_frozen_clock(store):
    log = store.open(clock=Clock())  # never moves: every step happens in one millisecond
    try:
        q = log.queue("jobs")
        for n in range(20):
            assert back_round(q, n) == [f"{n}{c}".encode() for c in "bca"]
    finally:
        log.close()


def test_back_twice_keeps_the_order_of_the_nacks(store):
    clock = Clock()
    log = store.open(clock=clock)
    try:
        q = log.queue("jobs")
        q.send_batch([b"1", b"2", b"3", b"4"])
        d1, d2 = q.receive(max_messages=2)
        q.nack(d2, back=True)
        q.nack(d1, back=True)
        assert [d.value for d in q.receive(max_messages=10)] == [b"3", b"4", b"2", b"1"]
    finally:
        log.close()


def test_back_is_behind_every_partition(store):
    clock = Clock()
    log = store.open(clock=clock)
    try:
        log.create_topic("jobs", partitions=3)
        q = log.queue("jobs")
        for p in range(3):
            q.send_batch([f"{p}-1".encode(), f"{p}-2".encode()], partition=p)
        first = q.receive(max_messages=1)[0]
        q.nack(first, back=True)
        got = q.receive(max_messages=10)
        assert len(got) == 6
        assert got[-1].value == first.value
    finally:
        log.close()


def test_back_of_an_older_record_is_behind_a_delayed_one_due_now(store):
    clock = Clock()
    log = store.open(clock=clock)
    try:
        q = log.queue("jobs")
        q.send(b"now")
        q.send(b"later", delay=5)
        (d,) = q.receive()
        assert q.receive() == []  # "later" waits
        clock.advance(5)
        q.nack(d, back=True)  # "later" is due now: "now" goes behind it
        assert [x.value for x in q.receive(max_messages=10)] == [b"later", b"now"]
    finally:
        log.close()
