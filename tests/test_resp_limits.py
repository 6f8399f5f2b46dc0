"""The Redis front's bounds (issue 27): what a client may announce before and
after AUTH, how many may connect, how long one may stay idle or
unauthenticated, how long a silent subscriber holds a message, and the
integers every command takes. Raw sockets against real servers (a process
of its own where its memory is watched), on each store that has streams.
Nothing here asserts a duration: each wait is for an event (a reply, a
close), bounded only so that a broken server fails the test instead of
hanging it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tidelog
from conformance.conftest import STORE_KINDS, _store_class, store_has
from dumps import dump
from resp_client import RawClient, RespProcess, ServerThread
from tidelog.server.limits import Limits
from tidelog.server.resp import resp_state

TOKEN = "s3cret"
I64_MAX = (1 << 63) - 1


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if not store_has(_store_class(request.param), "streams"):
        pytest.skip(f"the {request.param} store has no Redis-shaped groups")
    gen = STORE_KINDS[request.param](tmp_path)
    yield next(gen)
    gen.close()


def wait_until(check: Any, what: str, timeout: float = 20.0) -> None:
    """Poll `check` until true; fail naming `what` if it never is (a bound, not a measure)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


def stream_into(client: RawClient, chunk: bytes, total: int) -> int:
    """Send `chunk` until `total` bytes went or the server cut the connection; the bytes sent."""
    sent = 0
    try:
        while sent < total:
            client.sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


# what a client announces ---------------------------------------------------------------


@pytest.mark.parametrize("who", ["unauthenticated", "authenticated"])
def test_an_announced_array_is_refused_before_its_elements_are_read(url, who):
    # Issue 27, findings 1 and 2: `*2000000000` made hiredis reserve room for
    # the array (RSS 62 MB -> 1,115 MB as 150 MiB of elements arrived, the
    # connection never closed) and free it slot by slot when the client left
    # (the event loop blocked ~4.5 s).
    server = RespProcess(url, TOKEN)
    try:
        authenticate = who == "authenticated"
        expected = (
            "-ERR Protocol error: invalid multibulk length"
            if authenticate
            else "-ERR Protocol error: unauthenticated multibulk length"
        )
        base = server.rss_mb()
        bad = server.raw(authenticate)
        bad.sock.sendall(b"*2000000000\r\n")
        assert bad.reply() == expected  # at once: the header alone is refused
        assert bad.closed_by_server()
        bad.close()

        # The same header, then 32 MiB of elements: cut off long before the end.
        bad = server.raw(authenticate)
        total = 32 << 20
        sent = stream_into(bad, b"*2000000000\r\n" + b"$2\r\nab\r\n" * 8190, total)
        bad.close()
        assert sent < total
        assert server.ping()  # another client is answered

        # The header, then a hang-up: nothing was reserved, so nothing is freed slot by slot.
        bad = server.raw(authenticate)
        bad.sock.sendall(b"*2000000000\r\n")
        bad.close()
        assert server.ping()
        assert server.rss_mb() < base + 48
    finally:
        server.close()


