"""Append wake-ups for long-polls and streams, bridged into asyncio.

`Log.listen` calls us on the appending thread; we collect what changed and
hop to the event loop once (`call_soon_threadsafe`), where the waiters of
those partitions are woken. A waiter wakes on the append, never on a tick.
`seq` counts wake-ups, so a handler that read nothing can tell whether an
append slipped in between its read and its wait.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable

from ...log import Log

Key = tuple[str, int | None]  # (topic, None) waits for any partition of the topic


class AppendHub:
    def __init__(self, log: Log):
        self.log = log
        self.seq = 0
        self._waiters: dict[Key, set[asyncio.Future]] = {}
        self._any: set[asyncio.Future] = set()
        self._lock = threading.Lock()
        self._changed: set[Key | None] = set()
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_listening: Callable[[], None] | None = None
        self.closed = False  # shutting down: long-polls answer at once, streams end

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_listening = self.log.listen(self._on_append)

    def close(self) -> None:
        """Answer every long-poll now and refuse new waits (server shutdown)."""
        self.closed = True
        self._wake_all()

    def stop(self) -> None:
        self.closed = True
        if self._stop_listening is not None:
            self._stop_listening()
        self._wake_all()

    def _wake_all(self) -> None:
        for fut in [f for s in self._waiters.values() for f in s] + list(self._any):
            if not fut.done():
                fut.set_result(None)

    def _on_append(self, topic: str | None, partition: int | None, last: int | None) -> None:
        # Any thread. Appends by another process arrive as (None, None, None).
        key = None if topic is None else (topic, partition)
        with self._lock:
            self._changed.add(key)
            if self._scheduled:
                return
            self._scheduled = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._flush)
            except RuntimeError:  # the loop closed under us: nobody is waiting
                pass

    def _flush(self) -> None:
        with self._lock:
            changed, self._changed = self._changed, set()
            self._scheduled = False
        self.seq += 1
        woken: list[asyncio.Future] = list(self._any)
        if None in changed:
            for waiters in self._waiters.values():
                woken.extend(waiters)
        else:
            for key in changed:
                woken.extend(self._waiters.get(key, ()))  # type: ignore[arg-type]
                woken.extend(self._waiters.get((key[0], None), ()))  # type: ignore[index]
        for fut in woken:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, keys: Iterable[Key], seq: int, timeout: float) -> bool:
        """Wait until one of `keys` gets an append or `timeout` passes.

        Returns at once when anything was appended since `seq` was read.
        True when woken by an append.
        """
        if self.seq != seq:
            return True
        if timeout <= 0 or self.closed:
            return False
        fut = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[key]

    async def wait_any(self, seq: int, timeout: float) -> int:
        """Wait for any append after `seq`; returns the current seq."""
        if self.seq != seq or timeout <= 0 or self.closed:
            return self.seq
        fut = asyncio.get_running_loop().create_future()
        self._any.add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            self._any.discard(fut)
        return self.seq
