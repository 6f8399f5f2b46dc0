"""Append wake-ups for long-polls and streams, bridged into asyncio.

`Log.listen` calls us on the appending thread; we collect what changed and
hop to the event loop once (`call_soon_threadsafe`), where the waiters of
those partitions are woken. A waiter wakes on the append, never on a tick.
`seq` counts appends, so a handler that read nothing can tell whether an
append slipped in between its read and its wait. Both fronts use one hub
per log: the HTTP long-polls, SSE and WebSocket pumps wait with `wait` /
`wait_any`, the Redis front's blocking reads with `register`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable

from ...log import Log

Key = tuple[str, int | None]  # (topic, None) waits for any partition of the topic


class AppendHub:
    """Wakes asyncio waiters on appends; shared by the HTTP and the Redis fronts."""

    def __init__(self, log: Log):
        self.log = log
        self.seq = 0
        self._waiters: dict[Key, set[asyncio.Future[None]]] = {}
        self._any: set[asyncio.Future[None]] = set()
        # Guards seq, the waiter sets and what changed: the appending thread
        # reads them to decide whether the loop needs waking at all.
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
        with self._lock:
            futures = [f for s in self._waiters.values() for f in s] + list(self._any)
        for fut in futures:
            if not fut.done():
                fut.set_result(None)

    def _on_append(self, topic: str | None, partition: int | None, last: int | None) -> None:
        # Any thread. Appends by another process arrive as (None, None, None).
        key = None if topic is None else (topic, partition)
        with self._lock:
            self.seq += 1
            if not self._waiters and not self._any:
                # Nobody waits (the common case under load): no hop to the loop.
                # A reader between its read and its wait sees seq move instead.
                return
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
            woken: list[asyncio.Future[None]] = list(self._any)
            if None in changed:
                for waiters in self._waiters.values():
                    woken.extend(waiters)
            else:
                for key in changed:
                    if key is not None:
                        woken.extend(self._waiters.get(key, ()))
                        woken.extend(self._waiters.get((key[0], None), ()))
        for fut in woken:
            if not fut.done():
                fut.set_result(None)

    def register(self, keys: Iterable[Key], seq: int | None = None) -> asyncio.Future[None]:
        """A future that an append to one of `keys` resolves (done at once when
        anything was appended since `seq`). Register before reading, then wait
        on it: an append during the read is not missed. `unregister` it after."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if (seq is not None and self.seq != seq) or self.closed:
                fut.set_result(None)
                return fut
            for key in keys:
                self._waiters.setdefault(key, set()).add(fut)
        return fut

    def unregister(self, keys: Iterable[Key], fut: asyncio.Future[None]) -> None:
        with self._lock:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[key]

    async def wait(self, keys: Iterable[Key], seq: int, timeout: float) -> bool:
        """Wait until one of `keys` gets an append or `timeout` passes.

        Returns at once when anything was appended since `seq` was read.
        True when woken by an append.
        """
        if self.seq != seq:
            return True
        if timeout <= 0 or self.closed:
            return False
        keys = list(keys)
        fut = self.register(keys, seq)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self.unregister(keys, fut)

    async def wait_any(self, seq: int, timeout: float) -> int:
        """Wait for any append after `seq`; returns the current seq."""
        if self.seq != seq or timeout <= 0 or self.closed:
            return self.seq
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self.seq != seq:
                return self.seq
            self._any.add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._any.discard(fut)
        return self.seq