def test_lengths_are_checked_at_their_header(url):
    srv = ServerThread(url, TOKEN, limits=Limits(max_request=1 << 20))
    try:
        before = dump(url)

        def refused(frame: bytes, line: str, authenticate: bool = True) -> None:
            client = srv.raw()
            if authenticate:
                client.send("AUTH", TOKEN)
                assert client.reply() == "+OK"
            client.sock.sendall(frame)
            assert client.reply() == line
            assert client.closed_by_server()
            client.close()

        xadd = b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n"
        # Before AUTH: Redis 7's bounds for unauthenticated clients.
        refused(b"*11\r\n", "-ERR Protocol error: unauthenticated multibulk length", False)
        refused(xadd + b"$16385\r\n", "-ERR Protocol error: unauthenticated bulk length", False)
        # After it: max_args and max_request, whatever type announces the length.
        refused(xadd + b"$2000000000\r\n", "-ERR Protocol error: invalid bulk length")
        refused(xadd + b"$1048577\r\n", "-ERR Protocol error: invalid bulk length")
        refused(b"*2000000\r\n", "-ERR Protocol error: invalid multibulk length")
        refused(b"*2\r\n$4\r\nECHO\r\n*2000000000\r\n", "-ERR Protocol error: expected '$', got '*'")
        refused(b"*2\r\n$4\r\nECHO\r\n>5000\r\n", "-ERR Protocol error: expected '$', got '>'")
        # A small nested array: hiredis reads it (999 slots at most), then it is refused.
        refused(b"*2\r\n$4\r\nECHO\r\n*1\r\n$1\r\na\r\n", "-ERR Protocol error: expected '$', got '*'")
        # hiredis skips the two bytes after a value unread: a header hidden there is found too.
        refused(b"*3\r\n$4\r\nECHO\r\n$1\r\naXY*2000000000\r\n", "-ERR Protocol error: expected '$', got '*'")
        # Many arguments, each under the bound, over it together.
        big = b"$600000\r\n" + b"x" * 600000 + b"\r\n"
        refused(
            b"*4\r\n$4\r\nXADD\r\n$1\r\ns\r\n" + big + big,
            f"-ERR Protocol error: request larger than {1 << 20} bytes",
        )
        assert dump(url) == before

        # AUTH and a wider command in one write: the bounds widen from the command after AUTH.
        client = srv.raw()
        wide = [b"XADD", b"s", b"*"] + [b"f%d" % i for i in range(20)]
        client.sock.sendall(
            b"*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n"
            + b"*%d\r\n" % len(wide)
            + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in wide)
        )
        assert client.reply() == "+OK"
        assert client.reply().endswith(b"-1")
        client.close()
    finally:
        srv.close()


def test_a_closed_connection_gives_its_memory_back(url):
    server = RespProcess(url)
    try:
        base = server.rss_mb()
        client = server.raw()
        # A command announcing 60 MB (under max_request), 48 MB of it sent, then a hang-up.
        client.sock.sendall(b"*3\r\n$4\r\nECHO\r\n$1\r\na\r\n$60000000\r\n")
        stream_into(client, b"y" * (1 << 20), 48 << 20)
        wait_until(lambda: server.rss_mb() > base + 24, "the server buffered the command")
        client.close()
        wait_until(lambda: server.rss_mb() < base + 16, "the server let the buffer go")
        assert server.ping()
    finally:
        server.close()


# connections ----------------------------------------------------------------------------


def test_connections_past_max_connections_are_refused(url):
    srv = ServerThread(url, limits=Limits(max_connections=3))
    try:
        clients = [srv.raw() for _ in range(3)]
        for client in clients:
            client.send("PING")
            assert client.reply() == "+PONG"
        extra = srv.raw()
        assert extra.reply() == "-ERR max number of clients reached"  # Redis's words, at once
        assert extra.closed_by_server()
        clients.pop().close()
        state = resp_state(srv.server)
        wait_until(lambda: len(state.connections) < 3, "the server saw the hang-up")
        again = srv.raw()
        again.send("PING")
        assert again.reply() == "+PONG"
        again.send("INFO")
        info = again.reply()
        assert b"maxclients:3" in info and b"rejected_connections:1" in info  # as Redis's INFO says it
    finally:
        srv.close()


def test_idle_connections_are_closed_and_blocked_ones_are_not(url):
    srv = ServerThread(url, limits=Limits(idle_timeout=0.3))
    try:
        idle = srv.raw()
        idle.send("PING")
        assert idle.reply() == "+PONG"
        blocked = srv.raw()
        blocked.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
        subscriber = srv.raw()
        subscriber.send("SUBSCRIBE", "work")
        assert idle.closed_by_server()  # silent with nothing in flight: closed without a word
        # Both waiting clients outlived it: each still gets what it waits for.
        writer = srv.raw()
        writer.send("XADD", "s", "*", "f", "v")
        sid = writer.reply()
        assert blocked.reply() == [[b"s", [[sid, [b"f", b"v"]]]]]
        writer.send("PUBLISH", "work", "job")
        assert writer.reply() == "+OK"
        assert pushed(subscriber) == b"job"
        subscriber.send("ACK")
        assert subscriber.reply() == "+OK"
    finally:
        srv.close()


