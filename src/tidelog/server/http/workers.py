"""Several server processes on one port, all over one store.

Each worker is a full server (its own event loop, granian, writer and hub)
forked from a supervisor that opens nothing. They share the port through
SO_REUSEPORT: granian's embedded server binds with it on Linux, and the
kernel spreads new connections over the listening processes. The store
is what they share: on SQLite each worker group-commits into the same WAL
file (SQLite serializes the writers), and a worker learns of another's
appends through the store's watch (SQLite's data version, PostgreSQL's
LISTEN/NOTIFY), so its long-polls and subscribers wake on every worker's
writes.

The supervisor forwards SIGINT/SIGTERM to the workers and returns when all
have stopped; a worker that dies on its own stops the others, and the
supervisor then raises.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import wait
from types import FrameType

log = logging.getLogger("tidelog.server")

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def default_workers() -> int:
    """The cores this process may run on (`tidelog serve`'s default)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def supports_workers() -> bool:
    """Several workers need SO_REUSEPORT's load balancing, which is Linux's."""
    return sys.platform.startswith("linux")


def _die_with(parent: int) -> None:
    """Be sent SIGTERM when the supervisor dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG): else its workers would keep serving the port."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def _run_child(target: Callable[[int], None], index: int, parent: int) -> None:
    # The supervisor's handlers came along with the fork: the worker's own
    # event loop installs its handlers; until then a signal ends it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with(parent)
    target(index)


def run_workers(count: int, target: Callable[[int], None]) -> None:
    """Run `target(index)` in `count` forked processes until they stop.

    Forked, not spawned: `target` may be a closure, and the workers start
    with the supervisor's logging set up. Call it before opening anything
    (a log, a thread, a socket): a fork copies those in a broken state.
    Raises ChildProcessError when a worker exits with an error while not
    asked to stop.
    """
    context = multiprocessing.get_context("fork")
    procs = [
        context.Process(
            target=_run_child, args=(target, i, os.getpid()), name=f"tidelog-worker-{i}", daemon=False
        )
        for i in range(count)
    ]
    stopping = False
    failed: list[str] = []

    def stop_all() -> None:
        for proc in procs:
            if proc.pid is not None and proc.exitcode is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        stop_all()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for proc in procs:
            proc.start()
        log.info("%d server processes on one port (pids %s)", count, ", ".join(str(p.pid) for p in procs))
        alive = list(procs)
        while alive:
            ready = wait([p.sentinel for p in alive])
            for proc in [p for p in alive if p.sentinel in ready]:
                proc.join()
                alive.remove(proc)
                if proc.exitcode != 0 and not stopping:
                    failed.append(f"{proc.name} exited with code {proc.exitcode}")
                    stopping = True
                    stop_all()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_all()
    if failed:
        raise ChildProcessError("; ".join(failed) + " (its error is logged above); the others were stopped")
