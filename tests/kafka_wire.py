"""A raw Kafka client for the bad-input and differential tests: requests built with kio
(any API and version kio knows, served by tidelog or not), sent on a bare socket.

with KafkaWire("127.0.0.1", port) as wire:
    response = wire.call(3, 12, {"topics": None})
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from tidelog.server.kafka.wire import build

TIMEOUT_S = 10


def encode_request(api_key: int, version: int, values: dict[str, Any], correlation_id: int = 1) -> bytes:
    """A whole frame: size, header (client id "test"), body."""
    import io

    cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    out.write(struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test")
    if cls.__flexible__:
        out.write(b"\0")
    entity_writer(cls)(out, build(cls, values))
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


class KafkaWire:
    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT_S)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        head = self._exactly(4)
        (size,) = struct.unpack(">i", head)
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return out

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        """Send a request and decode its response (kio's dataclass)."""
        self.send(encode_request(api_key, version, values, 7))
        frame = self.recv_frame()
        (correlation_id,) = struct.unpack_from(">i", frame)
        assert correlation_id == 7
        cls = load_response_schema(api_key, version)
        at = 4 + (1 if cls.__flexible__ and api_key != 18 else 0)
        body, _ = entity_reader(cls)(frame, at)
        return body

    def closed(self) -> bool:
        """True when the server closed the connection (or resets it) within the timeout."""
        try:
            return self.sock.recv(1 << 16) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
