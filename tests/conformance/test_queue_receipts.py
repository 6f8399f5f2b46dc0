"""Which receipt settles a record (issue 27, finding 12).

The rule: a receipt that is not the record's current lease, nor the one
that finished it, is LeaseLost; the receipt that finished a record may come
again (a retried ack) and is a no-op. So the receipt of an earlier delivery,
whose lease expired, stays refused after the record was delivered again
and acked (or dead-lettered) under the later delivery, on every front: a
single ack, ack_many and settle_many, and what they become over HTTP.
"""

from __future__ import annotations

import pytest

import tidelog

pytestmark = pytest.mark.store_feature("queues")


def redelivered(q, clock):
    """One record delivered twice: (the first delivery, the second)."""
    q.send(b"x")
    (first,) = q.receive()
    clock.advance(11)  # its lease expires
    (second,) = q.receive()
    assert (second.offset, second.delivery_count) == (first.offset, 2)
    return first, second


def test_an_earlier_receipt_is_refused_after_the_later_delivery_was_acked(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    first, second = redelivered(q, clock)
    q.ack(second)
    with pytest.raises(tidelog.LeaseLost, match="later delivery"):
        q.ack(first)
    q.ack(second)  # the receipt that finished it, again: a no-op
    results = q.ack_many([first, second])
    assert isinstance(results[0], tidelog.LeaseLost) and results[1] is None
    results = q.settle_many([("ack", first, None), ("ack", second, None)])
    assert isinstance(results[0], tidelog.LeaseLost) and results[1] is None
    with pytest.raises(tidelog.LeaseLost):
        q.extend(first, 10)
    with pytest.raises(tidelog.LeaseLost):
        q.nack(first)
    clock.advance(60)
    assert q.receive() == [] and q.stats().available == 0


def test_an_earlier_receipt_is_refused_while_the_later_delivery_is_leased(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    first, second = redelivered(q, clock)
    with pytest.raises(tidelog.LeaseLost, match="delivered again"):
        q.ack(first)
    q.ack(second)
    clock.advance(60)
    assert q.receive() == []


def test_an_earlier_receipt_is_refused_after_a_dead_letter(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10, max_deliveries=2)
    first, second = redelivered(q, clock)
    clock.advance(11)
    assert q.receive() == []  # delivered twice already: dead-lettered
    assert q.stats().dead_lettered == 1
    for stale in (first, second):
        with pytest.raises(tidelog.LeaseLost, match="later delivery"):
            q.ack(stale)
    assert [type(r) for r in q.ack_many([first, second])] == [tidelog.LeaseLost, tidelog.LeaseLost]


def test_a_rejected_record_refuses_the_earlier_receipt_and_takes_its_own_again(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    first, second = redelivered(q, clock)
    q.reject(second, "bad input")
    with pytest.raises(tidelog.LeaseLost):
        q.ack(first)
    with pytest.raises(tidelog.LeaseLost):
        q.reject(first)
    q.ack(second)  # the receipt that finished it (into the dead letters): a no-op
    assert len(clocked_log.read("jobs.dlq", 0)) == 1


def test_a_first_delivery_acked_twice_stays_a_no_op(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=10)
    q.send_batch([b"a", b"b"])
    a, b = q.receive(max_messages=2)
    q.ack(a)
    q.ack(a)
    assert q.ack_many([a, b, b]) == [None, None, None]
    clock.advance(60)
    assert q.receive() == []
