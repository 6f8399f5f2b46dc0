"""How old the oldest available record is (issue 27, finding 13).

`oldest_available_age_ms` counts from when a record first became available:
its append, or its deliver-at when it was sent with a delay (SQS's
ApproximateAgeOfOldestMessage counts from the send; a delay asked for is
not waiting). Nothing that happens to it since makes it younger: a nack to
the front, a nack to the back, an expired lease, a nack with a delay once
that delay is over. So a poison message nacked again and again shows as the
age an alert on queue age watches.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.store_feature("queues")


def test_a_record_nacked_to_the_front_keeps_its_age(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=30)
    q.send(b"poison")
    for _ in range(3):  # received, failed, nacked to the front: a loop
        (d,) = q.receive()
        clock.advance(5)
        q.nack(d)
    stats = q.stats()
    assert (stats.available, stats.in_flight) == (1, 0)
    assert stats.oldest_available_age_ms == 15_000


@pytest.mark.parametrize("how", ["back", "expired", "delay", "settle_many"])
def test_released_records_count_from_their_append(clocked_log, clock, how):
    q = clocked_log.queue("jobs", visibility_timeout=30)
    q.send(b"x")
    (d,) = q.receive()
    clock.advance(10)
    if how == "back":
        q.nack(d, back=True)
    elif how == "expired":
        clock.advance(30)
    elif how == "delay":
        q.nack(d, delay=20)
        assert q.stats().oldest_available_age_ms == 0  # waiting out its delay: not available
        clock.advance(20)
    else:
        assert q.settle_many([("nack", d, None)]) == [None]
    expected = {"back": 10_000, "expired": 40_000, "delay": 30_000, "settle_many": 10_000}[how]
    assert q.stats().oldest_available_age_ms == expected


def test_a_delayed_send_counts_from_its_deliver_at(clocked_log, clock):
    q = clocked_log.queue("jobs")
    q.send(b"later", delay=60)
    clock.advance(30)
    assert q.stats().oldest_available_age_ms == 0
    clock.advance(45)
    assert q.stats().oldest_available_age_ms == 15_000
    q.send(b"now")  # younger than the delayed one became available
    assert q.stats().oldest_available_age_ms == 15_000


def test_the_oldest_of_new_and_released_records(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=300)
    q.send(b"first")
    clock.advance(5)
    q.send(b"second")
    (first,) = q.receive()
    clock.advance(5)
    assert q.stats().oldest_available_age_ms == 5_000  # "second", waiting since its append
    q.nack(first)
    assert q.stats().oldest_available_age_ms == 10_000  # "first" is older
    q.ack(q.receive()[0])
    assert q.stats().oldest_available_age_ms == 5_000