def test_a_connection_that_does_not_authenticate_in_time_is_closed(url):
    srv = ServerThread(url, TOKEN, limits=Limits(handshake_timeout=0.3))
    try:
        silent = srv.raw()
        chatty = srv.raw()
        chatty.send("PING")
        assert chatty.reply() == "-NOAUTH Authentication required."
        authed = srv.raw()
        authed.send("AUTH", TOKEN)
        assert authed.reply() == "+OK"
        for client in (silent, chatty):
            assert client.reply() == "-NOAUTH Authentication required within 0.3 seconds of connecting"
            assert client.closed_by_server()
        authed.send("PING")
        assert authed.reply() == "+PONG"  # authenticated in time: kept past the deadline
    finally:
        srv.close()


# a subscriber's hold on a message -----------------------------------------------------


def pushed(client: RawClient) -> bytes:
    """The value of the next message pushed to a subscriber, in either framing
    (miniqueue's bare value, or Redis's pub/sub frames; test_resp tells them apart)."""
    got = client.reply()
    if isinstance(got, list) and got[0] == b"subscribe":
        got = client.reply()
    if isinstance(got, list):
        assert got[0] == b"message", got
        return got[2]
    assert isinstance(got, bytes), got
    return got


def test_a_silent_subscriber_loses_its_message_after_max_hold(url):
    # Issue 27, finding 8: a subscriber that took a message and then said
    # nothing (TCP open) held it for ever.
    srv = ServerThread(url, limits=Limits(max_hold=0.5))
    try:
        publisher = srv.raw()
        publisher.send("PUBLISH", "work", "m1")
        assert publisher.reply() == "+OK"
        frozen = srv.raw()
        frozen.send("SUBSCRIBE", "work")
        assert pushed(frozen) == b"m1"
        other = srv.raw()
        other.send("SUBSCRIBE", "work")
        assert pushed(other) == b"m1"  # released by the frozen one's server side
        assert frozen.reply() == (
            "-ERR no answer to the message in 0.5 seconds: it went back to the queue; closing"
        )
        assert frozen.closed_by_server()
        other.send("ACK")
        assert other.reply() == "+OK"
        assert srv.log.queue("work").stats().available == 0
    finally:
        srv.close()


def test_a_subscriber_that_stops_reading_loses_its_message(url):
    srv = ServerThread(url, limits=Limits(max_hold=0.5))
    try:
        value = b"v" * (1 << 20)  # the largest record: more than the socket buffers take
        publisher = srv.raw()
        publisher.send("PUBLISH", "work", value)
        assert publisher.reply() == "+OK"
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", srv.port))
        stuck.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nwork\r\n")  # and never reads again
        queue = srv.log.queue("work")
        wait_until(lambda: queue.stats().in_flight == 1, "the stuck subscriber took the message")
        other = srv.raw()
        other.send("SUBSCRIBE", "work")
        assert pushed(other) == value
        other.send("ACK")
        assert other.reply() == "+OK"
        state = resp_state(srv.server)
        wait_until(lambda: len(state.connections) == 2, "the stuck subscriber was let go")
        stuck.close()
    finally:
        srv.close()


def test_a_subscriber_that_speaks_keeps_its_message(url):
    srv = ServerThread(url, limits=Limits(max_hold=1.0))
    try:
        publisher = srv.raw()
        for value in ("m1", "m2"):
            publisher.send("PUBLISH", "work", value)
            assert publisher.reply() == "+OK"
        busy = srv.raw()
        busy.send("SUBSCRIBE", "work")
        assert pushed(busy) == b"m1"
        until = time.monotonic() + 2.5  # past twice max_hold, speaking every tenth of a second
        while time.monotonic() < until:
            busy.send("PING")  # any word keeps it; EXTEND says so
            assert busy.reply() == "+PONG"
            busy.send("EXTEND")
            assert busy.reply() == "+OK"
            time.sleep(0.1)
        busy.send("ACK")
        assert busy.reply() == "+OK"  # still its message: the ACK settled it
        assert pushed(busy) == b"m2"
        busy.send("ACK")
        assert busy.reply() == "+OK"
        busy.send("EXTEND")  # nothing held now
        assert busy.reply().startswith("-ERR no message is out")
    finally:
        srv.close()


# integers -------------------------------------------------------------------------------

