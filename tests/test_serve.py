"""`tidelog serve` as a real process: HTTP and the Redis protocol on one log,
the background cleaner, and a clean stop on SIGTERM."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tidelog.server.http.thread import free_port

redis = pytest.importorskip("redis")
pytest.importorskip("hiredis")
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

START_TIMEOUT_S = 20


@pytest.fixture
def served(tmp_path):
    port, resp_port = free_port(), free_port()
    env = {**os.environ, "TIDELOG_TOKEN": "s3cret"}
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", str(tmp_path / "t.db")]
    argv += ["--port", str(port), "--resp-port", str(resp_port), "--clean-interval", "0.2"]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer s3cret"})
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            http.get("/healthz")
            with redis.Redis(port=resp_port, password="s3cret") as probe:
                probe.ping()
            break
        except (httpx.HTTPError, redis.ConnectionError):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"tidelog serve did not start: {proc.stderr.read()[-2000:]}")
            time.sleep(0.05)
    yield proc, http, resp_port
    http.close()
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    proc.stderr.close()


def test_http_and_redis_on_one_log(served):
    proc, http, resp_port = served
    no_retry = Retry(NoBackoff(), 0)  # redis-py retries for seconds by default
    r = redis.Redis(port=resp_port, password="s3cret", decode_responses=True, retry=no_retry)
    entry = r.xadd("orders", {"value": "from redis"})
    assert entry.endswith("-1")
    (record,) = http.get("/v1/topics/orders/partitions/0/records").json()["records"]
    assert (record["format"], base64.b64decode(record["value"]), record["offset"]) == (
        "bytes",
        b"from redis",
        1,
    )
    http.post("/v1/topics/orders/records", json={"records": [{"value": "from http", "format": "text"}]})
    assert [fields["value"] for _, fields in r.xrange("orders")] == ["from redis", "from http"]
    # The token guards both fronts.
    with (
        pytest.raises(redis.AuthenticationError),
        redis.Redis(port=resp_port, password="wrong", retry=no_retry) as wrong,
    ):
        wrong.ping()
    assert httpx.get(str(http.base_url.join("/v1/topics"))).status_code == 401

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    with pytest.raises(redis.ConnectionError):
        r.ping()
    r.close()


def test_the_background_cleaner_applies_retention(served):
    _, http, _ = served
    http.post("/v1/topics", json={"name": "short", "config": {"retention_ms": "300ms"}})
    http.post("/v1/topics/short/records", json={"records": [{"value": i} for i in range(5)]})
    deadline = time.monotonic() + 15
    while (desc := http.get("/v1/topics/short").json())["records"] and time.monotonic() < deadline:
        time.sleep(0.1)
    # Nobody asked: the cleaner in `tidelog serve` removed them, offsets kept.
    assert desc["records"] == 0
    assert desc["offsets"][0]["first_offset"] == 6
    assert desc["last_clean"] is not None


def test_tune_gc_freezes_the_start_up_heap_and_raises_the_first_threshold():
    # In a fresh interpreter: freezing is process-wide and would leak into the test session.
    code = (
        "import gc, tidelog.server.http.run as run; "
        "before = gc.get_freeze_count(); run.tune_gc(); "
        "print(before, gc.get_freeze_count(), *gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, frozen, gen0, gen1, gen2 = map(int, out.split())
    from tidelog.server.http.run import GC_GEN0_THRESHOLD

    assert before == 0 and frozen > 1000  # the imported modules' objects, at least
    assert (gen0, gen1, gen2) == (GC_GEN0_THRESHOLD, 10, 10)


# One server a port --------------------------------------------------------------------------------

REFUSAL = "Error: cannot serve {serves} on 127.0.0.1:{port}: port {port} is in use by another program; stop it or choose another {flag}"
REFUSE_TIMEOUT_S = 30  # a refused serve ends within this; one that started serving is stopped after it


def second_serve(tmp_path, port: int, resp_port: int, workers: int) -> tuple[int | None, str]:
    """`tidelog serve` on the given ports: (its exit code, or None if it was still serving; its stderr)."""
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", str(tmp_path / "second.db")]
    argv += ["--port", str(port), "--resp-port", str(resp_port), "--workers", str(workers)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        code: int | None = proc.wait(REFUSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return code, proc.communicate()[1]


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A `tidelog serve --workers 2` holding its two ports, with one topic in its store."""
    from workers_server import start, stop

    where = tmp_path_factory.mktemp("first")
    port, resp_port = free_port(), free_port()
    argv = ["serve", "--db", str(where / "first.db"), "--port", str(port), "--resp-port", str(resp_port)]
    proc, _, errors = start(argv, 2, [port, resp_port])
    httpx.post(f"http://127.0.0.1:{port}/v1/topics", json={"name": "first-only"}, timeout=30)
    yield port, resp_port
    stop(proc, errors)


def answered_by_the_first(port: int, requests: int = 12) -> int:
    """How many of `requests` new connections were answered from the first server's store."""
    names = [
        [t["name"] for t in httpx.get(f"http://127.0.0.1:{port}/v1/topics", timeout=30).json()["topics"]]
        for _ in range(requests)
    ]
    return sum(n == ["first-only"] for n in names)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("flag", ["--port", "--resp-port"])
