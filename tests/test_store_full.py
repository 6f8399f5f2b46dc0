"""A full store, on every front: writes fail with a typed error (StoreFull,
the driver's error chained), each front says so its own way (HTTP 507 with
the error body, the CLI one line and exit 1, the Redis front -ERR), nothing
of a refused write is kept, and reads still work.

SQLite fills a real small filesystem: a 3 MB tmpfs the test mounts where it
may (root with CAP_SYS_ADMIN); everywhere, also a database held to its size
by `PRAGMA max_page_count` on the writer's connection, which SQLite reports
with the same "database or disk is full". PostgreSQL raises its own disk_full
(SQLSTATE 53100), from a trigger on the tables a write touches.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import tidelog
from conformance.conftest import snapshot
from pgschema import postgres_schema
from tidelog.cli.app import cli

FILL_SIZES = (16_000, 1_000, 50, 1)  # ever smaller records, until not even one byte fits


def fill(log: tidelog.Log) -> int:
    """Write until the store refuses every kind of write, even of one byte:
    records, topics, queue groups, committed offsets (each has its own
    table, and a size limit leaves room in some pages after others are
    full). Returns the records sent to "fill"."""
    producer = log.producer()
    pads = itertools.count()
    sent = 0

    def send(size: int) -> None:
        nonlocal sent
        producer.send("fill", b"x" * size)
        sent += 1

    kinds = [
        send,
        lambda size: log.create_topic(f"pad-{next(pads)}"),
        lambda size: log.queue("fill", f"pad-{next(pads)}"),
        lambda size: log.consumer(f"pad-{next(pads)}").commit("fill", 0, 1),
    ]
    for size in FILL_SIZES:
        wrote = True
        while wrote:
            wrote = False
            for kind in kinds:
                with contextlib.suppress(tidelog.StoreFull):
                    for _ in range(100_000):
                        kind(size)
                        wrote = True
                    pytest.fail("the store never filled")
    return sent


@contextlib.contextmanager
def tmpfs(where: Any) -> Iterator[None]:
    where.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], check=True, capture_output=True
        )
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a tmpfs here ({e}); the max_page_count case covers a full disk")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class Full:
    """A filled SQLite log: `log` is open on it; `path` is its file."""

    def __init__(self, path: str, log: tidelog.Log, kind: str, records: int):
        self.path, self.log, self.kind, self.records = path, log, kind, records


@pytest.fixture(params=["tmpfs", "max_page_count"])
def full(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Full]:
    with contextlib.ExitStack() as stack:
        if request.param == "tmpfs":
            stack.enter_context(tmpfs(tmp_path / "disk"))
            path = str(tmp_path / "disk" / "full.db")
        else:
            path = str(tmp_path / "full.db")
        log = stack.enter_context(tidelog.open(path))
        log.create_topic("fill")
        log.producer().send("fill", b"first")
        if request.param == "max_page_count":
            pages = log.store._db.execute("PRAGMA page_count").fetchone()[0]
            log.store._db.execute(f"PRAGMA max_page_count = {pages + 40}")
        records = fill(log) + 1
        yield Full(path, log, request.param, records)


def assert_full(error: BaseException) -> None:
    assert isinstance(error, tidelog.StoreFull) and isinstance(error, tidelog.StoreError)
    assert "full" in str(error)
    assert isinstance(error.__cause__, sqlite3.OperationalError | tidelog.StoreFull)


def test_the_python_api_raises_store_full_and_reads_still_work(full, tried):
    log = full.log
    producer = log.producer()
    before = snapshot(log)
    # Names longer than fill()'s pads: a shorter row may still fit a page.
    writes = [
        lambda: producer.send("fill", b"y"),
        lambda: producer.send_batch("fill", [b"z"] * 10),
        lambda: log.write([producer.prepare("fill", [b"w"])]),
        lambda: log.queue("fill", "fresh-group"),  # stores the new group's settings
        lambda: log.create_topic("another"),
        lambda: producer.send("implicit", b"v"),  # auto-create is a write too
        lambda: log.consumer("a-group-longer-than-the-pads").commit("fill", 0, 2),
    ]
    for write in writes:
        with pytest.raises(tidelog.StoreFull) as refused:
            write()
        assert_full(refused.value)
    assert snapshot(log) == before
    assert len(log.read("fill", 0, limit=10**6)) == full.records
    assert log.describe("fill").records == full.records
    assert sum(1 for _ in log.iter("fill", 0)) == full.records
    tried(disk=full.kind, records_until_full=full.records, refused_writes=len(writes))


def test_http_answers_507_with_the_error_body_and_reads_still_work(full, serve, tried):
    server = serve(full.log)
    with httpx.Client(base_url=server.url) as http:
        writes = [
            http.post("/v1/topics/fill/records", json={"records": [{"value": 1}]}),
            http.post("/v1/records", json={"batches": [{"topic": "fill", "records": [{"value": 1}]}]}),
            http.post("/publish/fill", content=b"x"),
            http.post("/api/topics/fill/publish", json={"payload": 1}),
            http.post("/v1/topics", json={"name": "another"}),
            http.post("/v1/queues/fill/messages", json={"records": [{"value": 1}]}),
        ]
        for response in writes:
            assert response.status_code == 507, (response.request.url, response.text)
            error = response.json()["error"]
            assert error["code"] == "store_full" and "full" in error["message"]
        read = http.get("/v1/topics/fill/partitions/0/records", params={"limit": 10**6})
        assert read.status_code == 200 and len(read.json()["records"]) == min(full.records, 10_000)
        assert http.get("/v1/topics/fill").json()["records"] == full.records
        # The http:// store maps the answer back to the same class.
        with tidelog.open(server.url) as remote, pytest.raises(tidelog.StoreFull, match="full"):
            remote.producer().send("fill", b"x")
        # The WebSocket: a new group's first INIT must store the group, and cannot.
        assert "full" in asyncio.run(ws_first_answer(server, "fill", "fresh"))["error"]
    tried(disk=full.kind, records_until_full=full.records, refused_507=len(writes), refused_other=2)


async def ws_first_answer(server: Any, topic: str, group: str) -> dict[str, Any]:
    import websockets

    url = server.url.replace("http://", "ws://") + f"/subscribe/{topic}?group={group}"
    async with websockets.connect(url) as ws:
        await ws.send("INIT")
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
        return answer


def test_the_cli_prints_one_line_and_exits_1(full, serve, tried):
    runner = CliRunner()
    targets = [serve(full.log).url]  # through a server: the http:// store
    if full.kind == "tmpfs":
        targets.append(full.path)  # the file itself, from a connection of the CLI's own
    for db in targets:
        refused = runner.invoke(cli, ["--db", db, "produce", "fill", "--data", "1"])
        assert refused.exit_code == 1, refused.output
        assert refused.output.count("\n") == 1 and "full" in refused.output
        created = runner.invoke(cli, ["--db", db, "topics", "create", "another"])
        assert created.exit_code == 1 and created.output.count("\n") == 1 and "full" in created.output
        read = runner.invoke(cli, ["--db", db, "read", "fill", "--partition", "0", "--limit", "3"])
        assert read.exit_code == 0 and len(read.output.splitlines()) == 3
    tried(disk=full.kind, targets=len(targets), refused_commands=2 * len(targets))


def test_the_redis_front_answers_err_and_reads_still_work(full, tried):
    redis = pytest.importorskip("redis")
    from tidelog.server.resp import start_resp_server, stop_resp_server

    async def session() -> None:
        server = await start_resp_server(full.log, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = redis.asyncio.Redis(port=port)
        try:
            with pytest.raises(redis.ResponseError, match="full"):
                await client.xadd("fill", {"value": "v"})
            with pytest.raises(redis.ResponseError, match="full"):
                await client.xadd("new-stream", {"value": "v"})
            assert len(await client.xrange("fill", count=5)) == 5
            assert await client.xlen("fill") == full.records
        finally:
            await client.aclose()
            await stop_resp_server(server)

    asyncio.run(session())
    tried(disk=full.kind, records_until_full=full.records, refused_xadds=2)


# --- PostgreSQL: the server's own disk_full ---------------------------------------------

DISK_FULL_TRIGGER = """
CREATE FUNCTION tl_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full';
END $$;
"""
FULL_TABLES = ("tidelog_records", "tidelog_topics", "tidelog_queue_groups", "tidelog_offsets")


@pytest.fixture
def full_postgres() -> Iterator[str]:
    import psycopg

    with postgres_schema() as url:
        with tidelog.open(url) as log:
            log.producer().send_batch("fill", [b"a", b"b", b"c"])
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(DISK_FULL_TRIGGER)
            for table in FULL_TABLES:
                conn.execute(
                    f"CREATE TRIGGER full_{table} BEFORE INSERT OR UPDATE ON {table} "
                    "FOR EACH ROW EXECUTE FUNCTION tl_disk_full()"
                )
        yield url


def test_postgres_disk_full_is_store_full_on_the_api_and_507_over_http(full_postgres, serve, tried):
    import psycopg

    with tidelog.open(full_postgres) as log:
        producer = log.producer()
        for write in (
            lambda: producer.send("fill", b"x"),
            lambda: producer.send_batch("fill", [b"x", b"y"]),
            lambda: log.queue("fill", "fresh"),
            lambda: log.create_topic("another"),
        ):
            with pytest.raises(tidelog.StoreFull, match="out of disk space") as refused:
                write()
            assert isinstance(refused.value.__cause__, psycopg.errors.DiskFull)
        assert [m.value for m in log.read("fill", 0)] == [b"a", b"b", b"c"]
    server = serve(full_postgres)
    with httpx.Client(base_url=server.url) as http:
        refused = http.post("/publish/fill", content=b"x")
        assert refused.status_code == 507 and refused.json()["error"]["code"] == "store_full"
        assert len(http.get("/v1/topics/fill/partitions/0/records").json()["records"]) == 3
    tried(disk="postgres disk_full", refused_writes=4, refused_507=1)
