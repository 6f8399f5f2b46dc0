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
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.server import rundir
from tidelog.server.http.thread import free_port
from workers_server import children, port_of, socket_inodes, start, stop, tcp_rows

redis = pytest.importorskip("redis")
pytest.importorskip("hiredis")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers share a port on Linux")

PIN_TIMEOUT_S = 20  # how long connections are tried to land one on a given worker
PIN_BURST = 8  # made at once, so that both workers accept some
RESTART_TIMEOUT_S = 20


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
    def __init__(
        self, proc: subprocess.Popen, port: int, resp_port: int, workers: list[int], errors: Any, tmp: Path
    ):
        self.proc, self.port, self.resp_port, self.workers = proc, port, resp_port, workers
        self.errors, self.tmp = errors, tmp  # its stderr; its TMPDIR, where its runtime directory is

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read()

    def runtime_dirs(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir() if p.name.startswith("tidelog-serve-"))

    def replacement(self, dead: int) -> int:
        """The worker the supervisor started in place of `dead`."""
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while time.monotonic() < deadline:
            fresh = set(children(self.proc.pid)) - set(self.workers)
            if fresh:
                (new,) = fresh
                self.workers = [new if w == dead else w for w in self.workers]
                return new
            assert self.proc.poll() is None, f"the supervisor stopped: {self.stderr()[-2000:]}"
            time.sleep(0.05)
        pytest.fail(f"worker {dead} was not replaced in {RESTART_TIMEOUT_S} s: {self.stderr()[-2000:]}")

    def _pin(
        self, worker: int, port: int, connect: Callable[[], Any], local_port: Callable[[Any], int]
    ) -> Any:
        # The workers accept from one shared socket: on a quiet machine the worker the
        # kernel wakes first takes a lone connection every time, so connections are made
        # in bursts, which both workers race to accept, and the one `worker` took is kept;
        # for a while, as a worker just restarted accepts only once it has started.
        deadline = time.monotonic() + PIN_TIMEOUT_S
        while time.monotonic() < deadline:
            burst = [connect() for _ in range(PIN_BURST)]
            kept = None
            for conn in burst:
                holder = None
                for _ in range(100):  # the accept may lag the connect by a moment
                    holder = serving_worker(self.workers, port, local_port(conn))
                    if holder is not None:
                        break
                    time.sleep(0.01)
                if holder == worker and kept is None:
                    kept = conn
                else:
                    conn.close()
            if kept is not None:
                return kept
        pytest.fail(f"no connection landed on worker {worker} in {PIN_TIMEOUT_S} s")

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


def serve_workers(tmp_path: Path, tmp: Path, *extra: str) -> Served:
    port, resp_port = free_port(), free_port()
    argv = ["serve", "--db", str(tmp_path / "t.db"), "--port", str(port), "--resp-port", str(resp_port)]
    proc, workers, errors = start([*argv, *extra], 2, [port, resp_port], env={"TMPDIR": str(tmp)})
    return Served(proc, port, resp_port, workers, errors, tmp)


@pytest.fixture
def served(tmp_path, server_tmp) -> Iterator[Served]:
    served = serve_workers(tmp_path, server_tmp, "--clean-interval", "0.2")
    yield served
    stop(served.proc, served.errors)


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

    def anonymous(conn: http.client.HTTPConnection) -> float:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        return float(
            next(
                x for x in text.splitlines() if x.startswith('tidelog_memory_bytes{kind="anonymous"}')
            ).split()[-1]
        )

    # The memory gauge sums the supervisor and every worker, whichever answers.
    own = [_anonymous_of(pid) for pid in [served.proc.pid, *served.workers]]
    assert all(own)
    assert anonymous(a) >= 0.9 * sum(own) and anonymous(b) >= 0.9 * sum(own)


def _anonymous_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))


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


def test_the_workers_stop_and_clean_up_when_the_supervisor_is_killed(served):
    (made,) = served.runtime_dirs()
    assert rundir.owner(made) == served.proc.pid
    served.proc.kill()  # SIGKILL: no handler runs, the workers hear of it from the kernel
    served.proc.wait()
    deadline = time.monotonic() + 15
    while any(os.path.exists(f"/proc/{w}") and not zombie(w) for w in served.workers):
        assert time.monotonic() < deadline, "a worker kept running after its supervisor died"
        time.sleep(0.05)
    # What the supervisor had no time to remove, its workers did: the members' socket, the metrics.
    assert served.runtime_dirs() == []


