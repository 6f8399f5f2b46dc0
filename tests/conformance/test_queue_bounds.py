"""Every number a queue takes is bounded at the edge, and nothing already in
the log can poison a queue (issue 27, finding 5).

A number out of range is an InvalidRequest naming the field and its range,
and nothing is written; a queue header that a plain produce wrote before
the produce checked it (or an older version wrote) is read as a bounded
value: every receive of the queue keeps working.
"""

from __future__ import annotations

import struct

import pytest

import tidelog
from tidelog.bounds import DELIVER_AT, MAX_DELAY_S, MAX_DELIVERIES, MAX_VISIBILITY_S, PRIORITY
from tidelog.records import encode_meta
from tidelog.store.base import AppendBatch

from .conftest import snapshot

pytestmark = pytest.mark.store_feature("queues")

YEAR_MS = MAX_DELAY_S * 1000

# (call on a queue with one leased delivery `d`, the field the error names)
REFUSED = [
    (lambda log, q, d: q.send(b"x", delay=1e300), "delay"),
    (lambda log, q, d: q.send(b"x", delay=1e16), "delay"),
    (lambda log, q, d: q.send(b"x", delay=float("inf")), "delay"),
    (lambda log, q, d: q.send(b"x", delay=float("nan")), "delay"),
    (lambda log, q, d: q.send(b"x", delay=2**63), "delay"),
    (lambda log, q, d: q.send(b"x", delay=-1), "delay"),
    (lambda log, q, d: q.send(b"x", delay=MAX_DELAY_S + 1), "delay"),
    (lambda log, q, d: q.send_batch([b"x", b"y"], delay=1e300), "delay"),
    (lambda log, q, d: q.send(b"x", priority=10), "priority"),
    (lambda log, q, d: q.send(b"x", priority=2**63), "priority"),
    (lambda log, q, d: q.receive(visibility_timeout=0), "visibility_timeout"),
    (lambda log, q, d: q.receive(visibility_timeout=MAX_VISIBILITY_S + 1), "visibility_timeout"),
    (lambda log, q, d: q.receive(visibility_timeout=float("inf")), "visibility_timeout"),
    (lambda log, q, d: q.receive(wait=1e300), "wait"),
    (lambda log, q, d: q.extend(d, 1e300), "extend"),
    (lambda log, q, d: q.extend(d, MAX_VISIBILITY_S + 1), "extend"),
    (lambda log, q, d: q.nack(d, delay=float("inf")), "delay"),
    (lambda log, q, d: q.nack(d, delay=2**63), "delay"),
    (lambda log, q, d: q.nack_many([d], delay=1e16), "delay"),
    (lambda log, q, d: q.settle_many([("delay", d, 1e300)]), "delay"),
    (lambda log, q, d: q.settle_many([("extend", d, -1)]), "extend"),
    (lambda log, q, d: log.queue("other", max_deliveries=MAX_DELIVERIES + 1).stats(), "max_deliveries"),
    (lambda log, q, d: log.queue("other", visibility_timeout=1e300).stats(), "visibility_timeout"),
    (lambda log, q, d: log.producer().send("jobs", b"x", headers={DELIVER_AT: str(2**63)}), DELIVER_AT),
    (lambda log, q, d: log.producer().send("jobs", b"x", headers={DELIVER_AT: "soon"}), DELIVER_AT),
    (lambda log, q, d: log.producer().send("other", b"x", headers=[(PRIORITY, b"99")]), PRIORITY),
    (lambda log, q, d: log.read("jobs", 0, after=2**63), "after"),
    (lambda log, q, d: log.consumer("g").commit("jobs", 0, 2**63), "offset"),
]


@pytest.mark.parametrize("call, field", REFUSED, ids=[f"{i}-{f}" for i, (_, f) in enumerate(REFUSED)])
def test_numbers_out_of_range_are_refused_and_change_nothing(clocked_log, call, field):
    q = clocked_log.queue("jobs", visibility_timeout=30)
    q.send(b"a")
    (d,) = q.receive()
    clocked_log.consumer("g")  # registered (making a consumer does), so its commit below writes nothing
    before = snapshot(clocked_log), q.stats()
    with pytest.raises(tidelog.InvalidRequest, match=field):
        call(clocked_log, q, d)
    assert (snapshot(clocked_log), q.stats()) == before
    q.ack(d)  # the lease was not touched


def _headers(*pairs: tuple[str, bytes]) -> bytes:
    """A headers blob as the log stores it, written without the produce's checks."""
    out = b""
    for name, value in pairs:
        out += struct.pack(">H", len(name)) + name.encode() + struct.pack(">I", len(value)) + value
    return out


def test_a_bad_queue_header_already_in_the_log_never_poisons_a_queue(store, clocked_log, clock, tmp_path):
    clocked_log.create_topic("jobs")
    # As an older version would have written them, without the produce's
    # checks: on the store itself (for http://, the server's file behind it).
    raw = tidelog.open(str(tmp_path / "served.db") if store.name == "http" else store.url)
    try:
        metas = [
            encode_meta(None, None, _headers((DELIVER_AT, str(2**63).encode())), None),  # past any bigint
            encode_meta(None, None, _headers((DELIVER_AT, b"9" * 5000)), None),
            encode_meta(None, None, _headers((DELIVER_AT, b"1e300")), None),  # not a time: no delay
            encode_meta(None, None, _headers((PRIORITY, b"99")), None),  # read as 9
            encode_meta(None, None, _headers((DELIVER_AT, b"-5")), None),
        ]
        values = [b"huge", b"longer", b"text", b"urgent", b"negative"]
        raw.store.append_many([AppendBatch("jobs", 0, clock.now, values, metas)])
    finally:
        raw.close()
    q = clocked_log.queue("jobs")
    got = q.receive(max_messages=10)
    assert [d.value for d in got] == [b"urgent", b"text", b"negative"]
    stats = q.stats()
    assert (stats.in_flight, stats.delayed) == (3, 2)
    assert q.ack_many(got) == [None, None, None]
    clock.advance(MAX_DELAY_S - 1)
    assert q.receive(max_messages=10) == []  # held a year past the append, not forever
    clock.advance(2)
    assert sorted(d.value for d in q.receive(max_messages=10)) == [b"huge", b"longer"]
