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
from ..deadletters import Redriven
from ..errors import Closed, InvalidRequest, LeaseLost, TidelogError
from ..log import Log
from ..queues import Delivery, Queue
from ..records import BatchSent, Prepared, Sent
from ..store.base import Pending, QueueStats
from .producer import AsyncProducer
from .runtime import OnFirstUse, Runtime, Twin

# How long `async for` waits in one receive before it looks again (the
# longest wait a receive takes); receives end earlier on an append.
ITERATE_WAIT_S = 3600.0


class AsyncQueue(Twin):
    """A handle on a queue group of a topic (see `Queue`).

    The group is opened at the first awaited call (or `await q.open()`):
    that stores its settings on first use and refuses bad options.
    """

    core_class = Queue

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

    async def send(
        self,
        value: Any,
        *,
        key: Any = None,
        headers: Any = None,
        delay: float = 0,
        partition: int | None = None,
        priority: int = 0,
        dedup_id: str | None = None,
    ) -> Sent:
        """Send a record; see `Queue.send` (delay, priority, dedup id)."""
        queue = await self._queue.get()
        return await self._runtime.call(
            queue.send,
            value,
            key=key,
            headers=headers,
            delay=delay,
            partition=partition,
            priority=priority,
            dedup_id=dedup_id,
        )

    async def send_batch(
        self,
        values: list[Any],
        *,
        key: Any = None,
        headers: Any = None,
        delay: float = 0,
        partition: int | None = None,
        priority: int = 0,
        dedup_id: str | None = None,
    ) -> BatchSent:
        """Enqueue several records atomically; all or none become visible."""
        queue = await self._queue.get()
        return await self._runtime.call(
            queue.send_batch,
            values,
            key=key,
            headers=headers,
            delay=delay,
            partition=partition,
            priority=priority,
            dedup_id=dedup_id,
        )

    async def dedup(self, dedup_id: str) -> tuple[str, int]:
        """(txn id, txn_since) of a send with `dedup_id`, for `AsyncLog.write`."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.dedup, dedup_id)

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

    async def ack(self, d: Delivery) -> None:
        """Done: never delivered to this group again; an earlier delivery's receipt is LeaseLost (see `Queue.ack`)."""
        queue = await self._queue.get()
        await self._runtime.call(queue.ack, d)

    async def extend(self, d: Delivery, seconds: float) -> Delivery:
        """Push the lease deadline out to `seconds` from now."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.extend, d, seconds)

    async def nack(self, d: Delivery, *, back: bool = False, delay: float | None = None) -> None:
        """Make the record available again: at the front, behind the waiting
        records (`back=True`), or after `delay` seconds."""
        queue = await self._queue.get()
        await self._runtime.call(queue.nack, d, back=back, delay=delay)

    async def settle_many(self, items: Sequence[tuple[str, Delivery, float | None]]) -> list[Any]:
        """Settle many leases in one store transaction; see `Queue.settle_many`."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.settle_many, items)

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

    async def ack_many(self, deliveries: Sequence[Delivery]) -> list[LeaseLost | None]:
        """`ack` many deliveries in one store transaction."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.ack_many, deliveries)

    async def nack_many(
        self, deliveries: Sequence[Delivery], *, back: bool = False, delay: float | None = None
    ) -> list[LeaseLost | None]:
        """`nack` many deliveries in one store transaction."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.nack_many, deliveries, back=back, delay=delay)

    async def extend_many(self, deliveries: Sequence[Delivery], seconds: float) -> list[Delivery | LeaseLost]:
        """`extend` many leases in one store transaction."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.extend_many, deliveries, seconds)

    async def redrive(self, offsets: list[int] | None = None) -> Redriven:
        """Move this group's dead letters (all, or those at `offsets`) back; see `Queue.redrive`."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.redrive, offsets)

    async def reject(self, d: Delivery, reason: str = "rejected") -> int:
        """Move the record straight to the dead-letter topic; returns its offset there."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.reject, d, reason)

    async def stats(self) -> QueueStats:
        """available, in_flight, delayed, dead_lettered, oldest_available_age_ms."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.stats)

    async def in_flight(self, limit: int = 100) -> list[Pending]:
        """The records leased now (see `Queue.in_flight`)."""
        queue = await self._queue.get()
        return await self._runtime.call(queue.in_flight, limit)


def _give_back(queue: Queue) -> Callable[[tuple[list[Delivery], int | None]], None]:
    """The undo of a receive whose caller was cancelled: release its leases."""

    def undo(result: tuple[list[Delivery], int | None]) -> None:
        for d in result[0]:
            try:
                queue.nack(d)
            except TidelogError:
                pass  # settled or expired meanwhile: nothing to give back

    return undo
