"""The process-level fault suite: `tidelog serve --workers 2` under load, its processes SIGKILLed.

Four producers (two over HTTP, two over the Redis protocol) and a consumer
acking through a queue group run against a real server (tests/load.py)
while each worker in turn (the members' home first) and then the
supervisor is SIGKILLed. After a worker's death the server goes on: the
supervisor starts a replacement and writes are acknowledged again. After
the supervisor's, no process and no runtime directory are left. Every
write that was acknowledged is in the log at its offset, on SQLite and on
PostgreSQL. (A PostgreSQL restart is in test_postgres_restart.py, a full
disk in test_store_full.py.)
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from load import Load
from pgschema import postgres_schema
from tidelog.server.http.thread import free_port
from workers_server import children, start, stop

pytest.importorskip("redis")
pytest.importorskip("hiredis")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers share a port on Linux"),
]

WARM_UP = 100  # writes acknowledged before the first kill
AFTER_RESTART = 50  # ... and after each replacement started
TIMEOUT_S = 30


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "faults.db")
        return
    with postgres_schema() as url:
        yield url


def alive(pid: int) -> bool:
    """A process that runs (a zombie, waiting for a reaper that may never come in a container, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def replacement(supervisor: int, gone: int, known: set[int]) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        fresh = set(children(supervisor)) - known - {gone}
        if fresh:
            return fresh.pop()
        time.sleep(0.05)
    pytest.fail(f"no worker replaced {gone} in {TIMEOUT_S} s")


def test_sigkill_of_each_worker_and_of_the_supervisor_under_load(store_url, server_tmp, tried):
    tmp = server_tmp  # the server's temp directory: its runtime directory is seen there
    port, resp_port = free_port(), free_port()
    argv = [
        "serve",
        "--db",
        store_url,
        "--port",
        str(port),
        "--resp-port",
        str(resp_port),
        "--log-level",
        "warning",
    ]
    proc, workers, errors = start(argv, 2, [port, resp_port], env={"TMPDIR": str(tmp)})
    load = Load(port, resp_port).start()
    kills = 0
    try:
        load.wait_for(WARM_UP)
        for index in (0, 1):  # the members' home, then the other
            victim = workers[index]
            os.kill(victim, signal.SIGKILL)
            kills += 1
            workers[index] = replacement(proc.pid, victim, set(workers))
            assert proc.poll() is None, "the supervisor stopped after a worker died"
            load.wait_for(AFTER_RESTART)  # the server goes on
        errors.seek(0)
        logged = errors.read()
        for index in (0, 1):
            assert f"worker {index} (pid" in logged and "was killed by SIGKILL; restarting it in" in logged

        assert len(os.listdir(tmp)) == 1  # the runtime directory, until ...
        proc.kill()  # ... the supervisor is SIGKILLed under load
        proc.wait()
        kills += 1
        deadline = time.monotonic() + TIMEOUT_S
        while any(alive(w) for w in workers):
            assert time.monotonic() < deadline, "a worker outlived its supervisor"
            time.sleep(0.05)
        assert os.listdir(tmp) == []  # removed by the workers as they stopped
    finally:
        load.stop()
        stop(proc, errors)
    counts = load.check(store_url)
    tried(kills=kills, **counts)
