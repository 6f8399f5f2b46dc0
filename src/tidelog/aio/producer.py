"""AsyncProducer: the asyncio twin of `tidelog.Producer`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..log import Producer
from ..records import BatchSent, Prepared, Sent
from .runtime import Runtime, Twin


class AsyncProducer(Twin):
    """Sends records; each send returns after its transaction committed.

    A send cancelled while its transaction runs may still commit, as a sync
    send interrupted by a timeout may: at least once, never half a batch.
    """

    core_class = Producer

    def __init__(self, runtime: Runtime, producer: Producer):
        self._runtime = runtime
        self.sync = producer

    async def _core(self) -> Producer:
        return self.sync

    @property
    def id(self) -> str | None:
        """The producer's name, or None."""
        return self.sync.id

    async def send(
        self,
        topic: str,
        value: Any,
        *,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
    ) -> Sent:
        """Append one record; returns after it is committed."""
        return await self._runtime.call(
            self.sync.send, topic, value, key=key, partition=partition, headers=headers
        )

    async def send_batch(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
    ) -> BatchSent:
        """Append records atomically to one partition, with consecutive offsets."""
        return await self._runtime.call(
            self.sync.send_batch, topic, values, key=key, partition=partition, headers=headers
        )

    async def prepare(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
    ) -> Prepared:
        """Validate and encode a batch without writing it (see `AsyncLog.write`);
        awaited because choosing a partition may look the topic up."""
        return await self._runtime.call(
            self.sync.prepare,
            topic,
            values,
            key=key,
            partition=partition,
            headers=headers,
            timestamp=timestamp,
        )
