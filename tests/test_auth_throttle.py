"""Failed authentication is throttled per client address across every front
(server/throttle.py): wrong tokens sent to one front hold the address back on
all of them, a refused try writes nothing, and /metrics counts both. Before,
an address could try 4,300 SASL passwords a second, 7,000 Redis AUTHs and
2,100 HTTP bearer tokens, and the console's own login throttle was bypassed
through the other fronts."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dumps import dump
from kafka_wire import KafkaWire
from tidelog.server.http.thread import free_port
from tidelog.server.throttle import AuthThrottle

TOKEN = "s3cret-token"
ELSEWHERE = "127.0.0.2"  # another client address, on the same loopback


def test_an_address_waits_longer_after_each_failure_past_the_free_ones():
    now = [0.0]
    counted: list[tuple[str, str]] = []
    throttle = AuthThrottle(
        free=2,
        base=1,
        cap=4,
        forget=100,
        max_clients=3,
        clock=lambda: now[0],
        count=lambda *c: counted.append(c),
    )
    for _ in range(2):
        assert throttle.wait("10.0.0.1", "http") == 0
        throttle.failed("10.0.0.1", "http")
    assert throttle.wait("10.0.0.1", "resp") == pytest.approx(1)  # the third try waits 1 s
    now[0] = 1.0
    assert throttle.wait("10.0.0.1") == 0
    throttle.failed("10.0.0.1", "kafka")
    assert throttle.wait("10.0.0.1") == pytest.approx(2)  # then 2 s, 4 s, and never more than the cap
    now[0] = 3.0
    throttle.failed("10.0.0.1", "kafka")
    assert throttle.wait("10.0.0.1") == pytest.approx(4)
    now[0] = 7.0
    throttle.failed("10.0.0.1", "kafka")
    assert throttle.wait("10.0.0.1") == pytest.approx(4)
    assert throttle.wait("10.0.0.2") == 0  # another address is not held back
    assert counted.count(("http", "failed")) == 2 and counted.count(("resp", "throttled")) == 1
    # An address that authenticates is forgotten; one quiet for `forget` seconds starts afresh.
    throttle.passed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == 0 and len(throttle) == 0
    for _ in range(3):
        throttle.failed("10.0.0.5", "http")
    now[0] = 200.0
    throttle.failed("10.0.0.5", "http")
    assert throttle.wait("10.0.0.5") == 0  # one failure since it was forgotten
    # An IPv6 client counts by its /64; an IPv4-mapped one as its IPv4 address.
    for _ in range(3):
        throttle.failed("2001:db8::1", "http")
    assert throttle.wait("2001:db8::ffff") > 0 and throttle.wait("2001:db8:0:1::1") == 0
    for _ in range(3):
        throttle.failed("::ffff:10.0.0.9", "http")
    assert throttle.wait("10.0.0.9") > 0
    throttle.failed("10.0.0.3", "http")
    assert len(throttle) == 3  # bounded: the least recently failed was forgotten


class Served:
    """`tidelog serve` with a token on HTTP, Redis and Kafka."""

    def __init__(self, tmp_path: Path, *args: str):
        self.db = tmp_path / "t.db"
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        self.port, self.resp_port, self.kafka_port = free_port(), free_port(), free_port()
        self.log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tidelog.cli",
                "serve",
                "--db",
                str(self.db),
                "--token-file",
                str(token_file),
            ]
            + [
                "--port",
                str(self.port),
                "--resp-port",
                str(self.resp_port),
                "--kafka-port",
                str(self.kafka_port),
            ]
            + ["--workers", "1", "--clean-interval", "0", *args],
            stdout=self.log,
            stderr=self.log,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{self.url}/healthz", timeout=1).raise_for_status()
                with socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1):
                    break
            except (OSError, httpx.HTTPError):
                assert time.monotonic() < deadline and self.proc.poll() is None, "tidelog serve did not start"
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def http(
        self, token: str, method: str = "GET", path: str = "/v1/topics", source: str = "127.0.0.1", **kw
    ) -> httpx.Response:
        """A request from `source` (another loopback address is another client to the throttle)."""
        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(transport=transport, timeout=10) as client:
            return client.request(method, self.url + path, headers={"Authorization": f"Bearer {token}"}, **kw)

    def redis_auth(self, password: str) -> str:
        """AUTH on a fresh connection, by hand: the reply line without its type byte."""
        with socket.create_connection(("127.0.0.1", self.resp_port), timeout=10) as sock:
            word = password.encode()
            sock.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(word), word))
            reply = sock.makefile("rb").readline()
        return reply[1:].rstrip(b"\r\n").decode()

    def sasl(self, password: str) -> tuple[int, str | None]:
        """SaslHandshake v1 then SaslAuthenticate v2 with PLAIN, on a fresh connection."""
        with KafkaWire("127.0.0.1", self.kafka_port) as wire:
            assert wire.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            answer = wire.call(36, 2, {"auth_bytes": b"\0user\0" + password.encode()})
            return int(answer.error_code), answer.error_message

    def metric(self, front: str, outcome: str) -> float:
        text = self.http(TOKEN, path="/metrics", source=ELSEWHERE).text
        line = f'tidelog_auth_refusals_total{{front="{front}",outcome="{outcome}"}} '
        found = [float(row.split()[-1]) for row in text.splitlines() if row.startswith(line)]
        return found[0] if found else 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self.log.close()


@pytest.fixture
def served(tmp_path):
    # A first wait long enough that a loaded machine's slowness between two tries never
    # outlasts it: the test sees the wait, not a race with it (the clock's own test is above).
    server = Served(tmp_path, "--auth-free-failures", "10", "--auth-wait", "30", "--auth-max-wait", "60")
    yield server
    server.stop()


def test_wrong_tokens_on_one_front_hold_the_address_back_on_every_front(served, tried):
    # A login that never failed is answered at once, on every front.
    assert served.http(TOKEN).status_code == 200
    assert served.redis_auth(TOKEN) == "OK"
    assert served.sasl(TOKEN) == (0, None)
    # Ten wrong SASL passwords are answered as Kafka answers them; the address then waits.
    for _ in range(10):
        assert served.sasl("guess")[0] == 58  # SASL_AUTHENTICATION_FAILED
    before = dump(str(served.db))
    held = served.http(TOKEN, "POST", "/v1/topics/orders/records", json={"records": [{"value": 1}]})
    assert held.status_code == 429, held.text
    assert "too many failed authentications from this address" in held.json()["error"]["message"]
    assert 1 <= int(held.headers["retry-after"]) <= 60
    assert served.redis_auth(TOKEN).startswith("ERR too many failed authentications from this address")
    code, message = served.sasl(TOKEN)
    assert code == 58 and "too many failed authentications" in (message or "")
    assert dump(str(served.db)) == before  # a refused try writes nothing
    assert served.http("wrong").status_code == 429  # a wrong one is refused unread too
    assert served.metric("kafka", "failed") == 10
    assert served.metric("http", "failed") == 0
    assert served.metric("http", "throttled") == 2  # the POST and the wrong token
    assert served.http(TOKEN, source=ELSEWHERE).status_code == 200  # another address is not held back
    assert served.metric("resp", "throttled") == 1 and served.metric("kafka", "throttled") == 1
    tried(wrong_sasl=10, fronts=3)


def test_a_flood_of_wrong_redis_auths_is_held_back(served, tried):
    answers = [served.redis_auth(f"guess-{i}") for i in range(40)]
    wrong = [a for a in answers if a.startswith("WRONGPASS")]
    held = [a for a in answers if a.startswith("ERR too many failed authentications")]
    assert (len(wrong), len(held)) == (10, 30)  # ten free, then refused unread while it waits
    tried(auths=40)
