"""A PostgreSQL restart under load: typed 503s while it is away, 201s as soon as it is back,
no acknowledged write lost.

The shared server at 127.0.0.1:5432 is never restarted (other tests use it):
the test runs a private cluster (initdb into a temporary directory, pg_ctl
on a free port, as the `postgres` user when run as root), serves it with
`tidelog serve --workers 2` under the load of tests/load.py (producers over
HTTP and the Redis protocol, a consumer acking), and stops and starts it.
Skipped on a machine without PostgreSQL's server binaries, failed in CI.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tidelog
from conftest import need_service
from load import Load
from pgschema import postgres_schema
from tidelog.server.http.thread import free_port
from workers_server import start, stop

psycopg = pytest.importorskip("psycopg")
pytest.importorskip("redis")
pytest.importorskip("hiredis")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers share a port on Linux"),
]

TIMEOUT_S = 30
POOL_MAX = 8  # the PostgreSQL store's connections (store/postgres/base.py)
OUTAGE_S = 2.0  # how long PostgreSQL stays down once the server has noticed


class Cluster:
    """A private PostgreSQL cluster: its URL, and pg_ctl to stop and start it."""

    def __init__(self, bindir: Path, root: Path, port: int, as_postgres: list[str]):
        self.bindir, self.root, self.port, self.as_postgres = bindir, root, port, as_postgres
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_postgres, str(self.bindir / tool), *args], check=True, capture_output=True, timeout=60
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.run(
            "pg_ctl",
            "-D",
            str(self.root / "data"),
            "-l",
            str(self.root / "log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(self.root / "data"), "-m", mode, "-w", "stop")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    bindir = found[-1].parent if found else None
    if bindir is None or not (bindir / "initdb").exists():
        need_service("PostgreSQL's server binaries", "apt-get install postgresql (initdb and pg_ctl)")
    as_postgres: list[str] = []
    owner = None
    if os.getuid() == 0:  # PostgreSQL refuses to run as root
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            need_service("the postgres user", "PostgreSQL runs as an unprivileged user")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="tidelog-pg-"))
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    pg = Cluster(bindir, root, free_port(), as_postgres)  # type: ignore[arg-type]
    try:
        pg.run("initdb", "-D", str(root / "data"), "-U", "postgres", "-A", "trust", "--no-sync")
        pg.start()
        yield pg
    finally:
        try:
            pg.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(root, ignore_errors=True)


def first_after(statuses: list[tuple[float, int, str]], since: float, status: int) -> float | None:
    return next((t for t, s, _ in statuses if t >= since and s == status), None)


def test_a_postgresql_restart_under_load_is_typed_503s_then_201s_and_loses_nothing(cluster, tmp_path, tried):
    port, resp_port = free_port(), free_port()
    argv = [
        "serve",
        "--db",
        cluster.url,
        "--port",
        str(port),
        "--resp-port",
        str(resp_port),
        "--log-level",
        "error",
    ]
    proc, _, errors = start(argv, 2, [port, resp_port])
    load = Load(port, resp_port).start()
    try:
        load.wait_for(100)
        down = time.monotonic()
        cluster.stop("fast")  # disconnects every session, as a restart or a failover does
        deadline = down + TIMEOUT_S
        while first_after(load.statuses, down, 503) is None:  # the server has noticed
            assert time.monotonic() < deadline, f"no 503 while PostgreSQL was down: {load.failed}"
            time.sleep(0.02)
        time.sleep(OUTAGE_S)
        cluster.start()
        up = time.monotonic()
        deadline = up + TIMEOUT_S
        while (back := first_after(load.statuses, up, 201)) is None:
            assert time.monotonic() < deadline, f"no 201 after PostgreSQL came back: {load.failed}"
            time.sleep(0.02)
        load.wait_for(100)
        assert proc.poll() is None
    finally:
        load.stop()
        stop(proc, errors)
    # While PostgreSQL was away every answer was a typed 503 (or a 201 finished before it went).
    during = [(s, code) for t, s, code in load.statuses if down < t < up]
    assert {(503, "store_error")} >= {answer for answer in during if answer[0] != 201}, set(during)
    counts = load.check(cluster.url)
    tried(
        outage_503=sum(1 for s, _ in during if s == 503),
        first_201_after_ms=round((back - up) * 1000),
        **counts,
    )


def test_connections_that_died_under_the_store_cost_one_failed_call(tried):
    """The shared server stays up: only this store's own sessions are terminated, as
    a restart would end them, and the pool must not hand out the dead ones one by one."""
    with postgres_schema() as url:
        name = f"tidelog-test-{secrets.token_hex(4)}"
        with tidelog.open(
            f"{url}&application_name={name}" if "?" in url else f"{url}?application_name={name}"
        ) as log:
            log.create_topic("t")
            producer = log.producer()
            # Several idle connections in the pool: as many calls at once as it holds, again
            # until it holds two (on a loaded machine one burst's reads can all finish on
            # one connection before the pool has opened a second).
            deadline = time.monotonic() + 30
            while True:
                start = threading.Barrier(POOL_MAX)
                threads = [
                    threading.Thread(target=lambda start=start: (start.wait(10), log.read("t", 0)))
                    for _ in range(POOL_MAX)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                idle = log.store._pool.get_stats()["pool_available"]
                if idle >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)  # the pool opens connections in the background
            assert idle >= 2
            with psycopg.connect(url, autocommit=True) as admin:
                killed = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                    (name,),
                ).fetchone()[0]
            assert killed >= idle
            failed = 0
            for i in range(2 * POOL_MAX):
                try:
                    producer.send("t", f"after-{i}")
                except tidelog.StoreError:
                    failed += 1
            assert failed <= 1
            assert len(log.read("t", 0)) == 2 * POOL_MAX - failed
    tried(idle_connections_killed=killed, calls=2 * POOL_MAX, failed=failed)
