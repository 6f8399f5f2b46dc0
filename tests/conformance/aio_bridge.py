"""The async variant of the conformance suite: tidelog.aio behind the sync API's shape.

`LoopThread.open(url, **kw)` opens a `tidelog.aio` log on an event loop in a
background thread and returns a `Blocking` proxy of it: calling a method
runs it on that loop (awaiting it when it is a coroutine) and blocks the
test until it is done. Handles the log hands out (queues, consumers,
producers, group views) come back wrapped too, opened at once as their sync
twins are, so every conformance test written against `tidelog.Log` drives
the asyncio API unchanged -- from several test threads at once where a
test uses threads, all landing on the one loop.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

import tidelog.aio

# Handles whose sync constructor does I/O; the async twin does it in open().
_OPENED_AT_ONCE = (tidelog.aio.AsyncQueue, tidelog.aio.AsyncConsumer, tidelog.aio.AsyncGroupConsumer)
_WRAPPED = (*_OPENED_AT_ONCE, tidelog.aio.AsyncLog, tidelog.aio.AsyncProducer, tidelog.aio.AsyncGroup)


class LoopThread:
    """An event loop running in a daemon thread; the logs of one test live on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._logs: list[tidelog.aio.AsyncLog] = []
        self._thread = threading.Thread(target=self.loop.run_forever, name="aio-bridge-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def open(self, url: str, **kwargs: Any) -> Blocking:
        log = self.run(_open(url, kwargs))
        self._logs.append(log)
        return Blocking(log, self)

    def stop(self) -> None:
        # Logs a test left open are closed here, so their pools' threads end with the test.
        for log in self._logs:
            try:
                self.run(log.close())
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


async def _open(url: str, kwargs: dict[str, Any]) -> tidelog.aio.AsyncLog:
    return await tidelog.aio.open(url, **kwargs)


async def _invoke(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = fn(*args, **kwargs)
    if asyncio.iscoroutine(result):
        result = await result
    if isinstance(result, _OPENED_AT_ONCE):
        await result.open()
    return result


async def _first(agen: Any) -> list[Any]:
    try:
        return [await agen.__anext__()]
    except StopAsyncIteration:
        return []


class Blocking:
    """A blocking view of a tidelog.aio object (see the module docstring)."""

    def __init__(self, target: Any, loop: LoopThread):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        try:
            value = getattr(self._target, name)
        except AttributeError:
            # What only the sync object carries (Log.notifier, Log.catalog), for
            # functions of the sync API that take a log and have no twin yet.
            if not hasattr(self._target, "sync"):
                raise
            return getattr(self._target.sync, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            result = self._loop.run(_invoke(value, args, kwargs))
            if inspect.isasyncgen(result):
                # The sync generator checks the topic when called; the async
                # one at its first step: take that step now, so both raise alike.
                first = self._loop.run(_first(result))
                return self._pull(result, first)
            return self._wrap(result)

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def _pull(self, agen: Any, first: list[Any]) -> Any:
        # An async generator (AsyncLog.iter) as the sync generator it twins:
        # each next() awaits one item on the bridge's loop.
        yield from first
        while first:
            try:
                yield self._loop.run(agen.__anext__())
            except StopAsyncIteration:
                return

    def _wrap(self, result: Any) -> Any:
        return Blocking(result, self._loop) if isinstance(result, _WRAPPED) else result

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
