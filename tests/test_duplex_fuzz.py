"""A fuzzer for the duplex subscriber's command reader (`POST /subscribe/{topic}`,
HTTP/1.1 chunked, miniqueue's protocol): after INIT or not, lines that are
commands, nearly commands (a DACK without seconds or with 1e300, JSON strings,
lowercase, padding), random bytes, very long lines and empty ones, cut at
random chunk borders. After each conversation the body ends and the server
must end the stream; then a fresh client is served, the server's heap stays
within a bound and no record is left in flight (a message the conversation
held went back to the queue)."""

from __future__ import annotations

import json
import socket
import time

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ANON_BOUND = 64 << 20
WORDS = ["INIT", "ACK", "NACK", "BACK", "DACK 1", "DACK", "DACK x", "DACK 1e300", "DACK -1", "EXTEND", "ack"]
WORDS += ['"INIT"', '"ACK"', '"DACK 5"', "[1]", "{}", "null", '"', "\\u0000"]


def line() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(WORDS).map(str.encode),
        st.tuples(st.sampled_from(WORDS), st.sampled_from(["", " ", "  x", "\t", "\r"])).map(
            lambda t: (t[0] + t[1]).encode()
        ),
        st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
        st.integers(100, 70_000).map(lambda n: b"A" * n),  # past the reader's 64 KiB line
    )


def chunked(data: bytes, cuts: list[int]) -> bytes:
    out, at = b"", 0
    for cut in [*cuts, len(data)]:
        piece = data[at : at + cut] if cut else b""
        if piece:
            out += b"%x\r\n%s\r\n" % (len(piece), piece)
        at += len(piece)
        if at >= len(data):
            break
    if at < len(data):
        out += b"%x\r\n%s\r\n" % (len(data) - at, data[at:])
    return out + b"0\r\n\r\n"


def converse(port: int, body: bytes) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    said = b""
    try:
        head = b"POST /subscribe/fz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        try:
            sock.sendall(head + body)
        except OSError:
            pass  # closed early (invalid commands in a row): what it said is read below
        while chunk := sock.recv(1 << 16):
            said += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        sock.close()
    return said


def anonymous(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(row.split()[1]) * 1024 for row in f if row.startswith("RssAnon:"))


def test_the_duplex_reader_survives_what_clients_send(serve, tried):
    import os

    server = serve()
    port = httpx.URL(server.url).port
    http = httpx.Client(base_url=server.url, timeout=20)
    assert (
        http.post("/v1/topics/fz/records", json={"records": [{"value": i} for i in range(3)]}).status_code
        < 300
    )
    pid = getattr(server, "pid", None) or os.getpid()
    base = anonymous(pid)
    counts = {"cases": 0, "errors_answered": 0, "slowest_other_ms": 0.0}

    @settings(
        max_examples=80,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        init=st.booleans(),
        lines=st.lists(line(), max_size=24),
        cuts=st.lists(st.integers(0, 300), max_size=8),
    )
    def check(init: bool, lines: list[bytes], cuts: list[int]) -> None:
        # Records to hand out each time: a subscriber with commands sent ahead waits for the
        # message they answer as long as none comes (it is not idle), as it should.
        http.post("/v1/topics/fz/records", json={"records": [{"value": i} for i in range(30)]})
        body = b"\n".join([b"INIT", *lines] if init else lines) + b"\n"
        said = converse(port, chunked(body, cuts))
        counts["cases"] += 1
        counts["errors_answered"] += said.count(b'"error"')
        start = time.monotonic()
        assert http.get("/healthz").status_code == 200
        counts["slowest_other_ms"] = max(counts["slowest_other_ms"], (time.monotonic() - start) * 1000)
        deadline = time.monotonic() + 10
        while (stats := http.get("/v1/queues/fz/stats").json())["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stats["in_flight"] == 0, stats  # what the conversation held went back
        assert anonymous(pid) < base + ANON_BOUND

    try:
        check()
    finally:
        http.close()
    counts["slowest_other_ms"] = round(counts["slowest_other_ms"], 1)
    tried(**counts)
    json.dumps(counts)
