"""AsyncLog: the asyncio twin of `tidelog.Log`.

Same names, arguments, results and errors; every operation that touches
the store is awaited. Factories that do no I/O (`producer`, `consumer`,
`group`, `queue`) return their handle at once, as in the sync API; a handle
whose sync constructor does I/O makes it on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, overload

from ..config import check_int, check_name
from ..log import READ_CHUNK, Log
from ..notify import Listener
from ..outbox import Transaction
from ..records import Message
from ..store.base import Store
from .consumer import AsyncConsumer
from .generated import LogOperations
from .group import AsyncGroup, AsyncGroupConsumer
from .producer import AsyncProducer
from .queue import AsyncQueue
from .runtime import DEFAULT_THREADS, MAX_THREADS, Runtime, running_loop


class AsyncLog(LogOperations):
    """A durable, partitioned log for asyncio code; bound to the loop it was opened on.

    `await tidelog.aio.open(url)` makes one; `AsyncLog(log)` wraps a sync
    `Log` that is open already (inside a coroutine, or with `loop=`).
    """

    def __init__(
        self,
        log: Log,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        threads: int = DEFAULT_THREADS,
        runtime: Runtime | None = None,
    ):
        if runtime is None:
            check_int("threads", threads, 1, MAX_THREADS)
            runtime = Runtime(loop or running_loop("AsyncLog(log)"), threads)
        # A view (`view()`) shares its log's runtime, which goes on closing that log.
        if runtime.log is None:
            runtime.log = log
        self._runtime = runtime
        self.sync = log
        """The sync `Log` underneath (for code that is not asyncio)."""

    async def _core(self) -> Log:
        return self.sync

    @property
    def store(self) -> Store:
        """The store under the log."""
        return self.sync.store

    @property
    def clock(self) -> Callable[[], int]:
        """The log's clock (ms since epoch)."""
        return self.sync.clock

    @property
    def auto_create(self) -> bool:
        """Whether a send to a missing topic creates it (with one partition)."""
        return self.sync.auto_create

    @property
    def default_partitions(self) -> int:
        """The partitions of a topic a write creates implicitly."""
        return self.sync.default_partitions

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this log belongs to."""
        return self._runtime.loop

    def view(self, *, auto_create: bool | None = None, default_partitions: int | None = None) -> AsyncLog:
        """Another log on the same store, clock, wake-ups and threads, with its
        own topic policy (unset: this log's); see `Log.view`. No I/O. Closing
        a view closes the log."""
        return AsyncLog(
            self.sync.view(auto_create=auto_create, default_partitions=default_partitions),
            runtime=self._runtime,
        )

    # lifecycle -------------------------------------------------------------

    async def close(self) -> None:
        """Wake every waiter, let running calls finish, close the store."""
        await self._runtime.close()

    async def __aenter__(self) -> AsyncLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # producing -------------------------------------------------------------

    def producer(self, id: str | None = None) -> AsyncProducer:
        """A producer; `id` names it, so readers can skip its records (`exclude_producer`)."""
        return AsyncProducer(self._runtime, self.sync.producer(id))

    def transaction(self, conn: Any) -> Transaction:
        """The outbox on the application's own connection, as `Log.transaction`.

        That connection (sqlite3, or a sync psycopg one) blocks whoever uses
        it, so this is the sync object: use it where the application already
        runs its own statements on that connection (a thread, or briefly on
        the loop).
        """
        return self.sync.transaction(conn)

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(topic, partition, last_offset)` after appends, on the
        appending thread (see `Log.listen`); returns the function that stops it."""
        return self.sync.listen(listener)

    async def wait_for_records(self, topic: str, partition: int, after: int, timeout: float) -> bool:
        """Wait until the partition holds a record past `after`, or `timeout`
        seconds pass; True when there is one. Wakes on the append, on the loop."""
        check_name("topic", topic)
        check_int("partition", partition, 0)
        store = self.sync.store
        found = await self._runtime.poll(
            lambda: self._runtime.call(store.read, topic, partition, after, 1),
            max(0.0, timeout),
            [(topic, partition)],
        )
        return bool(found)

    # reading -----------------------------------------------------------------

    def iter(
        self, topic: str, partition: int, after: int = 0, *, chunk: int = READ_CHUNK
    ) -> AsyncIterator[Message]:
        """Every record of a partition after `after`, read `chunk` records at a
        time on the log's threads: `async for msg in log.iter(...)`. Bad
        arguments raise here; an unknown topic or partition at the first step."""
        check_name("topic", topic)
        check_int("partition", partition, 0)
        check_int("after", after, 0)
        check_int("chunk", chunk, 1, READ_CHUNK)
        return self._iter(topic, partition, after, chunk)

    async def _iter(self, topic: str, partition: int, after: int, chunk: int) -> AsyncIterator[Message]:
        while True:
            batch = await self._runtime.call(self.sync.read, topic, partition, after, chunk)
            for message in batch:
                yield message
            if len(batch) < chunk:
                return
            after = batch[-1].offset

    @overload
    def consumer(self, group: str, topics: None = None, **options: Any) -> AsyncConsumer: ...

    @overload
    def consumer(self, group: str, topics: Iterable[str], **options: Any) -> AsyncGroupConsumer: ...

    def consumer(
        self, group: str, topics: Iterable[str] | None = None, **options: Any
    ) -> AsyncConsumer | AsyncGroupConsumer:
        """A stream group member: manual assignment without `topics`, a member
        of the group sharing the topics' partitions with them (see `Log.consumer`).

        No I/O here: the member joins (and bad options raise) at its first
        awaited call, `await consumer.open()` or `async with consumer`.
        """
        if topics is not None:
            return AsyncGroupConsumer(self._runtime, self.sync, group, topics, **options)
        return AsyncConsumer(self._runtime, self.sync, group, **options)

    def group(self, name: str) -> AsyncGroup:
        """A view of a stream group: members, generation, assignment, lag."""
        return AsyncGroup(self._runtime, self.sync.group(name))

    def queue(self, topic: str, group: str | None = None, **options: Any) -> AsyncQueue:
        """A queue group handle on `topic` (see `Log.queue`).

        No I/O here: the group is opened (its settings stored on first use,
        bad options refused) at the first awaited call or `await q.open()`.
        """
        return AsyncQueue(self._runtime, self.sync, topic, group, **options)
