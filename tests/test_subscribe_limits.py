"""Push subscribers under the server's limits: a consumer that holds a
message and says nothing (frozen, or not reading its socket) loses it after
`max_hold`, to another consumer; a command sent ahead on the HTTP/2 stream
waits for the message it answers. On the WebSocket and `POST /subscribe`
over HTTP/2, on each store."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.conftest import STORE_KINDS
from h2stream import H2Stream, StreamEnded
from sockets import server_end_owned
from tidelog.server.http.thread import ServerThread
from tidelog.server.limits import Limits

websockets = pytest.importorskip("websockets")

MAX_HOLD_S = 1.0
# Far below the lease the pump keeps extending (30 s): a record seen again
# within this was released by max_hold, not by its lease running out.
WITHIN_S = 15.0


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    gen = STORE_KINDS[request.param](tmp_path)
    got = next(gen)
    yield got[0] if isinstance(got, tuple) else got
    gen.close()


def publish(server: Any, *values: bytes, topic: str = "jobs") -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for value in values:
            assert http.post(f"/publish/{topic}", content=value).status_code == 201


def stats(server: Any, topic: str = "jobs") -> dict:
    return httpx.get(f"{server.url}/v1/queues/{topic}/stats", timeout=10).json()


def settles(server: Any, in_flight: int, available: int) -> bool:
    """Whether the queue group comes to hold so many (bounded wait)."""
    deadline = time.monotonic() + WITHIN_S
    while time.monotonic() < deadline:
        now = stats(server)
        if (now["in_flight"], now["available"]) == (in_flight, available):
            return True
        time.sleep(0.05)
    return False


def until(condition: Any) -> bool:
    deadline = time.monotonic() + WITHIN_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def released(server: Any) -> bool:
    """The one record went out, then came back (max_hold), within WITHIN_S."""
    return settles(server, 1, 0) and settles(server, 0, 1)


def message(line: str | bytes) -> tuple[bytes, int]:
    got = json.loads(line)
    assert "msg" in got, got
    return base64.b64decode(got["msg"]), got["deliveryCount"]


def ws_url(server: Any, topic: str = "jobs") -> str:
    return server.url.replace("http://", "ws://") + f"/subscribe/{topic}"


async def next_consumer(server: Any, topic: str = "jobs") -> tuple[bytes, int]:
    """What a second, healthy consumer gets: INIT, then its first message."""
    async with websockets.connect(ws_url(server, topic), max_size=None) as ws:
        await ws.send("INIT")
        got = message(await asyncio.wait_for(ws.recv(), WITHIN_S))
        await ws.send("ACK")
        return got


def second_consumer(server: Any, topic: str = "jobs") -> tuple[bytes, int]:
    return asyncio.run(next_consumer(server, topic))


# --- a command sent ahead on the HTTP/2 stream (finding 9) --------------------------------


def test_a_command_sent_ahead_waits_for_the_message_it_answers(store_url, serve):
    server = serve(store_url)
    httpx.post(f"{server.url}/v1/topics", json={"name": "jobs"}).raise_for_status()
    stream = H2Stream(server, "/subscribe/jobs")
    try:
        stream.say("INIT")
        time.sleep(0.3)  # the subscriber waits for a record...
        stream.say("ACK")  # ...and the answer to it comes first
        time.sleep(0.3)
        publish(server, b"a")
        assert message(stream.line()) == (b"a", 1)  # the ACK waited for a, and answered it
        publish(server, b"b")
        assert message(stream.line()) == (b"b", 1)
        assert stream.status == 200
        stream.say("ACK")
        stream.say("NACK")  # ahead again, while nothing is out: it answers the next
        publish(server, b"c")
        assert message(stream.line()) == (b"c", 1)
        assert message(stream.line()) == (b"c", 2)  # NACKed: at the front again
    finally:
        stream.close()
    deadline = time.monotonic() + 10
    while stats(server)["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stats(server) | {"oldest_available_age_ms": 0} == {
        "topic": "jobs",
        "group": "jobs",
        "available": 1,  # c, given back by the disconnect
        "in_flight": 0,
        "delayed": 0,
        "dead_lettered": 0,
        "oldest_available_age_ms": 0,
    }


def test_httpx_commands_ahead_of_the_first_record(serve):
    server = serve()
    httpx.post(f"{server.url}/v1/topics", json={"name": "jobs"}).raise_for_status()
    threading.Timer(0.5, publish, (server, b"late", b"next")).start()
    body = b'"INIT"\n"ACK"\n'  # all of it before any record exists
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=WITHIN_S) as h2:
        answered = h2.post("/subscribe/jobs", content=body)
    # The ACK answered "late"; its own answer, "next", still came, then the
    # body's end ended the stream and gave "next" back.
    assert answered.status_code == 200
    assert [message(line) for line in answered.text.splitlines()] == [(b"late", 1), (b"next", 1)]
    deadline = time.monotonic() + 10
    while stats(server)["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (stats(server)["available"], stats(server)["in_flight"]) == (1, 0)


# --- max_hold (finding 8) -----------------------------------------------------------------


def test_a_frozen_websocket_subscriber_loses_its_message_to_another(store_url, serve):
    server = serve(store_url, limits=Limits(max_hold=MAX_HOLD_S))
    publish(server, b"held")

    async def frozen() -> tuple[tuple[bytes, int], tuple[bytes, int], dict]:
        # A client that takes a message and never answers; its library still
        # answers pings: it is alive, its consumer is not.
        async with websockets.connect(ws_url(server)) as ws:
            await ws.send("INIT")
            first = message(await asyncio.wait_for(ws.recv(), WITHIN_S))
            assert await asyncio.to_thread(released, server)
            again = await asyncio.to_thread(second_consumer, server)
            told = json.loads(await asyncio.wait_for(ws.recv(), WITHIN_S))
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WITHIN_S)
            return first, again, told

    first, again, told = asyncio.run(frozen())
    assert first == (b"held", 1)
    assert again == (b"held", 2)  # released by max_hold, delivered again
    assert "max_hold" in told["error"]


def test_a_websocket_subscriber_that_does_not_read_loses_its_message(serve):
    big = b"x" * (6 << 20)  # more than the socket buffers hold: the server's send blocks
    server = serve(limits=Limits(max_hold=MAX_HOLD_S), max_body=8 << 20)
    httpx.post(
        f"{server.url}/v1/topics", json={"name": "jobs", "config": {"max_message_bytes": 8 << 20}}
    ).raise_for_status()
    publish(server, big)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(10)
    raw.connect((server.host, server.port))
    try:
        key = base64.b64encode(b"0123456789abcdef").decode()
        raw.sendall(
            f"GET /subscribe/jobs HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        assert raw.recv(4096).startswith(b"HTTP/1.1 101")
        assert server_end_owned(server.port, raw.getsockname()[1])  # the check below can see it
        frame = b"INIT"  # a masked text frame, as a client must send
        mask = b"\x01\x02\x03\x04"
        raw.sendall(
            bytes([0x81, 0x80 | len(frame)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(frame))
        )
        # ...and never reads again.
        assert released(server)
        got, count = second_consumer(server)
        assert (len(got), count) == (len(big), 2)
        # The server lets go of the connection. Either its goodbye could not be queued
        # (the send ahead of it blocks) and the connection guard shut the socket down
        # (the metric), or it queued the goodbye and its close behind the unread message
        # (granian may take the whole message into its own buffer first; more often
        # under load) and closed the socket: the kernel holds what is unsent, owned by
        # no process.
        client_port = raw.getsockname()[1]
        aborted = 'tidelog_http_connections_closed_total{reason="aborted"}'
        assert until(
            lambda: (
                server_end_owned(server.port, client_port) is False
                or aborted in httpx.get(f"{server.url}/metrics").text
            )
        )
    finally:
        raw.close()


def test_a_frozen_http2_subscriber_loses_its_message_to_another(store_url, serve):
    server = serve(store_url, limits=Limits(max_hold=MAX_HOLD_S))
    publish(server, b"held")
    stream = H2Stream(server, "/subscribe/jobs", timeout=WITHIN_S)
    try:
        stream.say("INIT")
        assert message(stream.line()) == (b"held", 1)
        assert released(server)
        assert second_consumer(server) == (b"held", 2)
        assert "max_hold" in json.loads(stream.line())["error"]
        with pytest.raises(StreamEnded):
            stream.line()
    finally:
        stream.close()


def test_an_http2_subscriber_that_does_not_read_loses_its_message(serve):
    server = serve(limits=Limits(max_hold=MAX_HOLD_S))
    big = b"y" * (512 << 10)  # past the stream's flow-control window (64 KiB): the send blocks
    publish(server, big)
    stream = H2Stream(server, "/subscribe/jobs", timeout=WITHIN_S)
    try:
        stream.say("INIT")  # ...and never reads
        assert released(server)
        got, count = second_consumer(server)
        assert (len(got), count) == (len(big), 2)
    finally:
        stream.close()


def test_extend_keeps_a_message_past_max_hold(serve):
    server = serve(limits=Limits(max_hold=2.0))
    publish(server, b"kept")

    async def keep() -> list[Any]:
        async with websockets.connect(ws_url(server)) as ws:
            await ws.send("INIT")
            first = message(await asyncio.wait_for(ws.recv(), WITHIN_S))
            until = time.monotonic() + 3.0  # longer than max_hold, saying EXTEND often
            while time.monotonic() < until:
                await ws.send("EXTEND")
                await asyncio.sleep(0.2)
            held = await asyncio.to_thread(stats, server)
            await ws.send("ACK")
            await ws.send("EXTEND")  # nothing is out: refused, changes nothing
            refused = json.loads(await asyncio.wait_for(ws.recv(), WITHIN_S))
            return [first, held, refused]

    first, held, refused = asyncio.run(keep())
    assert first == (b"kept", 1)
    assert (held["in_flight"], held["available"]) == (1, 0)  # still this client's
    assert "no message is out" in refused["error"]
    assert (stats(server)["in_flight"], stats(server)["available"]) == (0, 0)  # the ACK finished it


def test_a_subscriber_waiting_already_gets_the_released_message(store_url, tmp_path):
    # In one server process: its pump serves the waiting one in the round
    # that applies the release. (Across `--workers`, another process's
    # subscriber waits for a wake-up or its poll: the store says nothing of
    # a release, see the report.)
    with ServerThread(store_url, limits=Limits(max_hold=MAX_HOLD_S)) as server:
        publish(server, b"held")

        async def two() -> tuple[tuple[bytes, int], tuple[bytes, int]]:
            async with websockets.connect(ws_url(server)) as frozen:
                await frozen.send("INIT")
                first = message(await asyncio.wait_for(frozen.recv(), WITHIN_S))
                async with websockets.connect(ws_url(server)) as waiting:
                    await waiting.send("INIT")  # nothing is available: it waits
                    return first, message(await asyncio.wait_for(waiting.recv(), WITHIN_S))

        assert asyncio.run(two()) == ((b"held", 1), (b"held", 2))


# --- a stream of junk (issue 40: 50 MiB of invalid command lines kept a worker at 100% CPU) ----


def read_until_closed(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    """What the server wrote until it closed (or `limit` bytes)."""
    got = b""
    sock.settimeout(WITHIN_S)
    while len(got) < limit:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        got += chunk
    return got


def test_a_duplex_stream_of_junk_is_closed_at_the_limit(serve):
    server = serve(limits=Limits(max_invalid_commands=16))
    sock = socket.create_connection(("127.0.0.1", httpx.URL(server.url).port))
    sock.sendall(b"POST /subscribe/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"junk\n" * 13_107  # 64 KiB of invalid commands
    sent = 0
    sock.settimeout(WITHIN_S)
    try:
        while sent < 32 << 20:
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            sent += len(chunk)
    except OSError:
        pass  # the server closed the stream: it read no more than it had to
    answer = read_until_closed(sock)
    sock.close()
    errors = [
        json.loads(line)["error"] for line in answer.split(b"\r\n\r\n", 1)[1].splitlines() if b"{" in line
    ]
    assert errors == ["send INIT to start, not 'junk'"] * 15 + [
        "send INIT to start, not 'junk'; 16 invalid commands in a row: closing"
    ]
    assert sent < 32 << 20  # closed long before the client had said all of it
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200


def test_a_websocket_of_junk_is_closed_at_the_limit(serve):
    server = serve(limits=Limits(max_invalid_commands=4))
    assert httpx.post(f"{server.url}/v1/topics", json={"name": "jobs"}, timeout=10).status_code == 201

    async def junk() -> tuple[list[str], int | None]:
        answers: list[str] = []
        async with websockets.connect(ws_url(server), max_size=None) as ws:
            await ws.send("INIT")
            for _ in range(10):
                try:
                    await ws.send("JUNK")  # while no message is out: invalid
                except websockets.ConnectionClosed:
                    break
            try:
                while True:
                    answers.append(json.loads(await asyncio.wait_for(ws.recv(), WITHIN_S))["error"])
            except websockets.ConnectionClosed:
                pass
            return answers, ws.close_code

    answers, code = asyncio.run(junk())
    assert answers == ["no message is out yet: 'JUNK' changes nothing"] * 3 + [
        "no message is out yet: 'JUNK' changes nothing; 4 invalid commands in a row: closing"
    ]
    assert code is not None


def test_valid_commands_between_invalid_ones_keep_a_subscriber(serve):
    server = serve(limits=Limits(max_invalid_commands=3))
    publish(server, b"one", b"two", b"three")

    async def mixed() -> list[Any]:
        seen: list[Any] = []
        async with websockets.connect(ws_url(server), max_size=None) as ws:
            await ws.send("INIT")
            for _ in range(3):
                seen.append(message(await asyncio.wait_for(ws.recv(), WITHIN_S))[0])
                for word in ("WHAT", "HUH"):  # two invalid in a row, each answered
                    await ws.send(word)
                    seen.append(json.loads(await asyncio.wait_for(ws.recv(), WITHIN_S))["error"])
                await ws.send("ACK")  # valid: the count starts again
        return seen

    seen = asyncio.run(mixed())
    assert seen[0::3] == [b"one", b"two", b"three"]
    errors = seen[1::3] + seen[2::3]
    assert len(errors) == 6 and all("ACK, NACK, BACK or DACK" in e and "closing" not in e for e in errors)
