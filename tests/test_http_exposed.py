"""The HTTP front exposed to clients that misbehave before they authenticate:
made-up methods make no metrics series, silent and idle connections are
closed and cannot lock /healthz out, the connections past max_connections
are refused at once, and a client that hangs up mid-body is no server error.
Real servers on loopback, real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tidelog.errors import PortInUse
from tidelog.server.http.thread import ServerThread, free_port
from tidelog.server.limits import Limits

websockets = pytest.importorskip("websockets")
h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Short, for the tests: every wait below is bounded by a generous deadline.
LIMITS = Limits(max_connections=16, handshake_timeout=1.0, idle_timeout=1.5)


def closed(sock: socket.socket) -> bool:
    """The server closed it (an end of stream or a reset), without waiting."""
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def until(condition, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " ")]


# --- metrics: a closed set of label values (finding 3) -------------------------------------


def test_made_up_methods_and_paths_make_no_series(serve, tried):
    server = serve(token=TOKEN)
    sent = 20_000
    with socket.create_connection((server.host, server.port), timeout=30) as raw:
        # Pipelined on one kept-alive connection, 500 at a time: every one is
        # answered 401 (no token), as before authentication.
        for start in range(0, sent, 500):
            raw.sendall(
                b"".join(
                    f"FOO{i} /x{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(start, start + 500)
                )
            )
            answered = b""
            while answered.count(b"HTTP/1.1 401") < 500:
                chunk = raw.recv(1 << 20)
                assert chunk, "the server closed the connection"
                answered += chunk
    scrape = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=30)
    requests = series(scrape.text, "tidelog_http_requests_total")
    assert (
        f'tidelog_http_requests_total{{method="other",route="unmatched",status="401"}} {sent}.0' in requests
    )
    assert len(requests) <= 3  # those, the scrape itself (and, in workers mode, its twin)
    methods = {m for line in requests for m in re.findall(r'method="([^"]*)"', line)}
    assert methods <= {"other", "GET"}
    assert len(scrape.content) < 64 << 10
    tried(requests=sent, series=len(requests), metrics_bytes=len(scrape.content))


# --- connections: silent, idle, too many (finding 4) ---------------------------------------


def test_a_flood_of_silent_connections_does_not_lock_out_healthz(serve, tried):
    server = serve(limits=LIMITS)
    flood = [
        socket.create_connection((server.host, server.port), timeout=10)
        for _ in range(4 * LIMITS.max_connections)
    ]
    try:
        # Held open, they fill every place and the backlog: /healthz still gets in.
        answered = httpx.get(f"{server.url}/healthz", timeout=10)
        assert answered.status_code == 200
        # ...and none outlives handshake_timeout (+ the guard's tick).
        assert until(lambda: all(closed(s) for s in flood)), sum(not closed(s) for s in flood)
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    finally:
        for s in flood:
            s.close()
    tried(silent_connections=len(flood), max_connections=LIMITS.max_connections)


@pytest.mark.parametrize(
    "first", [b"G", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n"]
)
def test_a_partial_request_head_is_closed_after_handshake_timeout(serve, first):
    server = serve(limits=LIMITS)
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(first)  # and then nothing
        assert until(lambda: closed(sock))


def h2_healthz(server: Any) -> socket.socket:
    """An HTTP/2 connection (h2c) that made one request and keeps quiet."""
    sock = socket.create_connection((server.host, server.port), timeout=10)
    conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=True))
    conn.initiate_connection()
    headers = [(":method", "GET"), (":path", "/healthz"), (":scheme", "http"), (":authority", "x")]
    conn.send_headers(conn.get_next_available_stream_id(), headers, end_stream=True)
    sock.sendall(conn.data_to_send())
    ended = False
    while not ended:
        events = conn.receive_data(sock.recv(65536))
        ended = any(isinstance(e, h2_events.StreamEnded) for e in events)
        sock.sendall(conn.data_to_send())
    return sock


def test_idle_connections_are_closed_but_long_polls_and_subscribers_are_not(serve):
    server = serve(limits=LIMITS)
    url = server.url
    with httpx.Client(base_url=url, timeout=10) as http:
        http.post("/v1/topics", json={"name": "t"}).raise_for_status()
    # An HTTP/1.1 keep-alive connection after one request, and an HTTP/2 one.
    h1 = socket.create_connection((server.host, server.port), timeout=10)
    h1.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert h1.recv(65536).startswith(b"HTTP/1.1 200")
    h2 = h2_healthz(server)

    async def busy() -> list[Any]:
        # Each waits longer than idle_timeout with nothing on the wire.
        ws_url = url.replace("http://", "ws://") + "/subscribe/t"
        async with httpx.AsyncClient(base_url=url, timeout=15) as client, websockets.connect(ws_url) as ws:
            await ws.send("INIT")
            poll = asyncio.ensure_future(client.get("/v1/topics/t/partitions/0/records", params={"wait": 4}))
            await asyncio.sleep(3 * LIMITS.idle_timeout)
            await client.post("/publish/t", content=b"late")
            pushed = await asyncio.wait_for(ws.recv(), 10)
            return [(await poll).status_code, pushed]

    try:
        status, pushed = asyncio.run(busy())
        assert status == 200 and json.loads(pushed)["offset"] == 1
        assert until(lambda: closed(h1))
        assert until(lambda: closed(h2))
    finally:
        h1.close()
        h2.close()


def test_past_max_connections_busy_ones_are_refused_at_once(tmp_path):
    limits = Limits(max_connections=4, handshake_timeout=5.0, idle_timeout=30.0)
    with ServerThread(str(tmp_path / "busy.db"), limits=limits, max_wait=30) as server:
        httpx.post(f"{server.url}/v1/topics", json={"name": "t"}).raise_for_status()
        time.sleep(0.5)  # the set-up's connection is gone

        async def hold_and_knock() -> list[Any]:
            # Four long-polls hold every place, each with a request in flight.
            clients = [
                httpx.AsyncClient(base_url=server.url, timeout=20) for _ in range(limits.max_connections)
            ]
            polls = [
                asyncio.ensure_future(c.get("/v1/topics/t/partitions/0/records", params={"wait": 6}))
                for c in clients
            ]
            await asyncio.sleep(1.0)
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as late:
                knocked = await late.get("/healthz")
            await late.aclose()
            got = [(await p).status_code for p in polls]
            for c in clients:
                await c.aclose()
            return [knocked, got]

        knocked, polls = asyncio.run(hold_and_knock())
        assert knocked.status_code == 503 and knocked.json()["error"]["code"] == "unavailable"
        assert polls == [200] * limits.max_connections  # the busy ones were not touched
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200


def test_a_second_server_thread_on_a_taken_port_is_refused_not_shared(tmp_path):
    # granian binds with SO_REUSEPORT on Linux: left to bind by itself, a
    # second server on the port would listen too, and the kernel would hand
    # it some of the first one's connections (a test saw its topic vanish).
    with ServerThread(str(tmp_path / "first.db")) as first:
        httpx.post(f"{first.url}/v1/topics", json={"name": "mine"}).raise_for_status()
        with pytest.raises(PortInUse, match=f"port {first.port} is in use"):
            ServerThread(str(tmp_path / "second.db"), port=first.port).start()
        for _ in range(20):  # new connections, each to the first server
            with httpx.Client(base_url=first.url) as fresh:
                assert fresh.get("/v1/topics/mine").status_code == 200
    assert not (tmp_path / "second.db").exists()


# --- a client that hangs up mid-body (finding 14) ------------------------------------------


@pytest.fixture
def served_process(tmp_path):
    """`tidelog serve --workers 1` with its log (debug) in a file."""
    port = free_port()
    log_path = tmp_path / "server.log"
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", str(tmp_path / "p.db"), "--port", str(port)]
    argv += ["--resp-port", "0", "--workers", "1", "--log-level", "debug"]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=os.environ.copy())
    base = f"http://127.0.0.1:{port}"
    try:
        assert until(lambda: _up(base) or proc.poll() is not None, 30) and proc.poll() is None, (
            log_path.read_text()
        )
        yield base, port, log_path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_client_disconnects_mid_body_are_counted_not_tracebacks(served_process, tried):
    base, port, log_path = served_process
    paths = ["/publish/t", "/v1/topics", "/v1/topics/t/records", "/api/topics", "/v1/queues/t/messages"]
    paths += ["/console/topics/t/produce", "/subscribe/t", "/v1/records"]
    hung_up = 0
    for _ in range(10):
        for path in paths:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
                sock.sendall(head.encode() + b'{"records": [')  # and hangs up
                time.sleep(0.01)
            hung_up += 1
    metrics = ""

    def counted() -> bool:
        nonlocal metrics
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        return bool(series(metrics, "tidelog_http_client_disconnects_total"))

    assert until(counted)
    assert not [line for line in series(metrics, "tidelog_http_requests_total") if 'status="5' in line]
    (count,) = series(metrics, "tidelog_http_client_disconnects_total")
    assert 0 < float(count.split()[-1]) <= hung_up
    log = log_path.read_text()
    assert "Traceback" not in log and "ClientDisconnect" not in log, log[-3000:]
    tried(disconnects=hung_up, routes=len(paths))
