"""Streams over every store: entry ids, fields, named-consumer leases, trim.

The store calls behind Redis consumer groups (queue_create, queue_take,
queue_pending, queue_claim, queue_ack_offsets, queue_set_cursor,
queue_delete, queue_consumers, read_before, trim) are exercised through
`tidelog.streams.Streams` and directly where the contract is the store's.
"""

from __future__ import annotations

import pytest

import tidelog
from tidelog.streams import MAX_ID, NEVER, ZERO, Add, StreamId, Streams

from .conftest import snapshot

pytestmark = [
    pytest.mark.store_feature("streams"),
    # Redis streams are the RESP front's core (already on an event loop there), not a Python API.
    pytest.mark.sync_api_only("Streams has no asyncio twin"),
]


def add(streams: Streams, stream: str, *fields: bytes, id=None, **kw):
    pairs = list(zip(fields[::2], fields[1::2]))
    (result,) = streams.add([Add(stream, pairs, id, **kw)])
    if isinstance(result, Exception):
        raise result
    return result


def test_derived_ids_are_timestamp_and_offset(clocked_log, clock):
    s = Streams(clocked_log)
    first = add(s, "orders", b"value", b"a")
    clock.advance(0.005)
    second = add(s, "orders", b"value", b"b")
    assert first == StreamId(clock.now - 5, 1)
    assert second == StreamId(clock.now, 2)
    assert [e.id for e in s.range("orders", ZERO, MAX_ID)] == [first, second]
    assert s.offset_of("orders", second) == 2


def test_explicit_ids_are_kept_and_must_grow(clocked_log, clock):
    s = Streams(clocked_log)
    assert add(s, "s", b"f", b"1", id=(5, 1)) == StreamId(5, 1)
    assert add(s, "s", b"f", b"2", id=(5, None)) == StreamId(5, 2)
    before = snapshot(clocked_log)
    for bad in ((5, 2), (4, 9), (5, 1)):
        with pytest.raises(tidelog.StreamIdTooSmall):
            add(s, "s", b"f", b"x", id=bad)
    with pytest.raises(tidelog.InvalidStreamId, match="greater than 0-0"):
        add(s, "t", b"f", b"x", id=(0, 0))
    assert snapshot(clocked_log)[1]["s"] == before[1]["s"]
    # `*` after an id from the future continues after it: ids keep growing.
    future = add(s, "s", b"f", b"3", id=(clock.now + 60_000, 0))
    auto = add(s, "s", b"f", b"4")
    assert auto == StreamId(future.ms, 1)
    ids = [e.id for e in s.range("s", ZERO, MAX_ID)]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert s.offset_of("s", StreamId(5, 2)) == 2
    assert s.offset_of("s", StreamId(5, 3)) is None


def test_fields_map_to_value_key_and_headers_both_ways(clocked_log):
    s = Streams(clocked_log)
    add(s, "s", b"f", b"1", b"value", b"body", b"key", b"k1", b"g", b"2")
    (msg,) = clocked_log.read("s", 0)
    assert msg.value == b"body" and msg.key == b"k1"
    assert msg.headers == [("f", b"1"), ("g", b"2")]
    clocked_log.producer().send("s", {"n": 1}, key="k2", headers={"h": "v"})
    clocked_log.producer().send("s", b"plain")
    entries = s.range("s", ZERO, MAX_ID)
    assert entries[0].fields == [(b"key", b"k1"), (b"value", b"body"), (b"f", b"1"), (b"g", b"2")]
    assert entries[1].fields == [(b"key", b"k2"), (b"value", b'{"n":1}'), (b"h", b"v")]
    assert entries[2].fields == [(b"value", b"plain")]
    with pytest.raises(tidelog.InvalidValue):
        add(s, "s", b"\xff", b"x")


def test_a_topic_with_partitions_is_not_a_stream(clocked_log):
    clocked_log.create_topic("wide", partitions=2)
    s = Streams(clocked_log)
    with pytest.raises(tidelog.WrongType):
        add(s, "wide", b"f", b"v")
    with pytest.raises(tidelog.WrongType):
        s.range("wide", ZERO, MAX_ID)
    assert clocked_log.describe("wide").records == 0


def test_group_leases_never_expire_and_move_by_claim(clocked_log, clock):
    s = Streams(clocked_log)
    for i in range(3):
        add(s, "s", b"n", str(i).encode())
    s.create_group("s", "g", ZERO)
    with pytest.raises(tidelog.GroupExists):
        s.create_group("s", "g", ZERO)
    got = s.read_group("s", "g", "c1", 2, noack=False)
    assert [e.offset for e in got] == [1, 2]
    clock.advance(3600)
    # No expiry: a day later nothing is handed out again, only the new one.
    assert [e.offset for e in s.read_group("s", "g", "c2", 10, noack=False)] == [3]
    rows = s.pending("s", "g", ZERO, MAX_ID, 10)
    assert [(r[1], r[2], r[3]) for r in rows] == [("c1", 3_600_000, 1), ("c1", 3_600_000, 1), ("c2", 0, 1)]
    assert s.pending("s", "g", ZERO, MAX_ID, 10, min_idle_ms=1000) == rows[:2]
    following, claimed = s.autoclaim("s", "g", "c2", 60_000, ZERO, count=1)
    assert [e.offset for e in claimed] == [1]
    assert following == got[1].id
    summary = s.pending_summary("s", "g")
    assert summary[0] == 3 and summary[3] == [("c1", 1), ("c2", 2)]
    assert [r[3] for r in s.pending("s", "g", ZERO, MAX_ID, 10)] == [2, 1, 1]
    # JUSTID claims do not count a delivery.
    assert s.claim("s", "g", "c3", 0, [got[1].id], justid=True) == [got[1].id]
    assert s.pending("s", "g", ZERO, MAX_ID, 10, consumer="c3")[0][3] == 1
    assert s.ack("s", "g", [got[0].id, got[1].id, got[1].id]) == 2
    assert s.pending_summary("s", "g")[0] == 1


