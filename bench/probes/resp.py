"""Probes of the Redis protocol front's bounds (issue 27) and its SUBSCRIBE wire (issue 30).

    python bench/probes/resp.py --src PATH

Starts `tidelog serve` from the tidelog `src` tree at PATH (`PYTHONPATH=PATH
python -m tidelog serve --workers 1 --token T ...`, one process so its
memory is one RSS) on loopback, runs each probe against it with raw
sockets, and prints one JSON object a line: {"probe": ..., "measure": ...,
"value": ..., "unit": ...}. The limits are the defaults, except the hold
and idle times, shortened to fit the run (`--max-hold 3 --idle-timeout 3`)
where the tree has those flags; a value is null where a step never happened
within its bound (the tree has no such bound). About 30 s; every wait is
bounded.

Probes: `*2000000000` then 48 MiB of elements before AUTH (memory, whether
the connection is cut); `*2000000000` then a hang-up (how long /healthz
and PING take next); 1,500 connections (how many are served, the memory
they take); a connection that never authenticates, one that goes silent,
a subscriber that freezes holding a message and one that stops reading
(seconds until each is let go); out-of-range integers (replies naming an
internal or store error); whether refused requests changed the store; the
first frame a RESP2 subscriber reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

TOKEN = "probe-token"
START_S = 30  # a server that does not answer by then did not start
HOLD_S = 3  # --max-hold and --idle-timeout, where the tree has them
LET_GO_BOUND_S = 14  # how long a frozen, silent or unauthenticated client is watched


def emit(probe: str, measure: str, value: Any, unit: str = "") -> None:
    print(json.dumps({"probe": probe, "measure": measure, "value": value, "unit": unit}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`tidelog serve` from the tree under test, HTTP and RESP on free loopback ports."""

    def __init__(self, src: str, db: str):
        self.env = {**os.environ, "PYTHONPATH": src, "PYTHONUNBUFFERED": "1"}
        flags = subprocess.run(
            [sys.executable, "-m", "tidelog", "serve", "--help"], env=self.env, capture_output=True, text=True
        ).stdout
        self.bounded = "--max-hold" in flags
        self.http, self.resp, self.db = free_port(), free_port(), db
        command = [sys.executable, "-m", "tidelog", "serve", "--db", db, "--port", str(self.http)]
        command += ["--resp-port", str(self.resp), "--token", TOKEN, "--workers", "1"]
        command += ["--clean-interval", "0"]
        if self.bounded:
            command += ["--max-hold", str(HOLD_S), "--idle-timeout", str(HOLD_S)]
        self.proc = subprocess.Popen(
            command, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if self.healthz_ms() is not None:
                    return
            time.sleep(0.1)
        raise SystemExit("the server did not start")

    def healthz_ms(self) -> float | None:
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/healthz", timeout=20) as answer:
            answer.read()
        return round((time.perf_counter() - started) * 1000, 1)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
        return float("nan")

    def connect(self, authenticate: bool = True, timeout: float = 30) -> Client:
        client = Client(self.resp, timeout)
        if authenticate:
            client.send(b"AUTH", TOKEN.encode())
            client.line()
        return client

    def rows(self) -> list[Any]:
        """Every row of the store's file, to tell whether a refused request wrote."""
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return [sorted(map(repr, conn.execute(f'SELECT * FROM "{n}"'))) for n in sorted(names)]
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class Client:
    """A raw RESP connection."""

    def __init__(self, port: int, timeout: float = 10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, *args: bytes) -> None:
        self.sock.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))

    def line(self) -> bytes | None:
        """The next line the server sends, None when it closed first."""
        while b"\r\n" not in self.buf:
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionError, TimeoutError):
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def value(self) -> bytes | None:
        """A message's value, in miniqueue's frame or Redis's pub/sub frame."""
        line = self.line()
        if line is None:
            return None
        if line.startswith(b"*"):  # ["subscribe"|"message", topic, value]
            parts = [self.value() for _ in range(int(line[1:]))]
            return parts[2] if parts[0] == b"message" else self.value()
        if line.startswith(b"$"):
            n = int(line[1:])
            while len(self.buf) < n + 2:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return None
                self.buf += chunk
            value, self.buf = self.buf[:n], self.buf[n + 2 :]
            return value
        if line.startswith(b":"):
            return line[1:]
        return None

    def closed_within(self, seconds: float) -> float | None:
        """Seconds until the server closes the connection, None if it does not within `seconds`."""
        started = time.monotonic()
        self.sock.settimeout(seconds)
        try:
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            return None
        except ConnectionError:
            pass
        return round(time.monotonic() - started, 2)

    def close(self) -> None:
        self.sock.close()


