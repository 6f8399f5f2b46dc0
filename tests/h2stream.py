"""One HTTP/2 request whose body and response interleave, driven by the h2
library over a plain socket: what miniqueue's workers do on
`POST /subscribe/{topic}` (httpx sends the whole body before it reads)."""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import pytest

h2_connection = pytest.importorskip("h2.connection")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")


class StreamEnded(ConnectionError):
    """The server ended (or reset) the stream."""


class H2Stream:
    """One HTTP/2 POST whose body and response interleave, over h2c or TLS."""

    def __init__(self, server: Any, path: str, context: ssl.SSLContext | None = None, timeout: float = 10):
        raw = socket.create_connection((server.host, server.port), timeout=timeout)
        if context is not None:
            context.set_alpn_protocols(["h2"])
            raw = context.wrap_socket(raw, server_hostname="127.0.0.1")
            assert raw.selected_alpn_protocol() == "h2"
        self.sock = raw
        self.conn = h2_connection.H2Connection(h2_config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.stream_id = self.conn.get_next_available_stream_id()
        scheme = "https" if context is not None else "http"
        headers = [(":method", "POST"), (":path", path), (":scheme", scheme), (":authority", "127.0.0.1")]
        self.conn.send_headers(self.stream_id, headers + [("content-type", "application/json")])
        self.sock.sendall(self.conn.data_to_send())
        self.status: int | None = None
        self.buffer = b""
        self.ended = False

    def say(self, command: str) -> None:
        self.conn.send_data(self.stream_id, json.dumps(command).encode() + b"\n")
        self.sock.sendall(self.conn.data_to_send())

    def line(self) -> bytes:
        """The next line of the response; StreamEnded once there is none."""
        while b"\n" not in self.buffer:
            if self.ended:
                raise StreamEnded(f"the stream ended; left: {self.buffer[:200]!r}")
            data = self.sock.recv(65536)
            if not data:
                raise StreamEnded("the connection closed")
            for event in self.conn.receive_data(data):
                if isinstance(event, h2_events.ResponseReceived):
                    self.status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2_events.DataReceived):
                    self.buffer += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2_events.StreamEnded | h2_events.StreamReset):
                    self.ended = True
            self.sock.sendall(self.conn.data_to_send())
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def close(self) -> None:
        self.sock.close()  # a disconnect, as a killed worker's
