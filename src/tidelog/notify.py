"""Wake-ups on append, for long-polls, follows and blocking receives.

Appends made through this process's Log wake waiters at once. Appends made
by other processes reach us through the store's `watch` hook (SQLite polls
its data version on a short tick; PostgreSQL uses LISTEN/NOTIFY), which
calls `notify` with no topic: "something changed, look again".
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .store.base import Watchable

# (topic, partition, last offset) of an append; all None when unknown.
Listener = Callable[[str | None, int | None, int | None], None]


class AppendNotifier:
    """Wakes readers waiting in this process when records are appended."""

    def __init__(self, store: Any):
        self._store = store
        self._cond = threading.Condition(threading.Lock())
        # Each append stores a new value from the counter (next() is atomic):
        # no value is stored twice, so once a waiter has read the version,
        # any later append leaves it different, whatever the threads' order.
        self._versions = itertools.count(1)
        self._version = 0
        self._waiting = 0  # threads inside `wait` (changed under the lock)
        self._listeners: list[Listener] = []
        self._watch_started = False
        self._lock = threading.Lock()

    def notify(self, topic: str | None = None, partition: int | None = None, last: int | None = None) -> None:
        """Tell waiters and listeners that `partition` of `topic` now ends at `last_offset`."""
        # A send with nobody waiting takes no lock. A waiter counts itself in,
        # then compares the version, both under the lock: either it sees this
        # new version, or it was counted before `_waiting` is read here and is
        # woken under the lock, which it holds until it sleeps.
        self._version = next(self._versions)
        if self._waiting:
            with self._cond:
                self._cond.notify_all()
        if not self._listeners:
            return
        for listener in list(self._listeners):
            try:
                listener(topic, partition, last)
            except Exception:  # a listener must never break a producer
                pass

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` after every append; returns the function that stops it."""
        self._ensure_watch()
        self._listeners.append(listener)

        def stop() -> None:
            try:
                self._listeners.remove(listener)
            except ValueError:
                pass

        return stop

    def version(self) -> int:
        """A counter that moves on every append; pass it to `wait` to miss none."""
        return self._version

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the version moves past `seen` or `timeout` passes."""
        self._ensure_watch()
        deadline = time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            try:
                while self._version == seen:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            finally:
                self._waiting -= 1
            return self._version

    def _ensure_watch(self) -> None:
        # Watching other processes costs a thread (SQLite) or a connection
        # (PostgreSQL): start it only once somebody waits or listens.
        if self._watch_started:
            return
        with self._lock:
            if self._watch_started:
                return
            self._watch_started = True
            if isinstance(self._store, Watchable):
                self._store.watch(self.notify)


T = TypeVar("T")


def long_poll(
    read: Callable[[], T],
    wait: float,
    version: Callable[[], int],
    block: Callable[[int, float], object],
    *,
    found: Callable[[T], object] = bool,
    due_in: Callable[[T], float | None] | None = None,
) -> T:
    """Call `read` until it finds something (`found(result)`) or `wait` seconds pass.

    Between reads, `block(seen, seconds)` sleeps until an append moves
    `version()` past `seen` (so an append during a read is never missed) or
    until `due_in(result)` seconds, when something held back falls due.
    A `block` that answers False timed out with nothing new: that ends the
    wait when it was the last pause. Every wait in tidelog is this loop: the
    Python API's on the notifier, the server's on its wake-up hub
    (`along_poll`).
    """
    deadline = time.monotonic() + wait
    while True:
        seen = version()
        result = read()
        pause = _pause(result, deadline, found, due_in)
        if pause is None:
            return result
        if block(seen, pause[0]) is False and pause[1]:
            return result


async def along_poll(
    read: Callable[[], Awaitable[T]],
    wait: float,
    version: Callable[[], int],
    block: Callable[[int, float], Awaitable[object]],
    *,
    found: Callable[[T], object] = bool,
    due_in: Callable[[T], float | None] | None = None,
) -> T:
    """`long_poll` on an event loop: `read` and `block` are awaited."""
    deadline = time.monotonic() + wait
    while True:
        seen = version()
        result = await read()
        pause = _pause(result, deadline, found, due_in)
        if pause is None:
            return result
        if await block(seen, pause[0]) is False and pause[1]:
            return result


def _pause(
    result: T, deadline: float, found: Callable[[T], object], due_in: Callable[[T], float | None] | None
) -> tuple[float, bool] | None:
    """(seconds to wait, whether that is the rest of the wait), or None to stop."""
    left = deadline - time.monotonic()
    if found(result) or left <= 0:
        return None
    due = None if due_in is None else due_in(result)
    if due is not None and due < left:
        return max(0.001, due), False
    return left, True
