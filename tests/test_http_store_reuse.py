"""The http:// store over a kept-alive connection the server closes unanswered.

A server may close an idle kept-alive connection just as the client sends
its next request on it (keep-alive and idle timeouts, a guard that drops a
connection): the request gets no answer. A read is sent again on a new
connection; a write is not (it may have landed), it fails as a StoreError.

The server here is a real loopback socket that answers the first request of
each connection and then closes it without answering the second, which is
what the client sees in that race, made certain.
"""

from __future__ import annotations

import socket
import threading

import pytest

import tidelog
from tidelog.store.http import HTTPStore

ANSWER = b'{"topics": []}'


class OneRequestServer:
    """Answers one request a connection (keep-alive), then drops the next unanswered."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            answered = False
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
                if b"\r\n\r\n" not in data:
                    continue
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                if len(rest) < length:
                    continue
                data = rest[length:]
                self.requests += 1
                if answered:
                    return  # the second request of the connection: closed unanswered
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + b"content-length: %d\r\n\r\n" % len(ANSWER)
                    + ANSWER
                )
                answered = True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server():
    s = OneRequestServer()
    yield s
    s.close()


def test_a_read_is_sent_again_on_a_new_connection(server):
    store = HTTPStore(f"http://127.0.0.1:{server.port}")
    try:
        assert store.topics() == []
        assert store.topics() == []  # its kept-alive connection is dropped unanswered: sent again
        assert (server.connections, server.requests) == (2, 3)
    finally:
        store.close()


def test_a_write_is_not_sent_again(server):
    store = HTTPStore(f"http://127.0.0.1:{server.port}")
    try:
        assert store.topics() == []
        with pytest.raises(tidelog.StoreError, match="cannot reach the tidelog server"):
            store.add_partitions("t", 2)  # a POST on the dropped connection
        assert (server.connections, server.requests) == (1, 2)
    finally:
        store.close()