@pytest.mark.parametrize("index", [0, 1], ids=["member-home", "second"])
def test_a_killed_worker_is_restarted_on_the_same_ports(served, index):
    a, b = served.http_on(served.workers[0]), served.http_on(served.workers[1])
    assert call(a, "POST", "/v1/topics", {"name": "orders", "partitions": 1})[0] == 201
    status, joined = call(b, "POST", "/v1/groups/billing/join", {"topics": ["orders"], "start": "earliest"})
    assert status == 200
    member = joined["member_id"]
    victim = served.workers[index]
    survivor = (a, b)[1 - index]

    os.kill(victim, signal.SIGKILL)
    new = served.replacement(victim)
    assert f"worker {index} (pid {victim}) was killed by SIGKILL; restarting it in" in served.stderr()
    assert served.proc.poll() is None
    # The survivor served on meanwhile, and the new worker serves both fronts on the same ports.
    assert call(survivor, "POST", "/publish/orders", b"during")[0] == 201
    fresh = served.http_on(new)
    assert call(fresh, "POST", "/publish/orders", b"after")[0] == 201
    redis_client = served.redis_on(new)
    assert redis_client.xadd("orders", {"value": "via redis"}).endswith("-3")  # its offset
    redis_client.close()
    poll = {"member_id": member, "max_messages": 10}
    if index == 0:
        # The members' home restarted empty: the member is told to join again, as a
        # Kafka client is after a coordinator restart, and its rejoin is served.
        for conn in (fresh, survivor):
            status, answer = call(conn, "POST", "/v1/groups/billing/poll", poll)
            assert (status, answer["error"]["code"]) == (409, "stale_generation")
            assert "join again" in answer["error"]["message"]
        again = {
            "topics": ["orders"],
            "start": "earliest",
            "member_id": member,
        }  # its partitions back at once
        status, joined = call(survivor, "POST", "/v1/groups/billing/join", again)
        assert status == 200 and joined["assignment"] == [["orders", 0]]
    status, polled = call(fresh, "POST", "/v1/groups/billing/poll", poll)
    assert status == 200 and [r["offset"] for r in polled["records"]] == [1, 2, 3]
    for conn in (a, b, fresh):
        conn.close()


def test_a_crash_loop_stops_the_server_and_says_so(tmp_path, server_tmp):
    served = serve_workers(tmp_path, server_tmp, "--max-restarts", "1", "--restart-window", "60")
    try:
        first = served.workers[1]
        os.kill(first, signal.SIGKILL)
        second = served.replacement(first)
        os.kill(second, signal.SIGKILL)  # its second death in 60 s: one more than allowed
        assert served.proc.wait(30) == 1
        lines = served.stderr().strip().splitlines()
        assert re.fullmatch(
            r"Error: worker 1 was killed by SIGKILL, its death 2 in [0-9.]+ s \(the limit is 1 restarts in 60 s\): "
            r"a crash loop, so the server stopped; its errors are logged above",
            lines[-1],
        ), lines[-3:]
        assert not any(os.path.exists(f"/proc/{w}") and not zombie(w) for w in served.workers)
        assert served.runtime_dirs() == []
    finally:
        stop(served.proc, served.errors)


def test_a_new_runtime_directory_sweeps_those_of_dead_supervisors(server_tmp, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(server_tmp))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = server_tmp / f"{rundir.PREFIX}{dead.pid}-x1"  # a supervisor SIGKILLed with all its workers
    (left / "metrics").mkdir(parents=True)
    (left / "members.sock").touch()
    live = server_tmp / f"{rundir.PREFIX}{os.getpid()}-x2"  # a running server's
    live.mkdir()
    other = server_tmp / f"{rundir.PREFIX}notapid"
    other.mkdir()
    made = rundir.make()
    try:
        assert sorted(p.name for p in server_tmp.iterdir()) == sorted(
            [live.name, other.name, os.path.basename(made)]
        )
        assert rundir.owner(made) == os.getpid() and os.stat(made).st_mode & 0o777 == 0o700
    finally:
        rundir.remove(made)


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


def post_form(conn: http.client.HTTPConnection, path: str, fields: dict[str, str], cookie: str = "") -> Any:
    headers = {"content-type": "application/x-www-form-urlencoded", "cookie": cookie}
    headers["origin"] = f"http://{conn.host}:{conn.port}"
    conn.request("POST", path, body=urllib.parse.urlencode(fields), headers=headers)
    answer = conn.getresponse()
    answer.read()
    return answer


def get_page(conn: http.client.HTTPConnection, path: str, cookie: str) -> tuple[int, str]:
    conn.request("GET", path, headers={"cookie": cookie})
    answer = conn.getresponse()
    return answer.status, answer.read().decode()


def test_the_console_is_served_by_the_home_whichever_worker_a_request_lands_on(tmp_path, server_tmp):
    served = serve_workers(tmp_path, server_tmp, "--token", "t0k")
    try:
        a, b = served.http_on(served.workers[0]), served.http_on(served.workers[1])
        login = post_form(b, "/console/login", {"token": "t0k"})  # through the second worker
        assert login.status == 303
        cookie = login.getheader("set-cookie").split(";")[0]
        status, html = get_page(a, "/console/", cookie)  # the session is known through the first too
        assert status == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
        assert post_form(b, "/console/logout", {"csrf": csrf}, cookie).status == 303
        assert get_page(a, "/console/", cookie)[0] == 303  # ended for both
        # Wrong tokens through both workers count in one throttle, against the client's address.
        statuses = [post_form((a, b)[i % 2], "/console/login", {"token": "wrong"}).status for i in range(12)]
        assert statuses == [401] * 10 + [429] * 2
        a.close()
        b.close()
    finally:
        stop(served.proc, served.errors)
