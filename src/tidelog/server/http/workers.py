"""Several server processes on one port, all over one store, kept running.

Each worker is a full server (its own event loop, granian, writer and hub)
forked from a supervisor that holds the listening sockets
(server/listeners.py) and opens nothing else. The workers accept from the
sockets they inherit, so the kernel hands each new connection to whichever
worker is waiting. The store is what they share: on SQLite each worker
group-commits into the same WAL file (SQLite serializes the writers), and
a worker learns of another's appends through the store's watch (SQLite's
data version, PostgreSQL's LISTEN/NOTIFY), so its long-polls and
subscribers wake on every worker's writes.

The supervisor forwards SIGINT/SIGTERM to the workers and returns when all
have stopped. A worker that dies on its own (a crash, the OOM killer, a
SIGKILL) is logged in one line (its exit code or signal) and restarted on
the same sockets, after a delay that doubles each time that worker dies
again soon (`Restarts`); the connections waiting to be accepted meanwhile
are served by the others or by the new worker. Only a crash loop, one
worker dying more than `Restarts.max_restarts` times in
`Restarts.window` seconds, stops the others; `run_workers` then raises
CrashLoop. Worker 0 is the home of stream-group members over HTTP
(home.py): after its restart the members it held get the answer a Kafka
client gets from a restarted coordinator (unknown member: join again).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from types import FrameType

from ...errors import ConfigurationError, CrashLoop

log = logging.getLogger("tidelog.server")

PR_SET_PDEATHSIG = 1  # linux/prctl.h
DEFAULT_MAX_RESTARTS = 5
DEFAULT_RESTART_WINDOW_S = 60.0
# A worker asked to stop that has not within this is killed (a stuck store call, say).
STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class Restarts:
    """How the supervisor restarts a worker that died on its own.

    max_restarts: restarts of one worker within `window` seconds; its next
        death there is a crash loop, and the server stops (0: never
        restart, the first death stops the server).
    window: the seconds over which deaths are counted.
    first_delay, max_delay: a dead worker is restarted after `first_delay`
        seconds, doubled at each death within the window, at most
        `max_delay`: a worker that cannot start does not spin.
    """

    max_restarts: int = DEFAULT_MAX_RESTARTS
    window: float = DEFAULT_RESTART_WINDOW_S
    first_delay: float = 0.25
    max_delay: float = 8.0

    def __post_init__(self) -> None:
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int):
            raise ConfigurationError(f"max_restarts must be a whole number, got {self.max_restarts!r}")
        if not 0 <= self.max_restarts <= 1000:
            raise ConfigurationError(f"max_restarts must be between 0 and 1000, got {self.max_restarts}")
        if not 0 < self.window <= 86_400:
            raise ConfigurationError(
                f"the restart window must be between 0 and 86400 seconds, got {self.window}"
            )
        if not 0 < self.first_delay <= self.max_delay <= 3600:
            raise ConfigurationError("restart delays must satisfy 0 < first_delay <= max_delay <= 3600")


def default_workers() -> int:
    """The cores this process may run on (`tidelog serve`'s default)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def supports_workers() -> bool:
    """Several workers need fork and PR_SET_PDEATHSIG, which are Linux's."""
    return sys.platform.startswith("linux")


def how_it_ended(exitcode: int | None) -> str:
    """A worker's end in words: its exit code, or the signal that killed it."""
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"


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


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _run_child(
    target: Callable[[int], None], index: int, parent: int, orphaned: Callable[[], None] | None
) -> None:
    # The supervisor's handlers came along with the fork. The worker's own
    # event loop installs its handlers; until then a signal ends it, through
    # SystemExit so that the cleanup below still runs.
    signal.signal(signal.SIGINT, _exit_on_signal)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    _die_with(parent)
    try:
        target(index)
    finally:
        # The supervisor died (SIGKILL leaves it no time): what it would
        # have cleaned up is this worker's to clean.
        if orphaned is not None and os.getppid() != parent:
            orphaned()


class _Supervisor:
    def __init__(
        self,
        count: int,
        target: Callable[[int], None],
        restarts: Restarts,
        orphaned: Callable[[], None] | None,
    ):
        self.context = multiprocessing.get_context("fork")
        self.target, self.restarts, self.orphaned = target, restarts, orphaned
        self.pid = os.getpid()
        self.procs: list[multiprocessing.process.BaseProcess | None] = [None] * count
        self.deaths: list[deque[float]] = [deque() for _ in range(count)]
        self.due: dict[int, float] = {}  # worker index -> when to restart it
        self.stopping: float | None = None  # when the stop began
        self.failure: str | None = None
        # A signal wakes the wait at once, even while every worker is down.
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def spawn(self, index: int) -> None:
        proc = self.context.Process(
            target=_run_child,
            args=(self.target, index, self.pid, self.orphaned),
            name=f"tidelog-worker-{index}",
            daemon=False,
        )
        proc.start()
        self.procs[index] = proc

    def alive(self) -> list[multiprocessing.process.BaseProcess]:
        return [p for p in self.procs if p is not None]

    def stop(self) -> None:
        if self.stopping is None:
            self.stopping = time.monotonic()
        self.due.clear()
        self.signal_all(signal.SIGTERM)

    def signal_all(self, signum: int) -> None:
        for proc in self.alive():
            if proc.pid is not None:
                try:
                    os.kill(proc.pid, signum)
                except ProcessLookupError:
                    pass

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop()
        try:
            os.write(self.wake_w, b"x")
        except OSError:  # the pipe is full: the wait wakes anyway
            pass

    def died(self, index: int, proc: multiprocessing.process.BaseProcess, now: float) -> None:
        """A worker ended while not asked to: restart it later, or give up."""
        deaths = self.deaths[index]
        deaths.append(now)
        while deaths and now - deaths[0] > self.restarts.window:
            deaths.popleft()
        ended = how_it_ended(proc.exitcode)
        if len(deaths) > self.restarts.max_restarts:
            self.failure = (
                f"worker {index} {ended}, its death {len(deaths)} in {now - deaths[0]:.1f} s "
                f"(the limit is {self.restarts.max_restarts} restarts in {self.restarts.window:g} s): "
                "a crash loop, so the server stopped; its errors are logged above"
            )
            log.error("%s", self.failure)
            self.stop()
            return
        delay = min(self.restarts.first_delay * 2 ** (len(deaths) - 1), self.restarts.max_delay)
        log.error("worker %d (pid %s) %s; restarting it in %.2g s", index, proc.pid, ended, delay)
        self.due[index] = now + delay

    def timeout(self, now: float) -> float | None:
        if self.stopping is not None:
            return max(0.0, self.stopping + STOP_GRACE_S - now)
        if self.due:
            return max(0.0, min(self.due.values()) - now)
        return None

    def run(self, count: int) -> None:
        for index in range(count):
            self.spawn(index)
        log.info(
            "%d server processes on one port (pids %s)", count, ", ".join(str(p.pid) for p in self.alive())
        )
        while self.alive() or (self.due and self.stopping is None):
            now = time.monotonic()
            ready = wait([p.sentinel for p in self.alive()] + [self.wake_r], self.timeout(now))
            if self.wake_r in ready:
                os.read(self.wake_r, 64)
            now = time.monotonic()
            for index, proc in enumerate(self.procs):
                if proc is None or proc.sentinel not in ready:
                    continue
                proc.join()
                self.procs[index] = None
                if self.stopping is None:
                    self.died(index, proc, now)
            if self.stopping is not None:
                if now - self.stopping >= STOP_GRACE_S and self.alive():
                    log.error("a worker did not stop within %g s of SIGTERM: killing it", STOP_GRACE_S)
                    self.signal_all(signal.SIGKILL)
                continue
            for index, at in list(self.due.items()):
                if at <= now:
                    del self.due[index]
                    self.spawn(index)
                    log.warning("worker %d restarted (pid %s)", index, self.procs[index].pid)  # type: ignore[union-attr]

    def close(self) -> None:
        self.stop()
        for proc in self.alive():
            proc.join(STOP_GRACE_S)
        os.close(self.wake_r)
        os.close(self.wake_w)


def run_workers(
    count: int,
    target: Callable[[int], None],
    restarts: Restarts | None = None,
    orphaned: Callable[[], None] | None = None,
) -> None:
    """Run `target(index)` in `count` forked processes until asked to stop.

    Forked, not spawned: `target` may be a closure, and the workers start
    with the supervisor's logging and listening sockets. Call it before
    opening anything else (a log, a thread): a fork copies those in a
    broken state. A worker that dies on its own is restarted as `restarts`
    says; a crash loop stops the others and raises CrashLoop. `orphaned`
    runs in a worker that stops after the supervisor died (it cleans up
    what the supervisor would have).
    """
    supervisor = _Supervisor(count, target, restarts or Restarts(), orphaned)
    previous = {sig: signal.signal(sig, supervisor.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        supervisor.run(count)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        supervisor.close()
    if supervisor.failure:
        raise CrashLoop(supervisor.failure)
