"""AsyncConsumer: the asyncio twin of `tidelog.Consumer` (manual assignment)."""

from __future__ import annotations

from typing import Any

from ..errors import TidelogError
from ..log import DEFAULT_BATCH, Consumer, Log
from ..records import Message
from .generated import ConsumerOperations
from .runtime import OnFirstUse, Runtime


class AsyncConsumer(ConsumerOperations):
    """A member of a stream group that names its partitions itself (see `Consumer`).

    The group is registered at the first awaited call (or `await open()`);
    a bad group name or option raises there.
    """

    def __init__(self, runtime: Runtime, log: Log, group: str, **options: Any):
        self._runtime = runtime
        self.group = group
        self._consumer: OnFirstUse[Consumer] = OnFirstUse(
            runtime, lambda: log.consumer(group, None, **options)
        )

    async def _core(self) -> Consumer:
        return await self._consumer.get()

    async def open(self) -> AsyncConsumer:
        """Register the group now (what the sync `log.consumer(group)` does)."""
        await self._consumer.get()
        return self

    async def fetch(
        self,
        topic: str,
        partition: int,
        max_messages: int = DEFAULT_BATCH,
        *,
        exclude_producer: str | None = None,
    ) -> list[Message]:
        """Up to `max_messages` records of one partition after this consumer's position.

        Cancelled while the read runs, the position moves back: the records
        it read come again from the next fetch."""
        consumer = await self._consumer.get()

        def rewind(msgs: list[Message]) -> None:
            if msgs:
                try:
                    consumer.set_position(topic, partition, msgs[0].offset - 1)
                except TidelogError:
                    pass  # the partition is gone: nothing to read again

        return await self._runtime.undoable(
            rewind, consumer.fetch, topic, partition, max_messages, exclude_producer=exclude_producer
        )