# Each command's integer arguments, {} the value tried.
INTEGER_ARGUMENTS = [
    "SELECT {}",
    "XADD s MAXLEN {} * f v",
    "XADD s MAXLEN ~ 100 LIMIT {} * f v",
    "XTRIM s MAXLEN {}",
    "XTRIM s MAXLEN ~ 1000 LIMIT {}",
    "XRANGE s - + COUNT {}",
    "XREVRANGE s + - COUNT {}",
    "XREAD COUNT {} STREAMS s 0",
    "XREAD BLOCK {} STREAMS s 0",
    "XREADGROUP GROUP g c1 COUNT {} STREAMS s 0",
    "XREADGROUP GROUP g c1 BLOCK {} STREAMS s 0",
    "XPENDING s g - + {}",
    "XPENDING s g IDLE {} - + 10",
    "XCLAIM s g c2 {} ID",
    "XCLAIM s g c2 0 ID IDLE {}",
    "XCLAIM s g c2 0 ID TIME {}",
    "XCLAIM s g c2 0 ID RETRYCOUNT {}",
    "XAUTOCLAIM s g c2 {} 0",
    "XAUTOCLAIM s g c2 0 0 COUNT {}",
    "XGROUP CREATE s g2 0 ENTRIESREAD {}",
    "XGROUP SETID s g 0 ENTRIESREAD {}",
    "HELLO {}",
    "XADD s {}-1 f v",
    "XRANGE s {} +",
]
EXTREMES = [I64_MAX, 1 << 63, -(1 << 63), -(1 << 63) - 1, 1 << 64, 10**30, -1, 0, 7]
NOT_INTEGERS = ["+5", " 5", "5 ", "5_0", "007", "0x10", "1e3", "", "-"]


def test_every_integer_argument_is_bounded_before_the_store(url, tried):
    # Issue 27, finding 10: XAUTOCLAIM ... COUNT 2^63-1 answered "internal
    # error" on SQLite and "PostgreSQL failed: bigint out of range"; RETRYCOUNT
    # 2^31 overflowed PostgreSQL's delivery count.
    srv = ServerThread(url)
    try:
        client = srv.raw()
        client.send("XADD", "s", "*", "f", "v")
        pending_id = client.reply().decode()
        client.send("XGROUP", "CREATE", "s", "g", "0")
        assert client.reply() == "+OK"
        client.send("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")
        client.reply()

        def run(template: str, values: list[Any]) -> list[Any]:
            """Send the template with each value; the values refused."""
            refused = []
            for value in values:
                words = template.replace("ID", pending_id).split(" ")
                client.send(*[w.replace("{}", str(value)) for w in words])
                reply = client.reply()
                text = reply if isinstance(reply, str) else ""
                assert "internal error" not in text and "failed" not in text, (template, value, text)
                if text.startswith("-"):
                    refused.append(value)
            return refused

        cases = refused = 0
        for template in INTEGER_ARGUMENTS:
            values = [v for v in [*EXTREMES, *NOT_INTEGERS] if not ("BLOCK" in template and v in (0, 7))]
            before = dump(url)
            turned_down = run(template, values)
            cases += len(values)
            refused += len(turned_down)
            if len(turned_down) < len(values):
                # Some values were valid and may have written: the refused ones again, alone.
                before = dump(url)
                assert run(template, turned_down) == turned_down
            assert dump(url) == before, template  # a refused request wrote nothing
        client.send("PING")
        assert client.reply() == "+PONG"
        tried(cases=cases, refused=refused)
    finally:
        srv.close()


def test_the_integers_of_a_subscription_are_bounded(url):
    srv = ServerThread(url)
    try:
        client = srv.raw()
        client.send("PUBLISH", "work", "m1")
        assert client.reply() == "+OK"
        client.send("SUBSCRIBE", "work")
        assert pushed(client) == b"m1"
        for seconds in ("inf", "nan", "-1", "1e308", "43201", "x"):
            client.send("DACK", seconds)
            assert client.reply().startswith("-ERR"), seconds  # refused, the message still held
        client.send("ACK")
        assert client.reply() == "+OK"
        with tidelog.open(url) as log:
            assert log.queue("work").stats().available == 0
    finally:
        srv.close()
