"""Every answer has a deadline: a client that sends requests and never reads
the answers is closed once they stop draining, before and after it
authenticates, and its connection slot goes to the next client. Before, a
Kafka client that sent ApiVersions and never read lived 11-26 s past the
10 s handshake deadline (the answers waited on the socket's drain with no
deadline), pinning 3-4 MB of kernel buffers each, so four of them filled
`--max-connections 4` and a real client's login was refused; a logged-in
one outlived `--idle-timeout 3` by 10 s."""

from __future__ import annotations

import socket
import time

import httpx

from kafka_serve import KafkaServe
from kafka_wire import KafkaWire, encode_request
from resp_client import ServerThread as RespThread
from sockets import server_end_owned
from tidelog.server.limits import Limits

TOKEN = "kafka-s3cret"
SLACK_S = 5.0  # how much past its deadline a loaded machine may take to close a connection


def flooder(port: int, request: bytes, before: list[bytes] = ()) -> socket.socket:
    """A client with a tiny receive buffer that sends `request` until its sends block:
    it reads nothing, so the server's answers stop draining."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    for frame in before:
        sock.sendall(frame)
    sock.settimeout(0.5)
    try:
        for _ in range(200_000):
            sock.sendall(request * 64)
    except (TimeoutError, OSError):
        pass  # the buffers are full both ways (or the server already closed it)
    return sock


def closed_by(sock: socket.socket, server_port: int, deadline: float) -> bool:
    """Whether the server lets go of its end of `sock` by `deadline` (monotonic),
    seen in /proc without reading: a read would drain the answers it must not take."""
    client_port = sock.getsockname()[1]
    while time.monotonic() < deadline:
        if not server_end_owned(server_port, client_port):
            return True
        time.sleep(0.05)
    return False


def fetch_request(topic: str) -> dict:
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "log_start_offset": -1}
    partition |= {"current_leader_epoch": -1}
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def login(port: int) -> bool:
    with KafkaWire("127.0.0.1", port) as w:
        if w.call(17, 1, {"mechanism": "PLAIN"}).error_code.value != 0:
            return False
        return w.call(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()}).error_code.value == 0


def test_kafka_clients_that_do_not_read_are_closed_and_their_slots_freed(tmp_path, tried):
    args = (
        "--max-connections",
        "4",
        "--handshake-timeout",
        "2",
        "--write-timeout",
        "2",
        "--idle-timeout",
        "60",
    )
    with KafkaServe(tmp_path / "k.db", *args, token=TOKEN) as served:
        api_versions = encode_request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        # Before SASL: four clients send ApiVersions and never read. Each is closed by its
        # handshake deadline (2 s from its connecting), also while its answers wait to drain.
        unread = []
        try:
            for _ in range(4):
                deadline = time.monotonic() + 2 + SLACK_S
                unread.append((flooder(served.kafka_port, api_versions), deadline))
            for sock, deadline in unread:
                assert closed_by(sock, served.kafka_port, deadline)
            assert login(served.kafka_port)  # a real client gets in
        finally:
            for sock, _ in unread:
                sock.close()
        # After SASL: a logged-in client that fetches a large record over and over and
        # never reads; its answers stop draining, and write_timeout closes it.
        headers = {"Authorization": f"Bearer {TOKEN}"}
        big = {"records": [{"value": "x" * 500_000}]}
        assert (
            httpx.post(f"{served.http_url}/v1/topics/big/records", json=big, headers=headers).status_code
            < 300
        )
        handshake = encode_request(17, 1, {"mechanism": "PLAIN"}, correlation_id=1)
        auth = encode_request(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()}, correlation_id=2)
        fetch = encode_request(1, 12, fetch_request("big"))
        sock = flooder(served.kafka_port, fetch, [handshake, auth])  # its sends block: answers wait
        try:
            assert closed_by(sock, served.kafka_port, time.monotonic() + 2 + SLACK_S)
        finally:
            sock.close()
        assert login(served.kafka_port)
    tried(unread_clients=5)


def test_a_redis_client_that_does_not_read_is_closed(tmp_path):
    server = RespThread(str(tmp_path / "r.db"), limits=Limits(write_timeout=1, idle_timeout=0))
    try:
        for _ in range(200):
            server.client().xadd("big", {"v": b"x" * 10_000})
        xrange = b"*4\r\n$6\r\nXRANGE\r\n$3\r\nbig\r\n$1\r\n-\r\n$1\r\n+\r\n"  # 2 MB a reply
        sock = flooder(server.port, xrange)
        try:
            assert closed_by(sock, server.port, time.monotonic() + 1 + SLACK_S)
        finally:
            sock.close()
        assert server.client().ping()
    finally:
        server.close()