def test_a_second_serve_on_a_port_in_use_is_refused_before_it_makes_a_file(first, tmp_path, workers, flag):
    port, resp_port = first
    ports = {"--port": free_port(), "--resp-port": free_port()}
    ports[flag] = port if flag == "--port" else resp_port
    code, stderr = second_serve(tmp_path, ports["--port"], ports["--resp-port"], workers)
    serves = "HTTP" if flag == "--port" else "the Redis protocol"
    assert code == 1, f"the second server started serving: {stderr[-1500:]}"
    assert stderr.splitlines() == [REFUSAL.format(serves=serves, port=ports[flag], flag=flag)]
    assert list(tmp_path.iterdir()) == []  # no .db, no runtime directory
    assert answered_by_the_first(port) == 12


@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "so_reuseport"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_port_another_program_holds_is_refused_in_one_line(tmp_path, reuse_port, workers):
    # Another program's listener; with SO_REUSEPORT it is one a granian server would have shared.
    holder = socket.socket()
    if reuse_port:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        code, stderr = second_serve(tmp_path, port, free_port(), workers)
    finally:
        holder.close()
    assert code == 1, stderr[-1500:]
    assert stderr.splitlines() == [REFUSAL.format(serves="HTTP", port=port, flag="--port")]
    assert list(tmp_path.iterdir()) == []


def test_an_address_not_of_this_machine_is_refused_in_one_line(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "tidelog.cli",
        "serve",
        "--db",
        str(tmp_path / "t.db"),
        "--host",
        "192.0.2.1",
    ]
    done = subprocess.run(argv + ["--port", "7070"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "Error: cannot serve HTTP on 192.0.2.1:7070: 192.0.2.1 is not an address of this machine; choose another --host"
    ]
    assert list(tmp_path.iterdir()) == []


# The token from a file ----------------------------------------------------------------------------


def test_the_token_from_a_file_works_and_stays_out_of_the_process_list(tmp_path):
    token = "from-the-file-" + "x" * 20
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    port, resp_port = free_port(), free_port()
    env = {**os.environ, "TIDELOG_TOKEN": "exported-for-the-clients"}  # the file wins over it
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", str(tmp_path / "t.db"), "--workers", "1"]
    argv += ["--port", str(port), "--resp-port", str(resp_port), "--token-file", str(path)]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                httpx.get(base + "/healthz")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "tidelog serve did not start"
                time.sleep(0.05)
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert token.encode() not in f.read()
        assert httpx.get(base + "/v1/topics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert (
            httpx.get(
                base + "/v1/topics", headers={"Authorization": "Bearer exported-for-the-clients"}
            ).status_code
            == 401
        )
        with redis.Redis(port=resp_port, password=token) as r:
            assert r.ping()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        stderr = proc.stderr.read()
        proc.stderr.close()
    assert "process list" not in stderr and "can be read by other users" not in stderr


@pytest.mark.parametrize(
    "content, mode, message",
    [
        (None, 0o600, "cannot read"),
        ("", 0o600, "holds no token"),
        ("\n\nlater-lines-do-not-count\n", 0o600, "holds no token"),
        ("x" * 5000, 0o600, "is over 4096 bytes"),
        (b"\xff\xfe", 0o600, "is not UTF-8 text"),
    ],
    ids=["missing", "empty", "blank-first-line", "too-long", "not-text"],
)
def test_a_token_file_without_a_token_is_refused_before_anything(tmp_path, content, mode, message):
    path = tmp_path / "token"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        path.chmod(mode)
    argv = [
        sys.executable,
        "-m",
        "tidelog.cli",
        "serve",
        "--db",
        str(tmp_path / "t.db"),
        "--token-file",
        str(path),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "Invalid value for --token-file" in done.stderr and message in done.stderr
    assert not (tmp_path / "t.db").exists()


def test_a_token_given_twice_is_refused_and_a_readable_file_or_a_visible_token_warned(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(0o644)
    base = [sys.executable, "-m", "tidelog.cli", "serve", "--db", str(tmp_path / "t.db"), "--workers", "1"]
    twice = subprocess.run(
        [*base, "--token", "s3cret", "--token-file", str(path)], capture_output=True, text=True, timeout=30
    )
    assert twice.returncode == 2 and "give the token once: --token or --token-file" in twice.stderr
    for flags, warning in (
        (
            ["--token-file", str(path)],
            f"the token file {path} can be read by other users (mode 644): chmod 600 it",
        ),
        (
            ["--token", "s3cret"],
            "--token shows the token in the process list: prefer --token-file or TIDELOG_TOKEN",
        ),
    ):
        held = socket.socket()
        held.bind(("127.0.0.1", 0))
        held.listen()  # the port is taken: the server warns, then refuses it and ends
        port = held.getsockname()[1]
        try:
            done = subprocess.run(
                [*base, *flags, "--port", str(port), "--resp-port", "0"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        finally:
            held.close()
        assert done.returncode == 1 and warning in done.stderr, done.stderr
