"""A queue handle whose group was destroyed (XGROUP DESTROY, `queue_delete`)
behaves the same on every store: what it asks of the group raises
UnknownGroup, a settle of a delivery it handed out raises LeaseLost (the
lease went with the group), and nothing brings the group back but opening it
again."""

from __future__ import annotations

import pytest

import tidelog

# Destroying a group is the Redis-shaped role's (XGROUP DESTROY).
pytestmark = [pytest.mark.store_feature("queues"), pytest.mark.store_feature("streams")]


def test_a_handle_of_a_destroyed_group_raises_unknown_group(log):
    q = log.queue("t", "g")
    q.send_batch([b"a", b"b", b"c"])
    held = q.receive()[0]
    assert log.store.queue_delete("g", "t")
    for ask in (lambda: q.receive(), lambda: q.receive(max_messages=5), lambda: q.poll(3)):
        with pytest.raises(tidelog.UnknownGroup, match="'g'"):
            ask()
    # A delivery's lease went with its group: its receipt is no longer valid.
    for settle in (lambda: q.ack(held), lambda: q.nack(held), lambda: q.extend(held, 10)):
        with pytest.raises(tidelog.LeaseLost):
            settle()
    assert log.queue_groups("t") == []  # nothing brought it back
    q.send(b"d")  # sending is the topic's, not the group's
    again = log.queue("t", "g")  # opening it again starts the group afresh
    assert [d.value for d in again.receive(max_messages=10)] == [b"a", b"b", b"c", b"d"]
    assert [d.value for d in q.receive(max_messages=10)] == []  # the old handle sees the new group
