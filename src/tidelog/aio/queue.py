"""AsyncQueue: the asyncio twin of `tidelog.Queue` (a queue group handle).

    q = log.queue("jobs", visibility_timeout=30)
    await q.send({"to": "a@b.c"}, delay=10)
    for d in await q.receive(max_messages=10, wait=20):
        await q.ack(d)
    async for d in q:              # one delivery at a time, until the log closes
        ...

A waiting receive holds a future on the loop, no thread; it wakes on an
append to the topic or when a delayed, released or expired record falls
due. The waiting receives of one group (in this log) take turns: one looks
again on a wake-up, the next when it leaves. A receive cancelled while its lease is being taken gives the lease
back (a nack to the front) once that finished, so no record waits out its
visibility timeout for a caller that is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..bounds import MAX_WAIT_S, check_seconds
from ..errors import Closed, InvalidRequest, TidelogError
from ..log import Log
from ..queues import Delivery, Queue
from ..records import Prepared
from .generated import QueueOperations
from .producer import AsyncProducer
from .runtime import OnFirstUse, Runtime

# How long `async for` waits in one receive before it looks again (the
# longest wait a receive takes); receives end earlier on an append.
ITERATE_WAIT_S = 3600.0


class AsyncQueue(QueueOperations):
    """A handle on a queue group of a topic (see `Queue`).

    The group is opened at the first awaited call (or `await q.open()`):
    that stores its settings on first use and refuses bad options.
    """

    def __init__(self, runtime: Runtime, log: Log, topic: str, group: str | None = None, **options: Any):
        self._runtime = runtime
        self.topic = topic
        self.group = group if group is not None else topic
        self._log = log
        self._queue = OnFirstUse(runtime, lambda: Queue(log, topic, group, **options))

    async def _core(self) -> Queue:
        return await self._queue.get()

    async def open(self) -> AsyncQueue:
        """Open the group now (what the sync `log.queue(...)` does)."""
        await self._queue.get()
        return self

    def _opened(self) -> Queue:
        queue = self._queue.value
        if queue is None:
            raise InvalidRequest(f"queue {self.topic!r} is not open yet: await q.open() first")
        return queue

    @property
    def ordering(self) -> str:
        """The group's stored ordering, "none" or "key" (known once open)."""
        return self._opened().ordering

    @property
    def visibility_timeout(self) -> float:
        """The handle's default lease, in seconds (known once open)."""
        return self._opened().visibility_timeout

    @property
    def max_deliveries(self) -> int:
        """The group's stored max deliveries (known once open)."""
        return self._opened().max_deliveries

    @property
    def dead_letter(self) -> str:
        """The group's stored dead-letter topic (known once open)."""
        return self._opened().dead_letter

    # sending -------------------------------------------------------------------

    async def prepare(
        self,
        values: list[Any],
        *,
        key: Any = None,
        headers: Any = None,
        delay: float = 0,
        partition: int | None = None,
        producer: AsyncProducer | None = None,
        priority: int = 0,
    ) -> Prepared:
        """Validate and encode a batch for `AsyncLog.write`."""
        queue = await self._queue.get()
        return await self._runtime.call(
            queue.prepare,
            values,
            key=key,
            headers=headers,
            delay=delay,
            partition=partition,
            producer=None if producer is None else producer.sync,
            priority=priority,
        )

    # receiving -----------------------------------------------------------------

    async def receive(
        self, max_messages: int = 1, wait: float = 0, visibility_timeout: float | None = None
    ) -> list[Delivery]:
        """Lease up to `max_messages` records; wait up to `wait` seconds (on the loop) for one."""
        wait = check_seconds("wait", wait, MAX_WAIT_S)  # the sync receive's check; poll checks the rest
        queue = await self._queue.get()
        got, _ = await self._runtime.poll(
            lambda: self._runtime.undoable(_give_back(queue), queue.poll, max_messages, visibility_timeout),
            wait,
            [(queue.topic, None)],
            found=lambda r: r[0],
            due_in=lambda r: None if r[1] is None else (r[1] - self._log.clock()) / 1000,
            turns=(queue.topic, queue.group),
        )
        return got

    async def poll(
        self, max_messages: int = 1, visibility_timeout: float | None = None
    ) -> tuple[list[Delivery], int | None]:
        """Lease what is available now, and when the next held-back record falls due (see `Queue.poll`)."""
        queue = await self._queue.get()
        return await self._runtime.undoable(_give_back(queue), queue.poll, max_messages, visibility_timeout)

    def __aiter__(self) -> AsyncQueue:
        return self

    async def __anext__(self) -> Delivery:
        """The next delivery, waiting on the loop; ends when the log is closed."""
        while True:
            try:
                got = await self.receive(1, wait=ITERATE_WAIT_S)
            except Closed:
                raise StopAsyncIteration from None
            if got:
                return got[0]

    # settling ------------------------------------------------------------------

    async def settle_and_poll(
        self,
        items: Sequence[tuple[str, Delivery, float | None]],
        max_messages: int,
        visibility_timeout: float | None = None,
    ) -> tuple[list[Any], list[Delivery], int | None]:
        """Settle, then lease what is available now, in one store transaction
        where the store can; see `Queue.settle_and_poll`."""
        queue = await self._queue.get()
        give_back = _give_back(queue)
        return await self._runtime.undoable(
            lambda result: give_back((result[1], result[2])),
            queue.settle_and_poll,
            items,
            max_messages,
            visibility_timeout,
        )


def _give_back(queue: Queue) -> Callable[[tuple[list[Delivery], int | None]], None]:
    """The undo of a receive whose caller was cancelled: release its leases."""

    def undo(result: tuple[list[Delivery], int | None]) -> None:
        for d in result[0]:
            try:
                queue.nack(d)
            except TidelogError:
                pass  # settled or expired meanwhile: nothing to give back

    return undo
