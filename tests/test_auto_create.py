"""The one topic policy on every front and store: the CLI, the HTTP routes
(/api, /publish, /v1, /v1/queues, the WebSocket), the Redis protocol, and
`tidelog serve` as a real process. A write creates a missing topic when
auto-create is on (the default); reads never do; with it off a write is the
same 404 / UnknownTopic as ever and writes nothing. (The Python API is in
conformance/test_auto_create.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import tidelog
from conformance.conftest import STORE_KINDS
from tidelog.cli.app import cli
from tidelog.server.http.thread import free_port

SERVED_STORES = ["sqlite", "postgres"]  # what a server runs on (the http:// store is its client)


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    gen = STORE_KINDS[request.param](tmp_path)
    got = next(gen)
    yield got[0] if isinstance(got, tuple) else got
    gen.close()


def topic_names(url: str) -> list[str]:
    with tidelog.open(url) as log:
        return sorted(t.name for t in log.topics())


# --- the CLI ------------------------------------------------------------------------


@pytest.mark.parametrize("store_url", sorted(STORE_KINDS), indirect=True)
def test_cli_produce_creates_and_the_setting_turns_it_off(store_url):
    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None) -> Any:
        return runner.invoke(cli, ["--db", store_url, *args], env=env, catch_exceptions=False)

    made = run("--default-partitions", "3", "produce", "made", "--data", "1", "--json")
    assert made.exit_code == 0, made.output
    with tidelog.open(store_url) as log:
        assert log.topic("made").partitions == 3
    after_command = run("produce", "made2", "--data", "1", "--default-partitions", "2")
    assert after_command.exit_code == 0, after_command.output
    for refused in (
        run("--no-auto-create", "produce", "off", "--data", "1"),
        run("produce", "off", "--data", "1", "--no-auto-create"),
        run("produce", "off", "--data", "1", env={"TIDELOG_AUTO_CREATE": "0"}),
    ):
        assert refused.exit_code == 1
        assert (
            "topic 'off' does not exist" in refused.output and "tidelog topics create off" in refused.output
        )
    for read in (
        run("consume", "never", "--group", "g"),
        run("read", "never", "--partition", "0"),
        run("topics", "describe", "never"),
    ):
        assert read.exit_code == 1 and "topic 'never' does not exist" in read.output
    assert topic_names(store_url) == ["made", "made2"]
    with tidelog.open(store_url) as log:
        assert log.topic("made2").partitions == 2


# --- HTTP ---------------------------------------------------------------------------


@pytest.fixture
def served(store_url, serve):
    """serve(**options) over the test's store, and an httpx client on it."""
    clients = []

    def start(**options: Any) -> tuple[Any, httpx.Client]:
        server = serve(store_url, **options)
        client = httpx.Client(base_url=server.url)
        clients.append(client)
        return server, client

    yield start
    for client in clients:
        client.close()


@pytest.mark.parametrize("store_url", SERVED_STORES, indirect=True)
def test_every_http_produce_route_creates_a_missing_topic(served, store_url):
    server, http = served(default_partitions=2)
    assert http.post("/v1/topics/v1/records", json={"records": [{"value": 1}]}).status_code == 200
    assert http.post(
        "/v1/records", json={"batches": [{"topic": "batch", "records": [{"value": 1}]}]}
    ).is_success
    assert http.post("/publish/raw", content=b"bytes").status_code == 201
    assert http.post("/api/topics/api/publish", json={"payload": {"n": 1}}).status_code == 201
    assert http.post("/v1/queues/jobs/messages", json={"records": [{"value": "work"}]}).is_success
    with tidelog.open(store_url) as log:
        shapes = {t.name: t.partitions for t in log.topics()}
        assert shapes == {"v1": 2, "batch": 2, "raw": 2, "api": 1, "jobs": 2}  # /api: one-partition topics
        assert log.read("api", 0)[0].data == {"n": 1}
        assert log.describe("jobs").records == 1
    # The queue send opened its group: a receive hands the record out.
    got = http.post("/v1/queues/jobs/receive").json()["messages"]
    assert [m["value"] for m in got] == ["work"]


@pytest.mark.parametrize("store_url", SERVED_STORES, indirect=True)
def test_http_reads_answer_404_and_create_nothing(served, store_url):
    server, http = served()
    reads = [
        http.get("/v1/topics/never"),
        http.get("/v1/topics/never/partitions/0/records"),
        http.get("/v1/topics/never/stream?group=g"),
        http.get("/v1/groups/g/topics/never/records"),
        http.get("/api/topics/never/pull?group=g"),
        http.post("/v1/queues/never/receive"),
        http.get("/v1/queues/never/stats"),
        http.post("/v1/groups/g/join", json={"topics": ["never"]}),
    ]
    for response in reads:
        assert response.status_code == 404, (response.request.url, response.text)
        assert response.json()["error"]["code"] == "unknown_topic"
    assert "does not exist" in asyncio.run(ws_refusal(server, "never"))
    assert topic_names(store_url) == []