KEPT: list[Any] = []  # the watched clients' sockets, open until the end (not to the collector)


def let_go(server: Server) -> list[tuple[str, threading.Thread, dict[str, Any]]]:
    """Start the clients whose release is timed; the probes run meanwhile."""
    started = []

    def run(name: str, fn: Any) -> None:
        out: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: out.update(seconds=fn()), daemon=True)
        thread.start()
        started.append((name, thread, out))

    unauthenticated = server.connect(authenticate=False)

    def never_authenticates() -> float | None:
        # It speaks every half second (refused: NOAUTH), so it is not idle: only the AUTH deadline applies.
        started = time.monotonic()
        while time.monotonic() - started < LET_GO_BOUND_S:
            try:
                unauthenticated.send(b"PING")
            except OSError:
                break
            if unauthenticated.line() is None:
                break
            time.sleep(0.5)
        else:
            return None
        return round(time.monotonic() - started, 1)

    run("a connection that sends PING but never AUTH is closed after", never_authenticates)
    silent = server.connect()
    run(
        f"an idle connection is closed after (idle-timeout {HOLD_S} s)",
        lambda: silent.closed_within(LET_GO_BOUND_S),
    )

    publisher = server.connect()
    publisher.send(b"PUBLISH", b"probe-frozen", b"m1")
    publisher.line()
    frozen = server.connect()
    frozen.send(b"SUBSCRIBE", b"probe-frozen")
    frozen.value()  # holds m1 and says nothing more
    held = time.monotonic()
    other = server.connect(timeout=LET_GO_BOUND_S)
    other.send(b"SUBSCRIBE", b"probe-frozen")

    def frozen_released() -> float | None:
        return round(time.monotonic() - held, 2) if other.value() == b"m1" else None

    run(f"a frozen subscriber's message reaches another after (max-hold {HOLD_S} s)", frozen_released)

    publisher.send(b"PUBLISH", b"probe-stuck", b"v" * (1 << 20))
    publisher.line()
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(("127.0.0.1", server.resp))
    stuck.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%b\r\n" % (len(TOKEN), TOKEN.encode()))
    stuck.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$11\r\nprobe-stuck\r\n")  # and never reads
    pushed = time.monotonic()
    time.sleep(0.5)  # it takes the message first
    reader = server.connect(timeout=LET_GO_BOUND_S)
    reader.send(b"SUBSCRIBE", b"probe-stuck")

    def stuck_released() -> float | None:
        return round(time.monotonic() - pushed, 2) if reader.value() == b"v" * (1 << 20) else None

    run(f"a subscriber that stops reading lets its message go after (max-hold {HOLD_S} s)", stuck_released)
    KEPT.extend([unauthenticated, silent, publisher, frozen, other, stuck, reader])
    return started


def announced_array(server: Server) -> None:
    probe = "announced-array"
    base = server.rss_mb()
    emit(probe, "server RSS before", base, "MB")
    bad = server.connect(authenticate=False)
    total, sent = 48 << 20, 0
    chunk = b"$2\r\nab\r\n" * 8192
    started = time.monotonic()
    try:
        bad.sock.sendall(b"*2000000000\r\n")
        while sent < total and time.monotonic() - started < 15:
            bad.sock.sendall(chunk)
            sent += len(chunk)
    except (ConnectionError, TimeoutError):
        pass
    emit(probe, "MiB of elements taken before AUTH (of 48)", round(sent / (1 << 20), 1), "MiB")
    emit(probe, "connection cut before the end", sent < total, "bool")
    emit(probe, "server RSS with the client connected", server.rss_mb(), "MB")
    bad.close()
    time.sleep(1)
    emit(probe, "server RSS 1 s after the client left", server.rss_mb(), "MB")


