"""What the Redis front passes into the core is bounded (issue 27, finding 5).

XADD fields become record headers: a `tidelog-deliver-at` or
`tidelog-priority` field out of range is refused and writes nothing. A
queue header already in the log (written before that check) never stops a
SUBSCRIBE; a DACK past its bound is an error the subscriber can answer
again, the message still its own. Over redis-py and a raw socket, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import tidelog
from conformance.conftest import STORE_KINDS
from dumps import dump
from resp_client import ServerThread
from tidelog.bounds import DELIVER_AT, PRIORITY
from tidelog.records import encode_meta
from tidelog.store.base import AppendBatch


@pytest.fixture(params=["sqlite", "postgres"])
def srv(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, ServerThread]]:
    gen = STORE_KINDS[request.param](tmp_path)
    url = next(gen)
    server = ServerThread(url, subscribe_frames="redis")  # its subscription tests read Redis's pub/sub frames
    yield url, server
    server.close()
    gen.close()


@pytest.mark.parametrize(
    "field, value",
    [(DELIVER_AT, str(2**63)), (DELIVER_AT, "1e300"), (DELIVER_AT, "-1"), (PRIORITY, "10"), (PRIORITY, "x")],
)
def test_xadd_refuses_a_queue_header_out_of_range(srv, field, value):
    url, server = srv
    r = server.client()
    r.xadd("jobs", {"value": "first"})
    before = dump(url)
    with pytest.raises(redis.ResponseError, match=field):
        r.xadd("jobs", {"value": "x", field: value})
    assert dump(url) == before
    r.close()


def _headers(name: str, value: bytes) -> bytes:
    return struct.pack(">H", len(name)) + name.encode() + struct.pack(">I", len(value)) + value


def test_subscribe_serves_past_a_bad_header_and_a_bad_dack(srv):
    url, server = srv
    with tidelog.open(url) as log:  # as an older version wrote them, unchecked
        log.create_topic("work")
        metas = [encode_meta(None, None, _headers(DELIVER_AT, str(2**63).encode()), None), None]
        log.store.append_many([AppendBatch("work", 0, log.clock(), [b"poison", b"one"], metas)])
    sub = server.raw()
    sub.send("SUBSCRIBE", "work")
    assert sub.reply() == [b"subscribe", b"work", 1]
    assert sub.reply() == [b"message", b"work", b"one"]  # "poison" waits out its (bounded) delay
    for seconds in ("1e300", "inf", "nan", "-1", str(2**63)):
        sub.send("DACK", seconds)
        assert sub.reply().startswith("-ERR")
    sub.send("ACK")  # still the subscriber's message to answer
    assert sub.reply() == "+OK"
    sub.send("UNSUBSCRIBE")
    assert sub.reply() == [b"unsubscribe", b"work", 0]
    stats = server.log.queue("work").stats()
    assert (stats.available, stats.in_flight, stats.delayed) == (0, 0, 1)
