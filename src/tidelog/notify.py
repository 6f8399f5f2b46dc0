"""Wake-ups on append, for long-polls, follows and blocking receives.

Appends made through this process's Log wake waiters at once. Appends made
by other processes reach us through the store's `watch` hook (SQLite polls
its data version on a short tick; PostgreSQL uses LISTEN/NOTIFY), which
calls `notify` with no topic: "something changed, look again".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .store.base import Watchable

# (topic, partition, last offset) of an append; all None when unknown.
Listener = Callable[[str | None, int | None, int | None], None]


class AppendNotifier:
    """Wakes readers waiting in this process when records are appended."""

    def __init__(self, store: Any):
        self._store = store
        self._cond = threading.Condition()
        self._version = 0
        self._listeners: list[Listener] = []
        self._watch_started = False
        self._lock = threading.Lock()

    def notify(self, topic: str | None = None, partition: int | None = None, last: int | None = None) -> None:
        """Tell waiters and listeners that `partition` of `topic` now ends at `last_offset`."""
        with self._cond:
            self._version += 1
            self._cond.notify_all()
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
            while self._version == seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
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
