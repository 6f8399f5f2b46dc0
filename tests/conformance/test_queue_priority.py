"""Priority: `q.send(value, priority=0..9)`; higher first among the available
records of a group, then the usual order (available time, then offset)."""

from __future__ import annotations

import pytest

import tidelog
from tidelog.bounds import PRIORITY
from tidelog.queues import PRIORITY_WINDOW

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("queues")


def values(deliveries):
    return [d.value for d in deliveries]


def test_higher_priority_first_then_offset(clocked_log):
    q = clocked_log.queue("jobs", visibility_timeout=600)
    for value, priority in [(b"a", 0), (b"b", 5), (b"c", 0), (b"d", 9), (b"e", 5)]:
        q.send(value, priority=priority)
    assert values(q.receive(max_messages=10)) == [b"d", b"b", b"e", b"a", b"c"]


def test_a_batch_of_plain_records_yields_to_a_priority_one_behind_them(clocked_log):
    # Plain records first (no meta: the common case a store may lease fast),
    # a priority record within the window after them: it still comes first.
    q = clocked_log.queue("jobs", visibility_timeout=600)
    q.send_batch([b"p0", b"p1", b"p2", b"p3", b"p4"])
    q.send(b"urgent", priority=9)
    assert values(q.receive(max_messages=3)) == [b"urgent", b"p0", b"p1"]
    assert values(q.receive(max_messages=10)) == [b"p2", b"p3", b"p4"]


def test_one_at_a_time_follows_priority_too(clocked_log):
    q = clocked_log.queue("jobs")
    q.send_batch([b"low1", b"low2"])
    q.send(b"high", priority=7)
    got = [q.receive()[0] for _ in range(3)]
    assert values(got) == [b"high", b"low1", b"low2"]
    assert q.receive() == []


def test_passed_over_records_keep_their_place(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=600)
    q.send_batch([b"a", b"b", b"c"], priority=1)
    q.send(b"x", priority=3)
    q.send(b"z")
    assert values(q.receive()) == [b"x"]
    stats = q.stats()  # a, b, c wait in the group's state now; z past its cursor
    assert (stats.available, stats.in_flight) == (4, 1)
    clock.advance(1)
    q.send(b"y", priority=3)  # newer, higher: still first
    assert values(q.receive(max_messages=10)) == [b"y", b"a", b"b", b"c", b"z"]
    assert q.stats().available == 0


def test_a_released_record_keeps_its_priority(clocked_log):
    q = clocked_log.queue("jobs", visibility_timeout=600)
    q.send(b"urgent", priority=9)
    q.send(b"normal", priority=1)
    (d,) = q.receive()
    assert d.value == b"urgent"
    q.nack(d, back=True)  # behind everything waiting, but ahead by priority
    assert values(q.receive(max_messages=10)) == [b"urgent", b"normal"]


def test_a_nack_to_the_front_does_not_jump_a_higher_priority(clocked_log):
    q = clocked_log.queue("jobs", visibility_timeout=600)
    q.send(b"low")
    (d,) = q.receive()
    q.send(b"high", priority=2)
    q.nack(d)
    assert values(q.receive(max_messages=10)) == [b"high", b"low"]


def test_priorities_across_partitions(clocked_log):
    clocked_log.create_topic("jobs", partitions=3)
    q = clocked_log.queue("jobs", visibility_timeout=600)
    for p in range(3):
        q.send_batch([f"{p}-low".encode()], partition=p)
    q.send(b"2-high", partition=2, priority=4)
    q.send(b"1-mid", partition=1, priority=2)
    got = values(q.receive(max_messages=10))
    assert got[:2] == [b"2-high", b"1-mid"]
    assert sorted(got[2:]) == [b"0-low", b"1-low", b"2-low"]


def test_priority_with_a_delay(clocked_log, clock):
    q = clocked_log.queue("jobs", visibility_timeout=600)
    q.send(b"later", priority=9, delay=10)
    q.send(b"now")
    assert values(q.receive(max_messages=10)) == [b"now"]
    clock.advance(10)
    q.send(b"also-now", priority=1)
    assert values(q.receive(max_messages=10)) == [b"later", b"also-now"]


def test_within_the_window_the_highest_comes_first(clocked_log):
    q = clocked_log.queue("jobs", visibility_timeout=600)
    q.send_batch([f"n{i}".encode() for i in range(PRIORITY_WINDOW - 1)])
    q.send(b"top", priority=9)
    assert values(q.receive()) == [b"top"]
    rest = q.receive(max_messages=PRIORITY_WINDOW)
    assert values(rest) == [f"n{i}".encode() for i in range(PRIORITY_WINDOW - 1)]


def test_stream_groups_see_the_record_unchanged(clocked_log):
    q = clocked_log.queue("jobs")
    q.send(b"v", priority=6, headers={"h": b"1"})
    (m,) = clocked_log.read("jobs", 0, after=0, limit=10)
    assert m.value == b"v"
    assert dict(m.headers) == {"h": b"1", PRIORITY: b"6"}


@pytest.mark.parametrize("priority", [-1, 10, 1.5, "5", True, None])
def test_bad_priority_writes_nothing(clocked_log, priority):
    q = clocked_log.queue("jobs")
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.InvalidRequest, match="priority"):
        q.send(b"x", priority=priority)
    with pytest.raises(tidelog.InvalidRequest, match="priority"):
        q.send_batch([b"x", b"y"], priority=priority)
    assert snapshot(clocked_log) == before
