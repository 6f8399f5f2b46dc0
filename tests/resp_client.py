"""A Redis-protocol server for the RESP tests, and a client that speaks RESP by hand.

ServerThread runs `start_resp_server` on its own event loop thread over a
Log the test shares; RespProcess runs `python -m tidelog.server.resp` as a
process of its own, for tests that watch the server's memory (its RSS) or
must not share an interpreter with it. RawClient is a socket that writes
frames and reads replies byte by byte: for SUBSCRIBE and for bad frames.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
from typing import Any

import redis

import tidelog
from tidelog.server.resp import resp_state, start_resp_server, stop_resp_server


class ServerThread:
    """A RESP server on its own event loop thread, over a Log the test shares."""

    def __init__(self, url: str, token: str | None = None, **options: Any):
        self.log = tidelog.open(url)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self._call(start_resp_server(self.log, "127.0.0.1", 0, token, **options))
        self.port = self.server.sockets[0].getsockname()[1]
        self.raws: list[RawClient] = []  # closed with the server, also when a test fails midway

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def state(self) -> Any:
        """The listener's RespServer (its connections, its counters)."""
        return resp_state(self.server)

    def client(self, **kw: Any) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=10, **kw)

    def raw(self) -> RawClient:
        client = RawClient(self.port)
        self.raws.append(client)
        return client

    def close(self) -> None:
        for client in self.raws:
            client.close()
        self._call(stop_resp_server(self.server))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
        self.log.close()


class RawClient:
    """A socket that speaks RESP by hand: for SUBSCRIBE and bad frames."""

    def __init__(self, port: int, timeout: float = 10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, *args: bytes | str) -> None:
        parts = [a.encode() if isinstance(a, str) else a for a in args]
        self.sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%b\r\n" % (len(p), p) for p in parts))

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return line.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed")
                self.buf += chunk
            value, self.buf = self.buf[:n], self.buf[n + 2 :]
            return value
        if kind in (b"*", b">"):
            return [self.reply() for _ in range(int(rest))]
        raise AssertionError(f"unexpected reply {line!r}")

    def closed_by_server(self) -> bool:
        """True once the server closed the connection (waits up to the socket's timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def rest(self) -> bytes:
        """Everything the server sends until it closes the connection."""
        out = self.buf
        self.buf = b""
        try:
            while chunk := self.sock.recv(65536):
                out += chunk
        except ConnectionError:
            pass
        return out

    def close(self) -> None:
        self.sock.close()


class RespProcess:
    """`python -m tidelog.server.resp` on a free port, stopped by `close()`."""

    def __init__(self, url: str, token: str | None = None, *args: str):
        command = [sys.executable, "-m", "tidelog.server.resp", "--db", url, "--port", "0", *args]
        if token:
            command += ["--token", token]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        found = re.search(r"listening on [^:]+:(\d+)", line)
        if found is None:
            self.close()
            raise AssertionError(f"the RESP server did not start: {line!r}")
        self.port = int(found.group(1))
        self.token = token

    def rss_mb(self) -> float:
        """The server's resident memory (VmRSS), in MB."""
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def raw(self, authenticate: bool = True) -> RawClient:
        client = RawClient(self.port)
        if authenticate and self.token:
            client.send("AUTH", self.token)
            assert client.reply() == "+OK"
        return client

    def ping(self) -> bool:
        """A fresh connection is answered (after AUTH when a token is set)."""
        client = self.raw()
        try:
            client.send("PING")
            return client.reply() == "+PONG"
        finally:
            client.close()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
