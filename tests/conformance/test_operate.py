"""Operating on consumers: redrive dead letters back to their origin topic,
reset a stream group's offsets (refused while it has live members)."""

from __future__ import annotations

import pytest

import tidelog
from tidelog.deadletters import dead_letters, redrive
from tidelog.resets import reset_offsets

from .conftest import snapshot


def dead_lettered(log, n: int = 3) -> tidelog.Queue:
    """orders with n records, each rejected by the queue group 'workers'."""
    log.create_topic("orders", partitions=2)
    q = log.queue("orders", "workers")
    for i in range(n):
        log.producer().send("orders", {"n": i}, key=f"k{i}", headers={"trace": f"t{i}"}, partition=i % 2)
    for d in q.receive(max_messages=n):
        q.reject(d, reason=f"bad {d.data['n']}")
    return q


@pytest.mark.store_feature("queues")
def test_redrive_selected_then_all_with_headers_kept(clocked_log):
    q = dead_lettered(clocked_log)
    held = dead_letters(clocked_log, "orders.dlq")
    assert sorted((d.origin_topic, d.reason) for d in held) == [("orders", f"bad {i}") for i in range(3)]
    by_n = {d.message.data["n"]: d for d in held}

    result = q.redrive([by_n[1].offset])
    assert [(m.dead_letter_offset, m.topic, m.partition) for m in result.moved] == [
        (by_n[1].offset, "orders", by_n[1].origin_partition)
    ]
    back = clocked_log.read("orders", 1, after=result.moved[0].offset - 1)[0]
    assert back.data == {"n": 1} and back.key == b"k1"
    headers = dict(back.headers)
    assert (
        headers["trace"] == b"t1" and headers["tidelog-origin-offset"] == str(by_n[1].origin_offset).encode()
    )
    assert headers["tidelog-reason"] == b"bad 1"
    assert sorted(d.message.data["n"] for d in dead_letters(clocked_log, "orders.dlq")) == [0, 2]
    # The queue group gets the redriven record as a new one.
    again = q.receive(max_messages=10)
    assert [d.data for d in again] == [{"n": 1}]

    rest = q.redrive()
    assert sorted(
        clocked_log.read("orders", m.partition, m.offset - 1, 1)[0].data["n"] for m in rest.moved
    ) == [
        0,
        2,
    ]
    assert dead_letters(clocked_log, "orders.dlq") == [] and rest.skipped == []
    assert q.redrive().moved == []  # nothing left: nothing moves


@pytest.mark.store_feature("queues")
def test_redrive_bad_input_changes_nothing(clocked_log):
    q = dead_lettered(clocked_log, 2)
    clocked_log.producer().send("orders.dlq", "typed by hand")  # no origin stamp
    first = dead_letters(clocked_log, "orders.dlq")[0].offset
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.UnknownTopic):
        redrive(clocked_log, "nosuch.dlq")
    with pytest.raises(tidelog.InvalidRequest, match="no record at offset 99"):
        q.redrive([first, 99])
    with pytest.raises(tidelog.InvalidRequest, match="not dead-lettered by a queue group"):
        redrive(clocked_log, "orders.dlq", [first + 2])
    with pytest.raises(tidelog.InvalidRequest, match="came from 'orders', not 'other'"):
        redrive(clocked_log, "orders.dlq", [first], origin="other")
    for bad in ([], [0], [first, first], "1", [True]):
        with pytest.raises(tidelog.InvalidRequest):
            redrive(clocked_log, "orders.dlq", bad)
    assert snapshot(clocked_log) == before
    # All: the unstamped record is left where it is, and said so.
    result = redrive(clocked_log, "orders.dlq")
    assert len(result.moved) == 2 and result.skipped == [first + 2]


@pytest.mark.store_feature("queues")
def test_redrive_to_a_deleted_topic_is_refused(clocked_log):
    dead_lettered(clocked_log, 1)
    clocked_log.delete_topic("orders")
    before = snapshot(clocked_log)
    with pytest.raises(tidelog.UnknownTopic, match="origin topic 'orders'.*nothing was redriven"):
        redrive(clocked_log, "orders.dlq")
    assert snapshot(clocked_log) == before and len(dead_letters(clocked_log, "orders.dlq")) == 1


