"""`tidelog serve --workers 2` as a real process: two server processes on one
port and one SQLite file.

The kernel spreads connections over the workers (SO_REUSEPORT), so each test
pins its connections to a chosen worker: it connects until /proc says which
worker holds the server side of the connection. What one worker writes must
wake and be served by the other: long-polls, queue receives, blocking XREADs.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidelog.server.http.thread import free_port
from workers_server import port_of, socket_inodes, start, stop, tcp_rows

redis = pytest.importorskip("redis")
pytest.importorskip("hiredis")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers share a port on Linux")

PIN_ATTEMPTS = 64  # connections tried to land one on a given worker (each lands there about half the time)


def serving_worker(workers: list[int], server_port: int, client_port: int) -> int | None:
    """The worker holding the server side of the connection from `client_port`."""
    inode = next(
        (r[9] for r in tcp_rows() if port_of(r[1]) == server_port and port_of(r[2]) == client_port),
        None,
    )
    if inode is None:
        return None
    return next((w for w in workers if inode in socket_inodes(w)), None)


class Served:
    def __init__(self, proc: subprocess.Popen, port: int, resp_port: int, workers: list[int]):
        self.proc, self.port, self.resp_port, self.workers = proc, port, resp_port, workers

    def _pin(
        self, worker: int, port: int, connect: Callable[[], Any], local_port: Callable[[Any], int]
    ) -> Any:
        for _ in range(PIN_ATTEMPTS):
            conn = connect()
            holder = None
            for _ in range(100):  # the accept may lag the connect by a moment
                holder = serving_worker(self.workers, port, local_port(conn))
                if holder is not None:
                    break
                time.sleep(0.01)
            if holder == worker:
                return conn
            conn.close()
        pytest.fail(f"no connection landed on worker {worker} in {PIN_ATTEMPTS} tries")

    def http_on(self, worker: int) -> http.client.HTTPConnection:
        """A keep-alive HTTP connection served by `worker`."""

        def connect() -> http.client.HTTPConnection:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.connect()
            return conn

        return self._pin(worker, self.port, connect, lambda c: c.sock.getsockname()[1])

    def redis_on(self, worker: int) -> Any:
        """A redis-py client whose one connection is served by `worker`."""

        def connect() -> Any:
            client = redis.Redis(port=self.resp_port, single_connection_client=True, decode_responses=True)
            client.ping()
            return client

        return self._pin(worker, self.resp_port, connect, lambda c: c.connection._sock.getsockname()[1])


def call(conn: http.client.HTTPConnection, method: str, path: str, body: object = None) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=raw, headers={"content-type": "application/json"})
    answer = conn.getresponse()
    return answer.status, json.loads(answer.read() or b"null")


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    port, resp_port = free_port(), free_port()
    argv = ["serve", "--db", str(tmp_path / "t.db"), "--port", str(port), "--resp-port", str(resp_port)]
    proc, workers, errors = start(argv + ["--clean-interval", "0.2"], 2, [port, resp_port])
    yield Served(proc, port, resp_port, workers)
    stop(proc, errors)


def test_publishes_through_both_workers_get_dense_offsets_and_wake_the_other(served):
    a, b = served.http_on(served.workers[0]), served.http_on(served.workers[1])
    assert call(a, "POST", "/publish/orders", b"first")[0] == 201  # makes the topic

    # A long-poll on worker 0 is woken by a publish on worker 1, and the other way round.
    for waiter, writer, value in ((a, b, b"from b"), (b, a, b"from a")):
        answer: dict[str, Any] = {}
        last = call(writer, "GET", "/v1/topics/orders/partitions/0/records?after=0&limit=1000")[1]["records"][
            -1
        ]

        def poll(waiter=waiter, after=last["offset"], answer=answer) -> None:
            answer.update(
                call(waiter, "GET", f"/v1/topics/orders/partitions/0/records?after={after}&wait=20")[1]
            )

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.3)  # the long-poll is waiting (were it not, it would answer at once: the same holds)
        status, sent = call(writer, "POST", "/publish/orders", value)
        assert status == 201
        thread.join(25)
        assert not thread.is_alive()
        assert [r["offset"] for r in answer["records"]] == [sent["offset"]]

    # Both workers publishing at once: every offset acknowledged once, none skipped.
    offsets: list[int] = []

    def publish(conn: http.client.HTTPConnection, name: str) -> None:
        for i in range(40):
            status, sent = call(conn, "POST", "/publish/orders", f"{name}{i}".encode())
            assert status == 201
            offsets.append(sent["offset"])

    threads = [threading.Thread(target=publish, args=(c, n)) for c, n in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(offsets) == list(range(4, 84))
    a.close()
    b.close()

    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(15) == 0
    assert not any(os.path.exists(f"/proc/{w}") for w in served.workers)  # stopped and reaped


def test_queue_members_on_both_workers_share_the_records_one_lease_each(served):
    a, b = served.http_on(served.workers[0]), served.http_on(served.workers[1])
    records = [{"value": i} for i in range(60)]
    assert call(a, "POST", "/v1/topics/jobs/records", {"records": records})[0] in (200, 201)
    got: dict[str, list[int]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def consume(conn: http.client.HTTPConnection, name: str) -> None:
        start.wait(10)  # both members receiving from the first record on
        while True:
            status, answer = call(
                conn, "POST", "/v1/queues/jobs/receive?max=3&wait=0.5&visibility_timeout=60"
            )
            assert status == 200
            if not answer["messages"]:
                return
            for message in answer["messages"]:
                got[name].append(message["offset"])
                assert call(conn, "POST", "/v1/queues/jobs/ack", {"receipt": message["receipt"]})[0] == 200

    threads = [threading.Thread(target=consume, args=(c, n)) for c, n in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Each record leased to one member once (a 60 s lease never expires here), none lost,
    # and both workers served some.
    assert sorted(got["a"] + got["b"]) == list(range(1, 61))
    assert got["a"] and got["b"]


def test_a_stream_group_member_is_served_whichever_worker_its_request_lands_on(served):
    # The handle lives in the first worker; the second forwards member routes to it (home.py).
    a, b = served.http_on(served.workers[0]), served.http_on(served.workers[1])
    assert call(a, "POST", "/v1/topics", {"name": "orders", "partitions": 2})[0] == 201
    records = [{"value": i, "partition": i % 2} for i in range(20)]
    assert call(a, "POST", "/v1/topics/orders/records", {"records": records})[0] in (200, 201)
    status, joined = call(b, "POST", "/v1/groups/billing/join", {"topics": ["orders"]})
    assert status == 200 and sorted(map(tuple, joined["assignment"])) == [("orders", 0), ("orders", 1)]
    member = joined["member_id"]
    got: list[int] = []
    for i in range(8):  # alternating workers: the positions move on across both
        status, polled = call(
            (a, b)[i % 2], "POST", "/v1/groups/billing/poll", {"member_id": member, "max_messages": 3}
        )
        assert status == 200 and polled["generation"] == joined["generation"]
        got += [r["value"] for r in polled["records"]]
    assert sorted(got) == list(range(20))  # every record once: no poll started over
    assert call(b, "POST", "/v1/groups/billing/commit", {"member_id": member})[0] == 200
    status, offsets = call(a, "GET", "/v1/groups/billing/offsets")
    assert status == 200 and sorted(o["committed"] for o in offsets["offsets"]) == [10, 10]
    assert call(a, "POST", "/v1/groups/billing/heartbeat", {"member_id": member})[0] == 200
    assert call(b, "POST", "/v1/groups/billing/leave", {"member_id": member}) == (
        200,
        {"group": "billing", "member_id": member, "left": True},
    )
    # Gone from the home, whichever worker asks.
    for conn in (a, b):
        status, answer = call(conn, "POST", "/v1/groups/billing/poll", {"member_id": member})
        assert status == 409 and answer["error"]["code"] == "stale_generation"
    # A bad body is refused by the home as by a lone server, through either worker.
    for conn in (a, b):
        status, answer = call(conn, "POST", "/v1/groups/billing/join", {"topics": []})
        assert status == 400 and answer["error"]["code"] == "invalid_request"


def test_metrics_count_every_workers_requests_whichever_answers_the_scrape(served):
    a, b = served.http_on(served.workers[0]), served.http_on(served.workers[1])
    for conn, n in ((a, 3), (b, 4)):
        for _ in range(n):
            assert call(conn, "POST", "/publish/counted", b"x")[0] == 201

    def appended(conn: http.client.HTTPConnection) -> float:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        line = next(
            x for x in text.splitlines() if x.startswith('tidelog_records_appended_total{topic="counted"}')
        )
        return float(line.split()[-1])

    assert appended(a) == appended(b) == 7


def test_xread_on_one_worker_wakes_on_xadd_through_the_other(served):
    reader, writer = served.redis_on(served.workers[0]), served.redis_on(served.workers[1])
    first = writer.xadd("events", {"value": "one"})
    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.extend(reader.xread({"events": first}, block=20_000)))
    thread.start()
    time.sleep(0.3)
    second = writer.xadd("events", {"value": "two"})
    thread.join(25)
    assert not thread.is_alive()
    ((stream, entries),) = answer
    assert stream == "events"
    assert [(entry, dict(fields)) for entry, fields in entries] == [(second, {"value": "two"})]
    # Both workers see the same stream, in order.
    assert [entry for entry, _ in reader.xrange("events")] == [first, second]
    reader.close()
    writer.close()


def test_workers_need_a_store_they_can_share(tmp_path):
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", ":memory:", "--workers", "2"]
    argv += ["--port", str(free_port()), "--resp-port", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "several workers need a store they can share" in done.stderr


def test_the_workers_stop_when_the_supervisor_is_killed(served):
    served.proc.kill()  # SIGKILL: no handler runs, the workers hear of it from the kernel
    served.proc.wait()
    deadline = time.monotonic() + 15
    while any(os.path.exists(f"/proc/{w}") and not zombie(w) for w in served.workers):
        assert time.monotonic() < deadline, "a worker kept running after its supervisor died"
        time.sleep(0.05)


def zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("size", ["0", "-5", "12parsecs"])
def test_a_body_limit_that_is_no_size_is_refused(tmp_path, size):
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", str(tmp_path / "t.db"), "--max-body", size]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "Invalid value for '--max-body'" in done.stderr
    assert not (tmp_path / "t.db").exists()
