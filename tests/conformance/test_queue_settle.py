"""Settling many leases at once: ack_many, nack_many, extend_many, settle_many.

One store transaction a call; each delivery succeeds or reports its own
LeaseLost, and one lost lease does not stop the others.
"""

from __future__ import annotations

import pytest

import tidelog

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("queues")


def test_ack_many_acks_each_and_reports_a_lost_lease_in_its_place(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    q.send_batch([b"r0", b"r1"])
    first = q.receive(max_messages=2)
    clock.advance(11)  # those two expire and are delivered again below
    q.send_batch([b"r2", b"r3", b"r4"])
    again = q.receive(max_messages=2)
    assert [d.offset for d in again] == [d.offset for d in first]
    rest = q.receive(max_messages=3)
    results = q.ack_many([*rest[:2], first[0], rest[2], *again])
    assert results[:2] == [None, None]
    assert isinstance(results[2], tidelog.LeaseLost) and "delivered again" in str(results[2])
    assert results[3:] == [None, None, None]
    clock.advance(3600)
    assert q.receive(max_messages=10) == []  # all five done
    assert q.stats().in_flight == 0
    assert q.ack_many(rest) == [None, None, None]  # twice: a no-op, as ack
    assert q.ack_many([]) == []


def test_nack_many_front_back_and_delay(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=120)
    q.send_batch([b"1", b"2", b"3", b"4", b"5", b"6"])
    d1, d2, d3, d4 = q.receive(max_messages=4)
    assert q.nack_many([d3, d1], back=True) == [None, None]
    assert q.nack_many([d2]) == [None]
    assert q.nack_many([d4], delay=30) == [None]
    # front, then what waited, then the backs in the order given; d4 later
    assert [d.value for d in q.receive(max_messages=10)] == [b"2", b"5", b"6", b"3", b"1"]
    clock.advance(30)
    assert [d.value for d in q.receive(max_messages=10)] == [b"4"]


def test_extend_many_returns_the_new_deadlines(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    q.send_batch([b"a", b"b", b"c"])
    got = q.receive(max_messages=3)
    q.ack(got[1])
    results = q.extend_many(got, 60)
    assert results[0].lease_deadline == results[2].lease_deadline == clock.now + 60_000
    assert (results[0].offset, results[2].offset) == (got[0].offset, got[2].offset)
    assert isinstance(results[1], tidelog.LeaseLost) and "already done" in str(results[1])
    clock.advance(30)
    assert q.receive(max_messages=10) == []  # still leased
    clock.advance(31)
    assert [d.value for d in q.receive(max_messages=10)] == [b"a", b"c"]


def test_settle_many_mixes_commands(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=300)
    q.send_batch([b"a", b"b", b"c", b"d"])
    a, b, c, d = q.receive(max_messages=4)
    results = q.settle_many([("ack", a, None), ("back", b, None), ("extend", c, 100), ("delay", d, 50)])
    assert results[0] is None and results[1] is None and results[3] is None
    assert results[2].lease_deadline == clock.now + 100_000
    assert [x.value for x in q.receive(max_messages=10)] == [b"b"]
    clock.advance(51)
    assert [x.value for x in q.receive(max_messages=10)] == [b"d"]


def test_return_puts_a_lease_back_at_the_front_without_counting_it(store, clocked_log, clock):
    if store.name == "http":
        pytest.skip("the HTTP routes have no return: the http:// store sends it as a nack, counted")
    q = clocked_log.queue("jobs", visibility_timeout=300, max_deliveries=2)
    q.send_batch([b"a", b"b", b"c"])
    a, b = q.receive(max_messages=2)
    # A front leased b ahead and never handed it out, as many times as it likes.
    for _ in range(3):
        assert q.settle_many([("return", b, None)]) == [None]
        (b,) = q.receive()
        assert (b.value, b.delivery_count) == (b"b", 1)
    assert q.settle_many([("nack", a, None), ("return", b, None)]) == [None, None]
    got = q.receive(max_messages=3)
    # both at the front, by offset; a counted, b not; nothing dead-lettered
    assert [(d.value, d.delivery_count) for d in got] == [(b"a", 2), (b"b", 1), (b"c", 1)]
    assert q.stats().dead_lettered == 0
    lost = q.settle_many([("return", got[1], None), ("return", got[1], None)])
    assert lost[0] is None and isinstance(lost[1], tidelog.LeaseLost)  # the receipt went with it


def test_settle_and_poll_leases_after_the_settles(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=300, max_deliveries=2)
    q.send_batch([b"a", b"b", b"c", b"d"])
    a, b = q.receive(max_messages=2)
    # the nack puts a in front of c: the poll in the same call sees it
    results, got, _ = q.settle_and_poll([("ack", b, None), ("nack", a, None)], 2)
    assert results == [None, None]
    assert [(d.value, d.delivery_count) for d in got] == [(b"a", 2), (b"c", 1)]
    a, c = got
    # a was delivered twice: nacked again, it goes to the dead letters, and the poll takes d
    results, got, _ = q.settle_and_poll([("nack", a, None), ("ack", c, None)], 5)
    assert results == [None, None]
    assert [x.value for x in got] == [b"d"]
    (d,) = got
    assert q.stats().dead_lettered == 1
    results, got, next_due = q.settle_and_poll([("extend", d, 10), ("ack", c, None)], 0)
    assert results[0].lease_deadline == clock.now + 10_000 and results[1] is None
    assert got == [] and next_due is None
    clock.advance(11)  # d's lease expires: delivered again, its old receipt is lost
    (again,) = q.receive()
    lost, got, _ = q.settle_and_poll([("ack", a, None), ("ack", d, None)], 1)
    # a was dead-lettered under a later delivery (the receive that found it
    # past max deliveries): its receipt is an earlier one's, so it is refused
    assert isinstance(lost[0], tidelog.LeaseLost) and "later delivery" in str(lost[0])
    assert isinstance(lost[1], tidelog.LeaseLost) and got == []
    assert q.settle_and_poll([("ack", again, None)], 1) == ([None], [], None)
    with pytest.raises(tidelog.InvalidRequest):
        q.settle_and_poll([], -1)


@pytest.mark.parametrize(
    "call",
    [
        lambda q, ds: q.ack_many([*ds, "not a delivery"]),
        lambda q, ds: q.ack_many(ds[0]),
        lambda q, ds: q.nack_many(ds, delay=-1),
        lambda q, ds: q.nack_many(ds, back=True, delay=1),
        lambda q, ds: q.extend_many(ds, -5),
        lambda q, ds: q.settle_many([("ack", ds[0], None), ("finish", ds[1], None)]),
        lambda q, ds: q.settle_many([("ack", ds[0], 5)]),
        lambda q, ds: q.settle_many([("ack", ds[0])]),
        lambda q, ds: q.settle_many([("ack", ds[0], None), ("return", ds[1], 5)]),
        lambda q, ds: q.settle_and_poll([("ack", ds[0], None), ("nack", ds[1], 5)], 1),
        lambda q, ds: q.settle_and_poll([("ack", ds[0], None)], 1, visibility_timeout=0),
    ],
)
def test_bad_input_settles_nothing(clocked_log, clock, call):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    q.send_batch([b"a", b"b"])
    ds = q.receive(max_messages=2)
    before = snapshot(clocked_log), q.stats()
    with pytest.raises(tidelog.InvalidRequest):
        call(q, ds)
    assert (snapshot(clocked_log), q.stats()) == before
    assert q.ack_many(ds) == [None, None]  # both still held by their receipts


def test_deliveries_of_another_topic_are_refused(clocked_log):
    q = clocked_log.queue("jobs")
    other = clocked_log.queue("other")
    q.send(b"a")
    other.send(b"b")
    (d,) = other.receive()
    (mine,) = q.receive()
    with pytest.raises(tidelog.InvalidRequest, match="topic"):
        q.ack_many([mine, d])
    assert q.ack_many([mine]) == [None]
    assert other.ack_many([d]) == [None]
