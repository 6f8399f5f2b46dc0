"""Probes of the Kafka front, the logins and the duplex stream, against one tree.

    python bench/probes/exposed.py --src PATH

Starts `tidelog serve` from the tidelog `src` tree at PATH (one process, SQLite,
HTTP, Redis and Kafka on free loopback ports, a token, `--max-connections 4
--idle-timeout 3`) and prints one JSON object a line: {"probe", "measure",
"value", "unit"}. A value is null where a step never happened within its bound.
Every wait is bounded; about a minute.

Probes: four Kafka clients that send ApiVersions before SASL and never read (seconds
until each is let go, whether a real client logs in meanwhile); a logged-in one that
stops reading; a 32 KiB zstd batch inflating to 1 GiB and a 1.1 MiB lz4 one to 256 MiB
(growth of the server's peak memory, how long, whether refused, whether written); a
Fetch naming one partition 50 times with max_bytes 2^31-1 (bytes answered); refused
group steps (groups left behind); wrong passwords a second on SASL, Redis AUTH and
the HTTP bearer token; 10 MiB of junk lines on POST /subscribe then a hang-up
(server CPU seconds, /healthz's slowest answer meanwhile); resident against
anonymous memory after that.
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

sys.path.insert(0, str(Path(__file__).parents[2] / "tests"))

from kafka_wire import KafkaWire, encode_request  # noqa: E402
from test_kafka_bounds import inflating_batch  # noqa: E402

TOKEN = "probe-token"
START_S = 30
WATCH_S = 40  # how long a client that does not read is watched


def emit(probe: str, measure: str, value: Any, unit: str = "") -> None:
    print(json.dumps({"probe": probe, "measure": measure, "value": value, "unit": unit}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, src: str, db: str):
        self.env = {**os.environ, "PYTHONPATH": src, "PYTHONUNBUFFERED": "1"}
        self.http, self.resp, self.kafka, self.db = free_port(), free_port(), free_port(), db
        command = [sys.executable, "-m", "tidelog", "serve", "--db", db, "--port", str(self.http)]
        command += ["--resp-port", str(self.resp), "--kafka-port", str(self.kafka), "--token", TOKEN]
        command += [
            "--workers",
            "1",
            "--clean-interval",
            "0",
            "--max-connections",
            "4",
            "--idle-timeout",
            "3",
        ]
        self.proc = subprocess.Popen(
            command, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                self.healthz_ms()
                return
            time.sleep(0.1)
        raise SystemExit("the server did not start")

    def healthz_ms(self) -> float:
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/healthz", timeout=30) as answer:
            answer.read()
        return (time.perf_counter() - started) * 1000

    def status(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_s(self) -> float:
        """User + system CPU of the server's process tree (granian's worker included)."""
        total, todo = 0.0, [self.proc.pid]
        while todo:
            pid = todo.pop()
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                for task in os.listdir(f"/proc/{pid}/task"):
                    todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        return total

    def rows(self) -> list[Any]:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return [sorted(map(repr, conn.execute(f'SELECT * FROM "{n}"'))) for n in sorted(names)]
        finally:
            conn.close()

    def http_post(self, path: str, body: bytes, token: str = TOKEN) -> int:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http}{path}", data=body, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as e:
            return e.code

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def login(port: int, password: str = TOKEN) -> bool:
    try:
        with KafkaWire("127.0.0.1", port) as w:
            w.call(17, 1, {"mechanism": "PLAIN"})
            return w.call(36, 2, {"auth_bytes": b"\0user\0" + password.encode()}).error_code.value == 0
    except (OSError, AssertionError):
        return False


def flooder(port: int, request: bytes, before: tuple[bytes, ...] = ()) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    for frame in before:
        sock.sendall(frame)
    sock.settimeout(0.5)
    with contextlib.suppress(OSError):
        for _ in range(20_000):
            sock.sendall(request * 64)
    return sock


def owned(server_port: int, client_port: int) -> bool:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if (
                int(f[1].rsplit(":", 1)[1], 16) == server_port
                and int(f[2].rsplit(":", 1)[1], 16) == client_port
            ):
                return f[9] != "0"
    return False


def let_go_s(sock: socket.socket, port: int, started: float) -> float | None:
    client = sock.getsockname()[1]
    while time.monotonic() - started < WATCH_S:
        if not owned(port, client):
            return round(time.monotonic() - started, 1)
        time.sleep(0.1)
    return None


def unread_kafka(server: Server) -> None:
    # Timed from when the client's sends block: the server then waits on a client that
    # takes nothing (before that it was answering what the client sent).
    versions = encode_request(18, 3, {"client_software_name": "p", "client_software_version": "1"})
    socks = [(flooder(server.kafka, versions), time.monotonic()) for _ in range(4)]
    logged_in = login(server.kafka)
    times = [let_go_s(s, server.kafka, started) for s, started in socks]
    emit("kafka-unread-before-sasl", "a real client logged in meanwhile", logged_in)
    emit("kafka-unread-before-sasl", "slowest let go", max(times) if None not in times else None, "s")
    for s, _ in socks:
        s.close()
    handshake = encode_request(17, 1, {"mechanism": "PLAIN"}, correlation_id=1)
    auth = encode_request(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()}, correlation_id=2)
    metadata = encode_request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
    sock = flooder(server.kafka, metadata, (handshake, auth))
    emit("kafka-unread-after-sasl", "let go", let_go_s(sock, server.kafka, time.monotonic()), "s")
    sock.close()


def produce_answer(server: Server, batch: bytes) -> int | None:
    data = [{"name": "bombed", "partition_data": [{"index": 0, "records": batch}]}]
    try:
        with KafkaWire("127.0.0.1", server.kafka) as w:
            w.call(17, 1, {"mechanism": "PLAIN"})
            w.call(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()})
            answer = w.call(0, 9, {"acks": -1, "timeout": 30_000, "topic_data": data})
            return int(answer.responses[0].partition_responses[0].error_code.value)
    except (OSError, ConnectionError):
        return None


def bombs(server: Server) -> None:
    server.http_post("/v1/topics", json.dumps({"name": "bombed"}).encode())
    for name, codec, inflated in (("zstd", 4, 1 << 30), ("lz4", 3, 256 << 20)):
        batch = inflating_batch(codec, inflated)
        rows = server.rows()
        peak = server.status("VmHWM")
        started = time.monotonic()
        code = produce_answer(server, batch)
        emit(f"kafka-{name}-bomb", f"{len(batch) >> 10} KiB batch: answered error code", code)
        emit(
            f"kafka-{name}-bomb",
            "peak memory grown by",
            round((server.status("VmHWM") - peak) / (1 << 20)),
            "MB",
        )
        emit(f"kafka-{name}-bomb", "took", round(time.monotonic() - started, 2), "s")
        emit(f"kafka-{name}-bomb", "wrote", server.rows() != rows)


def amplification(server: Server) -> None:
    server.http_post("/v1/topics/amp/records", json.dumps({"records": [{"value": "x" * 900_000}]}).encode())
    each = [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 0x7FFFFFFF}] * 50
    fetch = {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 0x7FFFFFFF,
        "topics": [{"topic": "amp", "partitions": each}],
    }
    request = encode_request(1, 12, {**fetch, "rack_id": ""})
    with KafkaWire("127.0.0.1", server.kafka) as w:
        w.call(17, 1, {"mechanism": "PLAIN"})
        w.call(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()})
        w.send(request)
        answer = w.recv_frame()
    emit(
        "kafka-fetch-50-times",
        f"{len(request)}-byte request answered",
        round(len(answer) / (1 << 20), 1),
        "MiB",
    )


def ghosts(server: Server) -> None:
    before = server.rows()
    with KafkaWire("127.0.0.1", server.kafka) as w:
        w.call(17, 1, {"mechanism": "PLAIN"})
        w.call(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()})
        w.call(
            12, 4, {"group_id": "ghost-hb", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        )
        w.call(13, 4, {"group_id": "ghost-lg", "members": [{"member_id": "m", "group_instance_id": None}]})
    emit("kafka-refused-group-steps", "wrote", server.rows() != before)


def login_floods(server: Server) -> None:
    """Wrong passwords for 2 s on each front: tries answered, and of them the ones the
    server checked against its token (not refused unread by a throttle)."""

    def rate(attempt: Any) -> tuple[float, float]:
        tries = checked = 0
        started = time.monotonic()
        while time.monotonic() - started < 2:
            tries += 1
            checked += attempt()
        took = time.monotonic() - started
        return round(tries / took), round(checked / took)

    def sasl() -> bool:
        with KafkaWire("127.0.0.1", server.kafka) as w:
            w.call(17, 1, {"mechanism": "PLAIN"})
            answer = w.call(36, 2, {"auth_bytes": b"\0user\0wrong"})
            return "too many" not in (answer.error_message or "")

    def redis() -> bool:
        with socket.create_connection(("127.0.0.1", server.resp), timeout=10) as s:
            s.sendall(b"*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n")
            return s.recv(200).startswith(b"-WRONGPASS")

    def http() -> bool:
        return server.http_post("/v1/topics", b"{}", "wrong") == 401

    for name, attempt in (("SASL", sasl), ("Redis AUTH", redis), ("HTTP bearer", http)):
        tries, checked = rate(attempt)
        emit("wrong-passwords", f"{name} tries answered a second", tries)
        emit("wrong-passwords", f"{name} passwords checked a second", checked)
    emit(
        "wrong-passwords",
        "right token from that address then: status",
        server.http_post("/v1/topics/x/records", b'{"records":[{"value":1}]}'),
    )


def duplex_junk(server: Server) -> None:
    cpu = server.cpu_s()
    slowest = [0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):
                slowest[0] = max(slowest[0], server.healthz_ms())
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    s = socket.create_connection(("127.0.0.1", server.http))
    s.sendall(
        b"POST /subscribe/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"junk\n" * 13_107
    s.settimeout(5)
    with contextlib.suppress(OSError):
        for _ in range(160):  # 10 MiB
            s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    s.close()
    started = time.monotonic()
    while time.monotonic() - started < 60:  # until the server is quiet again
        before = server.cpu_s()
        time.sleep(0.5)
        if server.cpu_s() - before < 0.05:
            break
    done.set()
    watcher.join()
    emit("duplex-junk-10MiB", "server CPU", round(server.cpu_s() - cpu, 1), "s")
    emit("duplex-junk-10MiB", "slowest /healthz meanwhile", round(slowest[0]), "ms")
    emit("memory", "resident", round(server.status("VmRSS") / (1 << 20)), "MB")
    emit(
        "memory", "anonymous (reported by /metrics after)", round(server.status("RssAnon") / (1 << 20)), "MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(args.src, str(Path(tmp) / "probe.db"))
        try:
            for probe in (unread_kafka, bombs, amplification, ghosts, duplex_junk, login_floods):
                try:
                    probe(server)
                except Exception as e:  # noqa: BLE001 - one probe's failure is a row, the others still run
                    emit(probe.__name__, "failed", f"{type(e).__name__}: {e}"[:100])
        finally:
            server.stop()


if __name__ == "__main__":
    main()
