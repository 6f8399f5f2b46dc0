"""AsyncProducer: the asyncio twin of `tidelog.Producer`."""

from __future__ import annotations

from ..log import Producer
from .generated import ProducerOperations
from .runtime import Runtime


class AsyncProducer(ProducerOperations):
    """Sends records; each send returns after its transaction committed.

    A send cancelled while its transaction runs may still commit, as a sync
    send interrupted by a timeout may: at least once, never half a batch.
    """

    def __init__(self, runtime: Runtime, producer: Producer):
        self._runtime = runtime
        self.sync = producer

    async def _core(self) -> Producer:
        return self.sync

    @property
    def id(self) -> str | None:
        """The producer's name, or None."""
        return self.sync.id
