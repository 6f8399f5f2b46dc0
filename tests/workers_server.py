"""`tidelog serve --workers N` as a real process, for the tests.

`test_workers.py` pins connections to one worker; with TIDELOG_TEST_WORKERS=N
the `serve` fixture (conftest.py) starts the front tests' servers this way
instead of on a thread, so the same tests run against N processes on one
port and one store (`make test` runs the front modules so with N = 2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest

from tidelog.server.http.thread import free_port

START_TIMEOUT_S = 30
# serve(...) options the command line can say; a test that needs another
# (a clock, a Log object, a limit with no flag) needs the in-process server.
FLAGS: dict[str, str | None] = {
    "token": "--token",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "clean_interval": "--clean-interval",
    "txn_window": "--txn-window",
    "default_partitions": "--default-partitions",
    "max_body": "--max-body",
    "auto_create": None,  # --auto-create / --no-auto-create
    "limits": None,  # a Limits: one flag a field
}
# Limits' fields as serve's flags.
LIMIT_FLAGS = {
    "max_connections": "--max-connections",
    "idle_timeout": "--idle-timeout",
    "handshake_timeout": "--handshake-timeout",
    "max_hold": "--max-hold",
    "max_request": "--max-request",
    "max_invalid_commands": "--max-invalid-commands",
    "write_timeout": "--write-timeout",
    "max_batch_inflated": "--max-batch-inflated",
    "fetch_max_bytes": "--fetch-max-bytes",
    "auth_free_failures": "--auth-free-failures",
    "auth_wait": "--auth-wait",
    "auth_max_wait": "--auth-max-wait",
}


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def tcp_rows() -> list[list[str]]:
    with open("/proc/net/tcp") as f:
        return [line.split() for line in f.read().splitlines()[1:]]


def port_of(address: str) -> int:
    return int(address.split(":")[1], 16)


def listening(worker: int, port: int) -> bool:
    inodes = socket_inodes(worker)
    return any(row[3] == "0A" and port_of(row[1]) == port and row[9] in inodes for row in tcp_rows())


def start(
    argv: list[str], count: int, ports: list[int], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, list[int], Any]:
    """Run `tidelog ARGV --workers COUNT` until every worker listens on every port.

    Returns the supervisor, its workers' pids and the file its stderr goes to
    (a file, not a pipe: a pipe nobody reads would stall a chatty server).
    `env`: variables to set for it (TMPDIR, to see its runtime directory).
    """
    errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by stop())
    argv = [sys.executable, "-m", "tidelog.cli", *argv, "--workers", str(count)]
    proc = subprocess.Popen(argv, stderr=errors, text=True, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            workers = children(proc.pid)
            # Every worker listening on every port: else every connection lands on one.
            assert len(workers) == count
            assert all(listening(w, p) for w in workers for p in ports)
            return proc, workers, errors
        except (AssertionError, FileNotFoundError):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                errors.seek(0)
                pytest.fail(f"tidelog serve --workers {count} did not start: {errors.read()[-2000:]}")
            time.sleep(0.1)


def stop(proc: subprocess.Popen, errors: Any) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    errors.close()


class WorkersServer:
    """What the `serve` fixture gives a front test, served by N processes."""

    def __init__(self, target: Any, count: int, host: str = "127.0.0.1", **options: Any):
        if not isinstance(target, str):
            pytest.skip("this test serves a Log object: it needs the in-process server")
        if options.get("lean_routes", True) is True:  # the command's own (lean) routes
            options.pop("lean_routes", None)
        unknown = sorted(set(options) - set(FLAGS))
        if unknown:
            pytest.skip(f"serve({', '.join(unknown)}=...) has no command-line flag: in-process server only")
        self.target, self.host, self.count = target, host, count
        self.token = options.get("token")
        self.tls = (options.get("tls_cert"), options.get("tls_key"))
        self.port = free_port(host)
        argv = ["serve", "--db", target, "--host", host, "--port", str(self.port), "--resp-port", "0"]
        for name, value in options.items():
            if name == "auto_create":
                argv.append("--auto-create" if value else "--no-auto-create")
            elif name == "limits":
                for field, flag in LIMIT_FLAGS.items():
                    argv += [flag, str(getattr(value, field))]
            else:
                argv += [FLAGS[name], str(value)]
        self._proc, self.workers, self._errors = start(argv, count, [self.port])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls[0] else 'http'}://{self.host}:{self.port}"

    def start(self) -> WorkersServer:
        return self

    def stop(self) -> None:
        stop(self._proc, self._errors)

    def __getattr__(self, name: str) -> Any:
        # ServerThread's in-process parts (its app, its loop, its log).
        pytest.skip(f"this test reaches into the server ({name}): it needs the in-process server")
