"""Shutdown: a flag set by SIGTERM or SIGINT, or by the embedding program.

Engines do not die on a signal: they stop taking new batches, let the
requests in flight finish, commit what the endpoint accepted, and return.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..logs import event

WATCH_S = 0.2


class Shutdown:
    """Wraps a threading.Event; whoever sets it (a signal, another thread)
    starts the shutdown, and `on_set` callbacks run once when it does."""

    def __init__(self, event: threading.Event | None = None):
        self.event = event or threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._fired = False
        self._closed = False
        self._watcher: threading.Thread | None = None
        self._signal: str | None = None  # set by a signal handler, turned into the event by the watcher

    def is_set(self) -> bool:
        return self.event.is_set() or self._signal is not None

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)

    def on_set(self, callback: Callable[[], None]) -> None:
        """Call `callback` on a watcher thread when shutdown begins (at once if it has)."""
        with self._lock:
            if not self._fired:
                self._callbacks.append(callback)
                self._start_watcher()
                return
        callback()

    def _start_watcher(self) -> None:
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="tidelog-worker-shutdown", daemon=True)
            self._watcher.start()

    def close(self) -> None:
        """End the watcher (the engine has returned)."""
        self._closed = True
        if self._watcher is not None:
            self._watcher.join()

    def _watch(self) -> None:
        # A timed wait, so that `close` ends the thread when nobody ever sets the event.
        while not self.event.wait(WATCH_S):
            if self._signal is not None:
                event(logging.INFO, "shutdown requested", signal=self._signal)
                self.event.set()
            elif self._closed:
                return
        with self._lock:
            self._fired = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    @contextmanager
    def signals(self) -> Iterator[Callable[[], None]]:
        """Turn SIGTERM and SIGINT into a shutdown while the block runs
        (only possible on the main thread; elsewhere the embedding program
        sets the event itself). Yields a function that installs the
        handlers again, for after a library replaced one (PySpark does)."""
        if threading.current_thread() is not threading.main_thread():
            yield lambda: None
            return
        previous: dict[int, Any] = {}

        def handle(signum: int, _frame: Any) -> None:
            # Only a plain assignment here: the interrupted code may hold the
            # very lock that Event.set or a log handler would take.
            self._signal = signal.Signals(signum).name

        def install() -> None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, handle)

        with self._lock:
            self._start_watcher()
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.getsignal(sig)
        install()
        try:
            yield install
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)  # a handler, SIG_DFL or SIG_IGN, as it was
