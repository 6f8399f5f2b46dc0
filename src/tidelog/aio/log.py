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
from ..log import DEFAULT_BATCH, READ_CHUNK, GroupLag, Log
from ..notify import Listener
from ..outbox import Transaction
from ..records import BatchSent, Message, Prepared
from ..retention import CleanReport
from ..store.base import GroupOffset, PartitionOffsets, Store, TopicInfo
from ..topics import TopicDescription
from .consumer import AsyncConsumer
from .group import AsyncGroup, AsyncGroupConsumer
from .producer import AsyncProducer
from .queue import AsyncQueue
from .runtime import DEFAULT_THREADS, MAX_THREADS, Runtime, Twin, running_loop


class AsyncLog(Twin):
    """A durable, partitioned log for asyncio code; bound to the loop it was opened on.

    `await tidelog.aio.open(url)` makes one; `AsyncLog(log)` wraps a sync
    `Log` that is open already (inside a coroutine, or with `loop=`).
    """

    core_class = Log

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
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this log belongs to."""
        return self._runtime.loop

    # lifecycle -------------------------------------------------------------

    async def close(self) -> None:
        """Wake every waiter, let running calls finish, close the store."""
        await self._runtime.close()

    async def __aenter__(self) -> AsyncLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # topics ----------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = 1, **config: Any) -> TopicInfo:
        """Create a topic; idempotent when partitions and given settings match."""
        return await self._runtime.call(self.sync.create_topic, name, partitions, **config)

    async def topics(self) -> list[TopicInfo]:
        """Every topic, by name."""
        return await self._runtime.call(self.sync.topics)

    async def topic(self, name: str) -> TopicInfo:
        """One topic; UnknownTopic when it does not exist."""
        return await self._runtime.call(self.sync.topic, name)

    async def describe(self, name: str) -> TopicDescription:
        """A topic with each partition's first and last offset and figures."""
        return await self._runtime.call(self.sync.describe, name)

    async def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        """Grow a topic to `partitions` in all; a topic never shrinks."""
        return await self._runtime.call(self.sync.add_partitions, name, partitions)

    async def alter_topic(self, name: str, **config: Any) -> TopicInfo:
        """Change a topic's settings (retention, compaction, limits)."""
        return await self._runtime.call(self.sync.alter_topic, name, **config)

    async def clean(
        self, topic: str | None = None, *, chunk: int = 2000, txn_window: int | str | None = "7d"
    ) -> list[CleanReport]:
        """Apply retention and compaction now (every topic, or one); cleaning
        every topic also forgets idempotent-write ids older than `txn_window`."""
        return await self._runtime.call(self.sync.clean, topic, chunk=chunk, txn_window=txn_window)

    async def last_clean(self, topic: str) -> dict[str, Any] | None:
        """The figures of the topic's last cleaning, if any."""
        return await self._runtime.call(self.sync.last_clean, topic)

    async def delete_topic(self, name: str) -> bool:
        """Delete a topic and its records; False when there was none."""
        return await self._runtime.call(self.sync.delete_topic, name)

    # producing -------------------------------------------------------------

    def producer(self, id: str | None = None) -> AsyncProducer:
        """A producer; `id` names it, so readers can skip its records (`exclude_producer`)."""
        return AsyncProducer(self._runtime, self.sync.producer(id))

    async def write(
        self, batches: list[Prepared], txn: str | None = None, *, txn_since: int = 0
    ) -> list[BatchSent]:
        """Commit prepared batches in one transaction; see `Log.write`."""
        return await self._runtime.call(self.sync.write, batches, txn, txn_since=txn_since)

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

    async def read(
        self, topic: str, partition: int, after: int = 0, limit: int = DEFAULT_BATCH
    ) -> list[Message]:
        """Records after an offset, without a group (an event-log cursor)."""
        return await self._runtime.call(self.sync.read, topic, partition, after, limit)

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

    async def offsets(self, name: str) -> list[PartitionOffsets]:
        """Each partition's first and last offset, without counting records."""
        return await self._runtime.call(self.sync.offsets, name)

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

    async def groups(self) -> list[str]:
        """The names of every group, stream and queue."""
        return await self._runtime.call(self.sync.groups)

    async def queue_groups(self, topic: str | None = None) -> list[tuple[str, str]]:
        """(topic, group) of every queue group, or of one topic's."""
        return await self._runtime.call(self.sync.queue_groups, topic)

    async def group_offsets(self, group: str) -> list[GroupOffset]:
        """A group's committed offset on every partition it committed on."""
        return await self._runtime.call(self.sync.group_offsets, group)

    async def describe_group(self, group: str, topics: Iterable[str] | None = None) -> list[GroupLag]:
        """Committed offset, end offset and lag per partition of a group."""
        return await self._runtime.call(self.sync.describe_group, group, topics)