@pytest.mark.parametrize("store_url", SERVED_STORES, indirect=True)
def test_http_with_auto_create_off_refuses_every_produce_and_writes_nothing(served, store_url):
    server, http = served(auto_create=False)
    produces = [
        http.post("/v1/topics/off/records", json={"records": [{"value": 1}]}),
        http.post("/v1/records", json={"batches": [{"topic": "off", "records": [{"value": 1}]}]}),
        http.post("/publish/off", content=b"bytes"),
        http.post("/api/topics/off/publish", json={"payload": 1}),
        http.post("/v1/queues/off/messages", json={"records": [{"value": 1}]}),
    ]
    for response in produces:
        assert response.status_code == 404, (response.request.url, response.text)
        assert response.json()["error"]["code"] == "unknown_topic"
    assert topic_names(store_url) == []
    # An explicit create still works, and then so does producing.
    assert http.post("/v1/topics", json={"name": "off"}).status_code == 201
    assert http.post("/publish/off", content=b"bytes").status_code == 201


@pytest.mark.parametrize("store_url", SERVED_STORES, indirect=True)
def test_http_refused_produce_creates_no_topic(served, store_url):
    server, http = served()
    refused = [
        (http.post("/v1/topics/new/records", json={"records": [{"value": 1, "partition": 1}]}), 404),
        (http.post("/v1/topics/new/records", json={"records": [{"value": "x" * (2 << 20)}]}), 413),
        (http.post("/v1/topics/bad%20name/records", json={"records": [{"value": 1}]}), 400),
        (http.post("/publish/new?partition=3", content=b"x"), 404),
        (http.post("/api/topics/new/publish", json={"nopayload": 1}), 400),
        (http.post("/v1/queues/new/messages", json={"records": [{"value": "x" * (2 << 20)}]}), 413),
    ]
    for response, status in refused:
        assert response.status_code == status, (response.request.url, response.text)
    assert topic_names(store_url) == []


async def ws_refusal(server: Any, topic: str) -> str:
    import websockets

    url = server.url.replace("http://", "ws://") + f"/subscribe/{topic}"
    async with websockets.connect(url) as ws:
        await ws.send("INIT")
        return str(json.loads(await asyncio.wait_for(ws.recv(), 10))["error"])


# --- the Redis protocol ---------------------------------------------------------------


@pytest.mark.parametrize("store_url", SERVED_STORES, indirect=True)
@pytest.mark.parametrize("auto_create", [True, False])
def test_resp_xadd_follows_the_policy_and_reads_create_nothing(store_url, auto_create):
    redis = pytest.importorskip("redis")
    from test_resp import ServerThread

    server = ServerThread(store_url)
    # The front serves the log it is given: give it one with the policy under test.
    server.log.catalog.auto_create = auto_create
    server.log.catalog.default_partitions = 3
    try:
        with server.client(decode_responses=True) as r:
            assert r.xrange("never") == []
            assert r.xread({"never": "0"}, block=None) in ([], {})
            with pytest.raises(redis.ResponseError, match="requires the key to exist"):
                r.xgroup_create("never", "g", id="0")
            if auto_create:
                assert r.xadd("made", {"value": "v"}).endswith("-1")
            else:
                with pytest.raises(redis.ResponseError, match="'made' does not exist"):
                    r.xadd("made", {"value": "v"})
        with tidelog.open(store_url) as log:
            assert {t.name: t.partitions for t in log.topics()} == ({"made": 1} if auto_create else {})
    finally:
        server.close()


# --- `tidelog serve` as a process ---------------------------------------------------------


@pytest.mark.parametrize("how", ["flag", "env"])
def test_tidelog_serve_no_auto_create(tmp_path, how):
    redis = pytest.importorskip("redis")
    port, resp_port = free_port(), free_port()
    argv = [sys.executable, "-m", "tidelog.cli", "--db", str(tmp_path / "t.db"), "serve"]
    argv += ["--port", str(port), "--resp-port", str(resp_port), "--clean-interval", "0"]
    env = dict(os.environ)
    if how == "flag":
        argv.append("--no-auto-create")
    else:
        env["TIDELOG_AUTO_CREATE"] = "false"
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 20
        while True:
            try:
                http.get("/healthz")
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(
                        f"tidelog serve did not start: {proc.stderr.read()[-2000:] if proc.stderr else ''}"
                    )
                time.sleep(0.05)
        assert http.post("/publish/off", content=b"x").status_code == 404
        with redis.Redis(port=resp_port) as r, pytest.raises(redis.ResponseError, match="does not exist"):
            r.xadd("off", {"value": "v"})
        assert http.get("/v1/topics").json()["topics"] == []
        http.close()
    finally:
        proc.terminate()
        proc.wait(20)
        if proc.stderr:
            proc.stderr.close()