def test_consumer_history_cursor_and_lag(clocked_log, clock):
    s = Streams(clocked_log)
    ids = [add(s, "s", b"n", str(i).encode()) for i in range(4)]
    s.create_group("s", "g", None)  # `$`: only what comes next
    assert s.groups("s")[0]["lag"] == 0
    s.set_group_id("s", "g", ZERO)
    assert s.groups("s")[0]["lag"] == 4
    s.read_group("s", "g", "c", 3, noack=False)
    g = s.groups("s")[0]
    assert (g["pending"], g["entries-read"], g["lag"], g["last-delivered-id"]) == (3, 3, 1, ids[2])
    assert [e.id for e in s.read_history("s", "g", "c", ZERO, None)] == ids[:3]
    assert [e.id for e in s.read_history("s", "g", "c", ids[0], None)] == ids[1:3]
    # Moving the cursor back hands the pending entries out afresh.
    s.set_group_id("s", "g", ZERO)
    assert len(s.read_group("s", "g", "d", 1, noack=False)) == 1
    assert s.pending("s", "g", ZERO, MAX_ID, 1)[0][1:] == ("d", 0, 1)
    assert [(c.name, c.pending) for c in s.consumers("s", "g")] == [("c", 2), ("d", 1)]
    assert s.delete_consumer("s", "g", "c") == 2
    assert s.read_group("s", "g", "e", 10, noack=True)[-1].id == ids[3]
    assert s.pending_summary("s", "g")[0] == 1
    assert s.destroy_group("s", "g") is True
    with pytest.raises(tidelog.UnknownGroup):
        s.read_group("s", "g", "c", 1, noack=False)
    assert s.destroy_group("s", "g") is False


def test_store_claim_force_and_delivery_count(clocked_log, clock):
    s = Streams(clocked_log)
    add(s, "s", b"n", b"1")
    s.create_group("s", "g", ZERO)
    st = clocked_log.store
    now = clock.now
    kw = dict(delivered_before=now, delivered=now, deadline=NEVER)
    assert st.queue_claim("g", "s", 0, [1], "c", now, **kw) == []  # not leased yet
    assert st.queue_claim("g", "s", 0, [1, 2], "c", now, force=True, **kw) == [1]  # 2 does not exist
    assert st.queue_claim("g", "s", 0, [1], "d", now, deliveries=7, **kw) == [1]
    (p,) = st.queue_pending("g", "s", 0)
    assert (p.offset, p.consumer, p.delivery_count) == (1, "d", 7)
    assert st.queue_ack_offsets("g", "s", 0, [1]) == 1
    assert st.queue_ack_offsets("g", "s", 0, [1]) == 0


def test_trim_keeps_offsets_and_drops_leases_on_removed_records(clocked_log):
    s = Streams(clocked_log)
    ids = [add(s, "s", b"n", str(i).encode()) for i in range(5)]
    s.create_group("s", "g", ZERO)
    s.read_group("s", "g", "c", 5, noack=False)
    assert s.trim("s", maxlen=2) == 3
    assert [e.id for e in s.range("s", ZERO, MAX_ID)] == ids[3:]
    assert [e.offset for e in s.range("s", ZERO, MAX_ID, reverse=True)] == [5, 4]
    assert s.pending_summary("s", "g")[0] == 2
    assert s.trim("s", minid=ids[4]) == 1
    s.trim("s", maxlen=0)
    assert s.length("s") == 0
    assert add(s, "s", b"n", b"again").seq == 6  # offsets never repeat
    assert clocked_log.store.read_before("s", 0, 100, 10)[0][0] == 6


def test_a_redis_group_is_a_queue_group(clocked_log, clock):
    s = Streams(clocked_log)
    add(s, "s", b"n", b"1")
    add(s, "s", b"n", b"2")
    s.create_group("s", "g", ZERO)
    s.read_group("s", "g", "c", 1, noack=False)
    q = clocked_log.queue("s", group="g")
    assert q.stats().in_flight == 1
    (d,) = q.receive()
    assert d.offset == 2  # the entry pending with c is not handed out again


def test_poll_says_when_a_delayed_record_falls_due(clocked_log, clock):
    q = clocked_log.queue("jobs")
    q.send(b"later", delay=5)
    assert q.poll() == ([], clock.now + 5000)
    clock.advance(5)
    got, _ = q.poll()
    assert [d.value for d in got] == [b"later"]
