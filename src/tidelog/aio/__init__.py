"""tidelog for asyncio: the same API, awaited.

    import tidelog.aio

    log = await tidelog.aio.open("tidelog.db")      # or: async with tidelog.aio.open(...) as log
    sent = await log.producer().send("orders", {"id": 1}, key="u-7")
    q = log.queue("jobs", visibility_timeout=30)
    for d in await q.receive(max_messages=10, wait=20):
        await q.ack(d)

Every operation of the sync API has a twin here with the same name,
arguments, results and errors; those that need nothing but awaiting are
generated from the sync classes (`generated.py`, by tools/gen_aio.py), the
rest are written here. The semantics are the sync core's: a twin
runs the core's non-blocking operation on a small thread pool of its log
and waits (`wait=`, `async for`) on the event loop, woken by appends. A log
belongs to the event loop it was opened on; using it from another raises
`WrongEventLoop`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from .. import open as open_log
from ..config import check_int
from .consumer import AsyncConsumer
from .group import AsyncGroup, AsyncGroupConsumer
from .jobs import Jobs
from .log import AsyncLog
from .producer import AsyncProducer
from .queue import AsyncQueue
from .runtime import DEFAULT_THREADS, MAX_THREADS, Runtime, running_loop


class Opening:
    """What `open()` returns: await it for the log, or use it with `async with`
    (the log is closed at the end of the block)."""

    def __init__(self, url: str, threads: int, options: dict[str, Any]):
        self._url = url
        self._threads = threads
        self._options = options
        self._log: AsyncLog | None = None

    async def _open(self) -> AsyncLog:
        runtime = Runtime(running_loop("tidelog.aio.open()"), self._threads)
        try:
            # Opening connects and may migrate the schema: on the pool, not the loop.
            log = await runtime.call(open_log, self._url, **self._options)
        except BaseException:
            runtime.shutdown()
            raise
        return AsyncLog(log, runtime=runtime)

    def __await__(self) -> Generator[Any, None, AsyncLog]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncLog:
        self._log = await self._open()
        return self._log

    async def __aexit__(self, *exc: object) -> None:
        if self._log is not None:
            await self._log.close()


def open(url: str = "tidelog.db", *, threads: int = DEFAULT_THREADS, **options: Any) -> Opening:
    """Open a log for asyncio code: `await open(url)` or `async with open(url) as log`.

    `options` are `tidelog.open`'s, passed through (durability, auto_create,
    clock, ...) and checked there; `threads` is how many store calls of this
    log run at once (the pool the core's operations run on; waits take none).
    """
    check_int("threads", threads, 1, MAX_THREADS)
    return Opening(url, threads, options)


__all__ = [
    "AsyncConsumer",
    "AsyncGroup",
    "AsyncGroupConsumer",
    "AsyncLog",
    "AsyncProducer",
    "AsyncQueue",
    "Jobs",
    "Opening",
    "open",
]
