"""The Redis protocol front, spoken to by real clients: redis-py (sync and
asyncio), redis-cli, and raw sockets. The server is real too, on a free
loopback port, over each store kind of the conformance suite."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

import tidelog
from conformance.conftest import STORE_KINDS, _store_class, store_has
from resp_client import RawClient, ServerThread


@pytest.fixture(params=sorted(STORE_KINDS))
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if not store_has(_store_class(request.param), "streams"):
        pytest.skip(f"the {request.param} store does not have Redis-shaped groups yet")
    gen = STORE_KINDS[request.param](tmp_path)
    yield next(gen)
    gen.close()


@pytest.fixture
def srv(url: str) -> Iterator[ServerThread]:
    server = ServerThread(url)
    yield server
    server.close()


@pytest.fixture
def r(srv: ServerThread) -> Iterator[redis.Redis]:
    client = srv.client()
    yield client
    client.close()


# connection ------------------------------------------------------------------


def test_connection_commands(srv, r):
    assert r.ping() is True
    assert r.echo(b"hi") == b"hi"
    assert r.client_setname("worker-1") is True
    assert r.client_getname() == "worker-1"
    assert isinstance(r.client_id(), int)
    assert r.execute_command("SELECT", 0) is True
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        r.execute_command("SELECT", 1)
    r.xadd("s", {"f": "v"})
    info = r.info()
    assert info["redis_mode"] == "standalone" and info["db0"]["keys"] == 1
    with pytest.raises(
        redis.ResponseError, match="unknown command 'FLUSHALL', with args beginning with: 'ASYNC'"
    ):
        r.execute_command("FLUSHALL", "ASYNC")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'xlen' command"):
        r.execute_command("XLEN")
    assert r.command_count() > 20
    r3 = srv.client(protocol=3)
    assert r3.xadd("s", {"g": "w"})
    assert r3.execute_command("HELLO", 3)[b"proto"] == 3
    with pytest.raises(redis.ResponseError, match="NOPROTO"):
        r.execute_command("HELLO", 4)
    r3.close()


def test_token_is_required_through_auth(url):
    server = ServerThread(url, token="s3cret")
    try:
        anon = server.client()
        with pytest.raises(redis.AuthenticationError):
            anon.xlen("s")
        # No retries: redis-py 8 sends a refused AUTH eleven times over, past the free
        # failures of the login throttle (server/throttle.py), which would then hold
        # the right password back too.
        with pytest.raises(redis.AuthenticationError):
            server.client(password="wrong", retry=Retry(NoBackoff(), 0)).ping()
        assert server.client(password="s3cret").xadd("s", {"f": "v"})
        assert server.client(password="s3cret", protocol=3).xlen("s") == 1
        raw = server.raw()
        raw.send("XADD", "s", "*", "f", "v")
        assert raw.reply().startswith("-NOAUTH")
        raw.send("AUTH", "s3cret")
        assert raw.reply() == "+OK"
        raw.send("XLEN", "s")
        assert raw.reply() == 1
        raw.close()
        assert server.log.describe("s").records == 1
    finally:
        server.close()


# streams ---------------------------------------------------------------------


def test_xadd_xrange_and_bad_ids(srv, r):
    a = r.xadd("s", {"f": "1"})
    b = r.xadd("s", {"f": "2"}, id="9999999999999-5")
    assert r.xadd("s", {"f": "3"}, id="9999999999999-*") == b"9999999999999-6"
    assert r.xlen("s") == 3
    assert [e[0] for e in r.xrange("s")] == [a, b, b"9999999999999-6"]
    assert r.xrange("s", min=b, count=1) == [(b, {b"f": b"2"})]
    assert r.xrange("s", min="(" + b.decode()) == [(b"9999999999999-6", {b"f": b"3"})]
    assert [e[0] for e in r.xrevrange("s", count=2)] == [b"9999999999999-6", b]
    with pytest.raises(redis.ResponseError, match="equal or smaller than the target stream top item"):
        r.xadd("s", {"f": "x"}, id="9999999999999-6")
    with pytest.raises(redis.ResponseError, match="must be greater than 0-0"):
        r.xadd("t", {"f": "x"}, id="0-0")
    with pytest.raises(redis.ResponseError, match="Invalid stream ID specified as stream command argument"):
        r.xadd("s", {"f": "x"}, id="12-x")
    with pytest.raises(redis.ResponseError, match="Invalid stream ID"):
        r.xrange("s", min="abc")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'xadd'"):
        r.execute_command("XADD", "s", "*", "f")
    assert r.xlen("s") == 3 and r.xlen("t") == 0
    assert r.xadd("nothere", {"f": "v"}, nomkstream=True) is None
    assert r.exists("nothere") == 0


def test_long_pipelines_commit_in_order(r):
    # Thousands of frames arrive in chunks that split frames anywhere.
    pipe = r.pipeline(transaction=False)
    for i in range(3000):
        pipe.xadd("p", {"n": str(i), "pad": "x" * (i % 97)})
    pipe.xlen("p")
    replies = pipe.execute()
    ids = replies[:-1]
    assert replies[-1] == 3000
    assert [int(fields[b"n"]) for _, fields in r.xrange("p")] == list(range(3000))
    assert [entry_id for entry_id, _ in r.xrange("p")] == ids


def test_a_bad_command_in_a_pipeline_gets_its_own_error(r):
    """The XADDs of one pipeline commit together, the reads among them see
    the XADDs before them, and each refused command answers for itself, in
    order, while the others are kept (as Redis does)."""
    pipe = r.pipeline(transaction=False)
    pipe.xadd("p", {"n": "0"}, id="5-1")
    pipe.xadd("p", {"n": "x"}, id="5-1")  # not above the top item
    pipe.xadd("p", {"n": "1"})
    pipe.xlen("p")
    pipe.execute_command("XADD", "p", "*", "tidelog-stream-id", "1-1")  # a reserved field name
    pipe.execute_command("NOSUCH", "p")
    pipe.xadd("p", {"n": "2"})
    pipe.xrange("p", count=10)
    pipe.execute_command("XADD", "p", "*", "odd")  # wrong number of arguments
    pipe.xadd("p", {"n": "3"})
    replies = pipe.execute(raise_on_error=False)
    errors = {i: str(reply) for i, reply in enumerate(replies) if isinstance(reply, redis.ResponseError)}
    assert sorted(errors) == [1, 4, 5, 8]
    assert errors[1].startswith("The ID specified in XADD is equal or smaller")
    assert "reserved" in errors[4] and errors[5].startswith("unknown command 'NOSUCH'")
    assert errors[8] == "wrong number of arguments for 'xadd' command"
    assert replies[0] == b"5-1" and replies[3] == 2
    assert [fields[b"n"] for _, fields in replies[7]] == [b"0", b"1", b"2"]
    assert [fields[b"n"] for _, fields in r.xrange("p")] == [b"0", b"1", b"2", b"3"]
    assert [entry_id for entry_id, _ in r.xrange("p")] == [replies[i] for i in (0, 2, 6, 9)]


def test_maxlen_minid_trim_and_del(r):
    ids = [r.xadd("s", {"n": str(i)}) for i in range(6)]
    r.xadd("s", {"n": "6"}, maxlen=4, approximate=False)
    assert r.xlen("s") == 4
    assert r.xtrim("s", minid=ids[4]) == 1
    assert [e[0] for e in r.xrange("s")][0] == ids[4]
    assert r.xtrim("s", maxlen=1) == 2
    assert r.delete("s", "missing") == 1
    assert r.xlen("s") == 0 and r.exists("s") == 0


def test_wrong_type_and_oversized_value(srv, r):
    srv.log.create_topic("wide", partitions=3)
    for call in (lambda: r.xadd("wide", {"f": "v"}), lambda: r.xrange("wide"), lambda: r.xlen("wide")):
        with pytest.raises(
            redis.ResponseError,
            match="^WRONGTYPE Operation against a key holding the wrong kind of value: topic 'wide' has 3 partitions",
        ):
            call()
    r.xadd("s", {"f": "small"})
    with pytest.raises(redis.ResponseError, match="over max_message_bytes"):
        r.xadd("s", {"value": b"x" * ((1 << 20) + 1)})
    with pytest.raises(redis.ResponseError, match="invalid stream name"):
        r.xadd("orders:eu", {"f": "v"})
    assert r.xlen("s") == 1 and r.ping()
    assert srv.log.describe("wide").records == 0


def test_records_cross_fronts(srv, r):
    sid = r.xadd("s", {"value": "hello", "key": "k1", "trace": "abc"})
    (msg,) = srv.log.consumer("py").fetch("s", 0)
    assert (msg.value, msg.key, msg.headers) == (b"hello", b"k1", [("trace", b"abc")])
    sent = srv.log.producer().send("s", {"n": 2}, headers={"h": "1"})
    entries = r.xrange("s", min="(" + sid.decode())
    assert entries == [(f"{sent.timestamp}-{sent.offset}".encode(), {b"value": b'{"n":2}', b"h": b"1"})]


def test_xread_block_is_woken_by_an_xadd(srv, r):
    r.xadd("s", {"n": "0"})
    other = srv.client()

    def later() -> None:
        time.sleep(0.2)
        other.xadd("s", {"n": "1"})

    t = threading.Thread(target=later)
    t.start()
    got = r.xread({"s": "$"}, block=20_000)
    t.join()
    assert [fields for _, fields in got[0][1]] == [{b"n": b"1"}]
    assert r.xread({"s": "$"}, block=50) == []
    (entry,) = r.xread({"s": "0"}, count=1)[0][1]
    assert entry[1] == {b"n": b"0"}
    other.close()


def test_async_xreadgroup_block_woken_by_another_connections_xadd(srv):
    async def flow() -> tuple[Any, Any]:
        reader = aioredis.Redis(port=srv.port, protocol=3)
        writer = aioredis.Redis(port=srv.port)
        await reader.xgroup_create("jobs", "workers", id="$", mkstream=True)

        async def add_later() -> bytes:
            await asyncio.sleep(0.2)
            return await writer.xadd("jobs", {"task": "resize"})

        got, added = await asyncio.gather(
            reader.xreadgroup("workers", "w1", {"jobs": ">"}, count=10, block=20_000), add_later()
        )
        pending = await writer.xpending("jobs", "workers")
        await reader.aclose()
        await writer.aclose()
        return got, added, pending

    got, added, pending = asyncio.run(flow())
    assert got[b"jobs"] == [[(added, {b"task": b"resize"})]]
    assert pending["pending"] == 1 and pending["consumers"] == [{"name": b"w1", "pending": 1}]


def test_consumer_group_flow(srv, r):
    ids = [r.xadd("s", {"n": str(i)}) for i in range(5)]
    assert r.xgroup_create("s", "g", id="0") is True
    with pytest.raises(redis.ResponseError, match="^BUSYGROUP Consumer Group name already exists"):
        r.xgroup_create("s", "g", id="0")
    got = r.xreadgroup("g", "alice", {"s": ">"}, count=2)
    assert [e[0] for e in got[0][1]] == ids[:2]
    (g,) = r.xinfo_groups("s")
    assert (g["name"], g["pending"], g["entries-read"], g["lag"], g["last-delivered-id"]) == (
        b"g",
        2,
        2,
        3,
        ids[1],
    )
    assert r.xreadgroup("g", "alice", {"s": "0"})[0][1] == got[0][1]
    assert r.xack("s", "g", ids[0], ids[0]) == 1
    summary = r.xpending("s", "g")
    assert (summary["pending"], summary["min"], summary["max"]) == (1, ids[1], ids[1])
    r.xreadgroup("g", "bob", {"s": ">"}, count=1, noack=True)
    assert r.xpending("s", "g")["pending"] == 1
    assert r.xgroup_createconsumer("s", "g", "carol") == 1
    consumers = {c["name"]: c["pending"] for c in r.xinfo_consumers("s", "g")}
    assert consumers == {b"alice": 1, b"bob": 0, b"carol": 0}
    assert r.xgroup_delconsumer("s", "g", "alice") == 1
    assert r.xpending("s", "g")["pending"] == 0
    r.xgroup_setid("s", "g", id="0")
    assert r.xinfo_groups("s")[0]["lag"] == 5
    info = r.xinfo_stream("s")
    assert (info["length"], info["groups"], info["first-entry"][0], info["last-entry"][0]) == (
        5,
        1,
        ids[0],
        ids[4],
    )
    assert r.xgroup_destroy("s", "g") == 1
    assert r.xinfo_groups("s") == []


def test_xack_acks_exactly_the_ids_named(srv, r):
    """XACK confirms each id against its entry: a derived id with another
    time acks nothing, a stored id (explicit, or `<derived>` whose offset
    holds an entry with a stored id) acks its own entry only."""
    derived = [r.xadd("s", {"n": str(i)}) for i in range(3)]
    ms, seq = (int(x) for x in derived[2].split(b"-"))
    stored = r.xadd("s", {"n": "explicit"}, id=f"{ms + 10}-7")  # offset 4, id <ms+10>-7
    far = [r.xadd("s", {"n": str(i)}) for i in range(40)][-1]  # an id far from the others
    assert r.xgroup_create("s", "g", id="0") is True
    assert len(r.xreadgroup("g", "c", {"s": ">"})[0][1]) == 44
    wrong_time = f"{ms + 1}-{seq}"  # offset 3's position, another time: no entry
    assert r.xack("s", "g", wrong_time) == 0
    # The stored entry (offset 4) was appended within moments of ms: its <ts>-4 is among these, and not its id.
    assert r.xack("s", "g", *(f"{t}-4" for t in range(ms, ms + 500))) == 0
    assert r.xack("s", "g", stored, derived[0], far, derived[0], "99999999999999-1") == 3
    assert r.xpending("s", "g")["pending"] == 41
    assert r.xack("s", "g", derived[1], derived[2], stored) == 2
    pending = [p["message_id"] for p in r.xpending_range("s", "g", "-", "+", 100)]
    assert derived[2] not in pending and stored not in pending and len(pending) == 39


def test_pending_never_expire_and_autoclaim_after_a_consumer_dies(srv):
    r = srv.client()
    ids = [r.xadd("jobs", {"n": str(i)}) for i in range(3)]
    r.xgroup_create("jobs", "g", id="0")
    dying = srv.client()
    dying.xreadgroup("g", "dead", {"jobs": ">"}, count=2)
    dying.close()  # the consumer dies holding two entries
    time.sleep(0.05)
    # No lease ran out: nothing is handed out again by itself.
    assert [e[0] for e in r.xreadgroup("g", "alive", {"jobs": ">"})[0][1]] == [ids[2]]
    assert r.xreadgroup("g", "alive", {"jobs": ">"}, block=50) == []
    rows = r.xpending_range("jobs", "g", min="-", max="+", count=10, consumername="dead")
    assert [row["message_id"] for row in rows] == ids[:2]
    assert all(row["time_since_delivered"] >= 50 and row["times_delivered"] == 1 for row in rows)
    assert r.xpending_range("jobs", "g", "-", "+", 10, idle=3_600_000) == []
    following, claimed, deleted = r.xautoclaim(
        "jobs", "g", "alive", min_idle_time=40, start_id="0-0", count=1
    )
    assert [e[0] for e in claimed] == [ids[0]] and following == ids[1] and deleted == []
    _, claimed, _ = r.xautoclaim("jobs", "g", "alive", 40, start_id=following, count=1)
    assert [e[0] for e in claimed] == [ids[1]]
    rows = r.xpending_range("jobs", "g", "-", "+", 10)
    assert [(row["consumer"], row["times_delivered"]) for row in rows] == [(b"alive", 2)] * 2 + [
        (b"alive", 1)
    ]
    assert r.xclaim("jobs", "g", "third", 0, [ids[0]], justid=True) == [ids[0]]
    assert r.xclaim("jobs", "g", "third", 3_600_000, [ids[1]]) == []
    r.close()


def test_nogroup_replies(srv, r):
    r.xadd("s", {"f": "v"})
    with pytest.raises(redis.ResponseError) as e:
        r.xreadgroup("nope", "c", {"s": ">"})
    assert str(e.value) == "NOGROUP No such key 's' or consumer group 'nope' in XREADGROUP with GROUP option"
    raw = srv.raw()
    raw.send("XPENDING", "s", "nope")
    assert raw.reply() == "-NOGROUP No such key 's' or consumer group 'nope'"
    raw.send("XGROUP", "SETID", "s", "nope", "0")
    assert raw.reply() == "-NOGROUP No such consumer group 'nope' for key name 's'"
    raw.send("XGROUP", "CREATE", "missing", "g", "$")
    assert raw.reply().startswith("-ERR The XGROUP subcommand requires the key to exist")
    raw.send("XINFO", "STREAM", "missing")
    assert raw.reply() == "-ERR no such key"
    raw.send("XGROUP", "BOGUS", "s")
    assert raw.reply() == "-ERR unknown subcommand 'BOGUS'. Try XGROUP HELP."
    raw.send("XREAD", "COUNT", "x", "STREAMS", "s", "0")
    assert raw.reply() == "-ERR value is not an integer or out of range"
    raw.send("XREAD", "STREAMS", "s", "t", "0")
    assert raw.reply().startswith("-ERR Unbalanced 'xread' list of streams")
    raw.send("PING")
    assert raw.reply() == "+PONG"
    raw.close()
    assert r.xlen("s") == 1 and srv.log.groups() == []


def test_a_group_destroyed_or_its_stream_deleted_is_gone_at_once(srv, r, url):
    """XREADGROUP and XACK find a group gone however it went: XGROUP DESTROY,
    DEL of its stream, or a destroy by another process on the same file."""
    nogroup = "NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"

    def delivered() -> list[bytes]:
        return [e[0] for e in r.xreadgroup("g", "c", {"s": ">"}, count=1)[0][1]]

    ids = [r.xadd("s", {"n": str(i)}) for i in range(6)]
    r.xgroup_create("s", "g", id="0")
    assert delivered() == ids[:1] and r.xack("s", "g", ids[0]) == 1
    assert r.xgroup_destroy("s", "g") == 1
    with pytest.raises(redis.ResponseError, match=f"^{nogroup}$"):
        r.xreadgroup("g", "c", {"s": ">"})
    assert r.xack("s", "g", ids[1]) == 0
    r.xgroup_create("s", "g", id="0")  # made again: from the start
    assert delivered() == ids[:1] and r.xack("s", "g", ids[0]) == 1
    assert r.delete("s") == 1
    with pytest.raises(redis.ResponseError, match=f"^{nogroup}$"):
        r.xreadgroup("g", "c", {"s": ">"})
    again = [r.xadd("s", {"n": str(i)}) for i in range(3)]
    r.xgroup_create("s", "g", id="0")
    assert delivered() == again[:1]
    other = tidelog.open(url)  # another process's view of the store: none of our caches
    try:
        assert other.store.queue_delete("g", "s") is True
    finally:
        other.close()
    with pytest.raises(redis.ResponseError, match=f"^{nogroup}$"):
        r.xreadgroup("g", "c", {"s": ">"})
    assert r.xack("s", "g", again[0]) == 0


# bad frames --------------------------------------------------------------------


def test_malformed_frames_and_hangups_disturb_no_one(srv, r):
    r.xadd("s", {"f": "v"})
    bad = srv.raw()
    bad.sock.sendall(b"*2\r\n$4\r\nXLEN\r\n:12\r\n")
    assert bad.reply() == "-ERR Protocol error: expected '$', got ':'"  # Redis's words
    assert bad.closed_by_server()
    bad.close()
    bad = srv.raw()
    bad.sock.sendall(b"*1\r\n$x\r\n")
    assert bad.reply().startswith("-ERR Protocol error")
    assert bad.closed_by_server()
    bad.close()
    half = srv.raw()
    half.sock.sendall(b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf")
    half.close()  # gone mid-frame
    split = srv.raw()  # a frame cut at an element boundary, the rest after a pause
    split.sock.sendall(b"*5\r\n$4\r\nXADD\r\n")
    time.sleep(0.1)
    split.sock.sendall(b"$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n")
    assert split.reply().endswith(b"-2")
    split.close()
    inline = srv.raw()
    inline.sock.sendall(b"PING\r\nXLEN s\r\n")
    assert inline.reply() == "+PONG" and inline.reply() == 2
    inline.close()
    assert r.xlen("s") == 2 and r.ping()


# the single-binary queue commands ------------------------------------------------


class SubscribeFrames:
    """What a RESP2 subscriber reads: miniqueue's frames (the default) or Redis's pub/sub frames."""

    def __init__(self, sub: RawClient, redis_frames: bool):
        self.sub = sub
        self.redis = redis_frames

    def subscribed(self, topic: bytes) -> None:
        if self.redis:
            assert self.sub.reply() == [b"subscribe", topic, 1]

    def message(self, topic: bytes) -> bytes:
        got = self.sub.reply()
        if not self.redis:
            assert isinstance(got, bytes), got  # the value alone, as miniqueue sends it
            return got
        kind, channel, value = got
        assert (kind, channel) == (b"message", topic)
        return value

    def unsubscribed(self, topic: bytes) -> None:
        assert self.sub.reply() == ([b"unsubscribe", topic, 0] if self.redis else "+OK")


@pytest.mark.parametrize("frames", ["miniqueue", "redis"])
def test_publish_subscribe_ack_nack_back_dack(url, frames):
    # A raw RESP2 client, as miniqueue's users speak it, in miniqueue's frames
    # (the default) or Redis's (the server's switch).
    srv = ServerThread(url, subscribe_frames=frames)
    r = srv.client(protocol=2)
    try:
        _publish_subscribe_ack_nack_back_dack(srv, r, url, frames == "redis")
    finally:
        r.close()
        srv.close()


def _publish_subscribe_ack_nack_back_dack(srv, r, url, redis_frames):
    for v in (b"one", b"two", b"three"):
        assert r.execute_command("PUBLISH", "work", v) == b"OK"
    assert b"work" in r.execute_command("TOPICS")
    sub = srv.raw()
    read = SubscribeFrames(sub, redis_frames)

    def message() -> bytes:
        return read.message(b"work")

    sub.send("SUBSCRIBE", "work")
    read.subscribed(b"work")
    assert message() == b"one"
    sub.send("NACK")  # again, at the front
    assert sub.reply() == "+OK" and message() == b"one"
    sub.send("BACK")  # behind those waiting now
    assert sub.reply() == "+OK" and message() == b"two"
    sub.send("ACK")
    assert sub.reply() == "+OK" and message() == b"three"
    sub.send("DACK", "0.3")  # not before 0.3 s
    assert sub.reply() == "+OK" and message() == b"one"
    sub.send("DACK", "nan")  # refused: the message is still held
    assert sub.reply() == "-ERR DACK seconds must be between 0 and 43200"
    sub.send("ACK")
    assert sub.reply() == "+OK" and message() == b"three"
    sub.send("BOGUS")
    assert sub.reply().startswith("-ERR answer the message with ACK")
    sub.close()  # hangs up holding "three": released to the front
    # The server notices the hang-up on its own schedule: wait for the release.
    with tidelog.open(url) as log:
        deadline = time.monotonic() + 20
        while log.queue("work").stats().in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
    r.execute_command("PUBLISH", "work", b"four")
    sub = srv.raw()
    read = SubscribeFrames(sub, redis_frames)
    sub.send("SUBSCRIBE", "work")
    read.subscribed(b"work")
    assert message() == b"three"
    sub.send("ACK")
    assert sub.reply() == "+OK" and message() == b"four"
    sub.send("ACK")
    assert sub.reply() == "+OK"
    r.execute_command("PUBLISH", "work", b"five")  # wakes the waiting subscriber
    assert message() == b"five"
    sub.send("ACK")
    assert sub.reply() == "+OK"
    sub.send("UNSUBSCRIBE")
    read.unsubscribed(b"work")
    sub.send("PING")
    assert sub.reply() == "+PONG"
    sub.close()
    assert srv.log.queue("work").stats().available == 0


@pytest.mark.parametrize("switch", ["resp3", "server"])
def test_redis_py_pubsub_reads_the_messages_and_acks_them(url, switch):
    # Redis's pub/sub frames on either switch: a RESP3 connection (redis-py
    # 8's default), or a RESP2 one on a server that frames every SUBSCRIBE so.
    srv = ServerThread(url, subscribe_frames="redis" if switch == "server" else "miniqueue")
    r = srv.client(protocol=3 if switch == "resp3" else 2)
    try:
        _redis_py_pubsub(srv, r)
    finally:
        r.close()
        srv.close()


def _redis_py_pubsub(srv, r):
    for v in (b"e1", b"e2"):
        r.execute_command("PUBLISH", "events", v)
    p = r.pubsub()
    p.subscribe("events")
    first = p.get_message(timeout=10)
    assert (first["type"], first["channel"], first["data"]) == ("subscribe", b"events", 1)
    got = []
    for _ in range(2):
        m = p.get_message(timeout=10)
        assert (m["type"], m["channel"]) == ("message", b"events"), m
        got.append(m["data"])
        p.execute_command("ACK")  # tidelog's answer, on the pub/sub connection
        answered = p.get_message(timeout=10)  # +OK reaches redis-py as a pong-type reply
        assert answered is not None and answered["data"] == b"OK", answered
    assert got == [b"e1", b"e2"]
    p.unsubscribe("events")
    last = p.get_message(timeout=10)
    assert (last["type"], last["channel"]) == ("unsubscribe", b"events")
    p.close()
    assert srv.log.queue("events").stats().in_flight == 0


# redis-cli and the standalone entry point ------------------------------------------


def test_redis_cli_session_against_the_entry_point(tmp_path):
    if shutil.which("redis-cli") is None:
        from conftest import need_service

        need_service("redis-cli", "install Debian's redis-tools")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = str(tmp_path / "cli.db")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog.server.resp", "--db", db, "--port", str(port)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert b"listening" in proc.stdout.readline()
        script = "\n".join(
            [
                "PING",
                "XADD orders 1-1 item book",
                "XADD orders * item pen",
                "XLEN orders",
                "XRANGE orders - + COUNT 1",
                "XGROUP CREATE orders shipping 0",
                "XREADGROUP GROUP shipping w1 COUNT 1 STREAMS orders >",
                "XACK orders shipping 1-1",
                "XADD orders 1-1 item late",
                "NOSUCH thing",
                "",
            ]
        )
        out = subprocess.run(
            ["redis-cli", "-p", str(port)], input=script, capture_output=True, text=True, timeout=30
        ).stdout.splitlines()
        out = [line for line in out if line]  # redis-cli follows an error with a blank line
        assert out[0] == "PONG" and out[1] == "1-1"
        assert out[3] == "2"
        assert out[4:7] == ["1-1", "item", "book"]
        assert out[7] == "OK"
        assert out[8:12] == ["orders", "1-1", "item", "book"]
        assert out[12] == "1"
        assert out[13] == "ERR The ID specified in XADD is equal or smaller than the target stream top item"
        assert out[14].startswith("ERR unknown command 'NOSUCH'")
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
    log = tidelog.open(db)
    assert [m.headers for m in log.read("orders", 0)] == [
        [("tidelog-stream-id", b"1-1"), ("item", b"book")],
        [("item", b"pen")],
    ]
    log.close()