def announced_array_hang_up(server: Server) -> None:
    probe = "announced-array-hang-up"
    bad = server.connect()
    bad.sock.sendall(b"*2000000000\r\n" + b"$2\r\nab\r\n" * 1024)
    bad.sock.settimeout(5)  # a tree without the bound never answers: it waits for the elements
    first = bad.line()
    emit(probe, "the server's answer", None if first is None else first.decode(errors="replace"), "")
    bad.close()
    emit(probe, "/healthz right after the hang-up", server.healthz_ms(), "ms")
    started = time.perf_counter()
    client = server.connect(timeout=20)
    client.send(b"PING")
    client.line()
    emit(
        probe,
        "AUTH + PING on a new connection right after",
        round((time.perf_counter() - started) * 1000, 1),
        "ms",
    )
    client.close()


def many_connections(server: Server) -> None:
    probe = "connections"
    base = server.rss_mb()
    clients = []
    served = 0
    for _ in range(1500):
        try:
            client = Client(server.resp, timeout=10)
            client.send(b"PING")  # answered NOAUTH when served
        except OSError:
            continue
        clients.append(client)
        line = client.line()
        served += line is not None and line.startswith(b"-NOAUTH")
    emit(probe, "of 1500 opened: served", served, "connections")
    emit(probe, "of 1500 opened: refused or closed", 1500 - served, "connections")
    emit(probe, "server RSS growth with them open", round(server.rss_mb() - base, 1), "MB")
    for client in clients:
        client.close()


def integers(server: Server) -> None:
    probe = "integers"
    setup = server.connect()
    setup.send(b"XADD", b"probe-ints", b"*", b"f", b"v")
    setup.value()
    setup.send(b"XGROUP", b"CREATE", b"probe-ints", b"g", b"0")
    setup.line()
    setup.close()
    big = str((1 << 63) - 1).encode()
    tried = [
        [b"XAUTOCLAIM", b"probe-ints", b"g", b"c", b"0", b"0", b"COUNT", big],
        [b"XPENDING", b"probe-ints", b"g", b"-", b"+", big],
        [b"XRANGE", b"probe-ints", b"-", b"+", b"COUNT", big],
        [b"XCLAIM", b"probe-ints", b"g", b"c", big, b"0-1"],
        [b"XREAD", b"COUNT", big, b"STREAMS", b"probe-ints", b"0"],
    ]
    internal = 0
    for command in tried:
        client = server.connect()  # a connection each: only a reply's first line is read
        client.send(*command)
        line = client.line() or b""
        if command is tried[0]:
            emit(probe, "XAUTOCLAIM ... COUNT 2^63-1 answers", line.decode(errors="replace"), "")
        internal += b"internal error" in line or b"failed" in line
        client.close()
    emit(probe, f"of {len(tried)} commands with 2^63-1: an internal or store error", internal, "replies")


def refused_requests(server: Server) -> None:
    probe = "refused-requests"
    before = server.rows()
    for frame in (
        b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$2000000000\r\n",
        b"*3\r\n$7\r\nPUBLISH\r\n$4\r\nwork\r\n$-5\r\n",
        b"*2\r\n$4\r\nXADD\r\n*2000000000\r\n",
    ):
        client = server.connect()
        with contextlib.suppress(OSError):
            client.sock.sendall(frame)
            client.sock.shutdown(socket.SHUT_WR)
        client.closed_within(5)
        client.close()
    emit(probe, "three malformed writes changed the store", server.rows() != before, "bool")


def subscribe_frames(server: Server) -> None:
    probe = "subscribe-wire"
    publisher = server.connect()
    publisher.send(b"PUBLISH", b"probe-wire", b"value")
    publisher.line()
    publisher.close()
    client = server.connect()
    client.send(b"SUBSCRIBE", b"probe-wire")
    first = client.line() or b""
    shape = (
        "the value alone ($5 value)" if first == b"$5" else f"a Redis pub/sub frame ({first.decode()} ...)"
    )
    emit(probe, "the first frame a RESP2 subscriber reads", shape, "")
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="a tidelog src directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(str(Path(args.src).resolve()), str(Path(tmp) / "probe.db"))
        try:
            emit("setup", "the tree has --max-hold and --idle-timeout", server.bounded, "bool")
            started = let_go(server)
            many_connections(server)
            announced_array(server)
            integers(server)
            refused_requests(server)
            subscribe_frames(server)
            for name, thread, out in started:
                thread.join(LET_GO_BOUND_S + 5)
                emit("let-go", name, out.get("seconds"), "s")
            announced_array_hang_up(server)  # last: on a tree without the bound it blocks the server
        finally:
            server.stop()


if __name__ == "__main__":
    main()
