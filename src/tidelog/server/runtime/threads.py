"""Threads that run blocking store calls for an event loop, with a light hand-off.

A call goes in a queue; a thread runs it and hands the outcome back with one
`call_soon_threadsafe`. `loop.run_in_executor` does the same through a
`concurrent.futures.Future` chained to an asyncio one (locks, conditions
and callbacks on both sides); for the fronts' one-record round trips (a
subscriber's round, a Redis command) that chaining was a measurable part of
each record's CPU. Each thread keeps its own SQLite reader connection for
its life, as a pool's threads do.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThreads:
    """`count` threads taking calls from one queue."""

    def __init__(self, count: int, name: str):
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` on one of the threads; the future holds its result or exception."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, fut, fn, args))
        return fut

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            loop, fut, fn, args = call
            try:
                outcome = (True, fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
                outcome = (False, e)
            try:
                loop.call_soon_threadsafe(_resolve, fut, *outcome)
            except RuntimeError:  # the loop is closed: nobody waits
                pass

    def stop(self, wait: bool = True) -> None:
        """End the threads once the calls given so far ran (waits when `wait`)."""
        for _ in self._threads:
            self._calls.put(None)
        if wait:
            for thread in self._threads:
                thread.join(timeout=30)


def _resolve(fut: asyncio.Future[Any], ok: bool, result: Any) -> None:
    if fut.cancelled():
        return
    if ok:
        fut.set_result(result)
    else:
        fut.set_exception(result)