@pytest.mark.store_feature("groups")
def test_reset_offsets_to_earliest_latest_offset_and_time(clocked_log, clock):
    clocked_log.create_topic("events", partitions=2)
    for i in range(6):
        clock.now += 1000
        clocked_log.producer().send("events", i, partition=i % 2)
    reader = clocked_log.consumer("g")
    reader.commit("events", 0, 2)

    def committed():
        return [clocked_log.consumer("g").committed("events", p) for p in (0, 1)]

    assert [r.lag for r in reset_offsets(clocked_log, "g", "events", "latest")] == [0, 0]
    assert committed() == [3, 3]
    reset_offsets(clocked_log, "g", "events", "earliest")
    assert committed() == [0, 0]
    reset_offsets(clocked_log, "g", "events", "offset", 2, partition=1)
    assert committed() == [0, 2]
    # Records 0..5 were appended at +1 s .. +6 s: the 4th (i=3, partition 1, offset 2)
    # is the first of partition 1 at or after +4 s.
    reset_offsets(clocked_log, "g", "events", "time", clock.now - 2000)
    assert committed() == [2, 1]
    reset_offsets(clocked_log, "g", "events", "time", clock.now + 1)  # after everything: the end
    assert committed() == [3, 3]


@pytest.mark.store_feature("groups")
def test_reset_is_refused_while_members_live_and_bad_input_changes_nothing(clocked_log, store):
    clocked_log.create_topic("events", partitions=2)
    clocked_log.producer().send("events", 1, partition=0)
    clocked_log.consumer("g").commit("events", 0, 1)
    before = snapshot(clocked_log)
    for args, error in [
        (("g", "events", "offset", 5), tidelog.OffsetOutOfRange),
        (("g", "events", "offset"), tidelog.InvalidRequest),
        (("g", "events", "latest", 3), tidelog.InvalidRequest),
        (("g", "events", "yesterday"), tidelog.InvalidRequest),
        (("g", "nosuch", "earliest"), tidelog.UnknownTopic),
        (("nosuch", "events", "earliest"), tidelog.UnknownGroup),
        (("g", "events", "time", -1), tidelog.InvalidRequest),
    ]:
        with pytest.raises(error):
            reset_offsets(clocked_log, *args)
    with pytest.raises(tidelog.UnknownPartition):
        reset_offsets(clocked_log, "g", "events", "earliest", partition=2)
    member = clocked_log.consumer("g", topics=["events"], heartbeat_interval=0, member_id="m1")
    member.poll(timeout=0)
    with pytest.raises(tidelog.GroupActive, match="live member.*m1"):
        reset_offsets(clocked_log, "g", "events", "earliest")
    assert clocked_log.consumer("g").committed("events", 0) == 1
    member.close()
    assert snapshot(clocked_log)[2] == before[2]
    reset_offsets(clocked_log, "g", "events", "earliest")
    assert clocked_log.consumer("g").committed("events", 0) == 0
    if store.name != "http":  # the http:// store lists no queue groups
        clocked_log.queue("events", "workers")
        with pytest.raises(tidelog.InvalidRequest, match="is a queue group"):
            reset_offsets(clocked_log, "workers", "events", "earliest")


@pytest.mark.store_feature("streams")
def test_in_flight_shows_delivery_counts_and_lease_deadlines(clocked_log, clock):
    q = clocked_log.queue("work", "w", visibility_timeout=30)
    q.send("a")
    q.send("b")
    first = q.receive(max_messages=2)
    clock.now += 31_000  # both leases run out; one is taken again
    again = q.receive(visibility_timeout=10)
    leased = {p.offset: (p.delivery_count, p.deadline) for p in q.in_flight()}
    other = 3 - again[0].offset
    # The one taken again has a new deadline; the other's lease ran out 1 s ago (due again).
    assert leased == {again[0].offset: (2, clock.now + 10_000), other: (1, clock.now - 1_000)}
    assert again[0].lease_deadline == clock.now + 10_000 and first[0].delivery_count == 1
