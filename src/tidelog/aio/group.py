"""The asyncio twins of stream-group members (`GroupConsumer`) and views (`Group`).

    async with log.consumer("billing", topics=["orders"]) as consumer:
        async for msg in consumer:          # waits on the loop for records
            ...
            await consumer.commit(msg)

The member joins at its first awaited call (`open()`, `async with`, a poll);
heartbeats run in the core's background thread, as for a sync member, so a
busy loop never makes a member look dead. `on_assign` and `on_revoke` may
be `async def`: they then run on the loop, and may await `commit`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from ..errors import Closed, GroupError, TidelogError
from ..groups import Group, GroupConsumer, TopicPartition
from ..log import Log
from ..records import Message
from .generated import GroupConsumerOperations, GroupOperations
from .runtime import OnFirstUse, Runtime, on_loop

# How long `async for` waits in one poll before it looks again (seconds);
# polls end earlier on an append.
ITERATE_WAIT_S = 60.0
ITERATE_BATCH = 500


class AsyncGroupConsumer(GroupConsumerOperations):
    """A member of a stream group with automatic partition assignment (see `GroupConsumer`)."""

    def __init__(self, runtime: Runtime, log: Log, group: str, topics: Iterable[str], **options: Any):
        self._runtime = runtime
        self.group = group
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        for name in ("on_assign", "on_revoke"):
            options[name] = on_loop(runtime, options.get(name))
        self._consumer = OnFirstUse(runtime, lambda: GroupConsumer(log, group, self.topics, **options))
        # Records `async for` read ahead and has not yielded yet.
        self._ahead: deque[Message] = deque()
        self._closed = False

    async def _core(self) -> GroupConsumer:
        return await self._consumer.get()

    async def open(self) -> AsyncGroupConsumer:
        """Join the group now (what the sync constructor does); bad options raise here."""
        await self._consumer.get()
        return self

    def _joined(self) -> GroupConsumer | None:
        return self._consumer.value

    # what the member knows (no I/O) --------------------------------------------

    @property
    def member_id(self) -> str | None:
        """This member's id (None until it joined, unless given as `member_id=`)."""
        consumer = self._joined()
        return None if consumer is None else consumer.member_id

    @property
    def generation(self) -> int:
        """The assignment version this member acts on (0 before it joined)."""
        consumer = self._joined()
        return 0 if consumer is None else consumer.generation

    @generation.setter
    def generation(self, value: int) -> None:
        consumer = self._joined()
        if consumer is None:
            raise GroupError("this consumer has not joined its group yet: await consumer.open()")
        consumer.generation = value

    def assignment(self) -> list[TopicPartition]:
        """The (topic, partition) pairs this member holds now ([] before it joined)."""
        consumer = self._joined()
        return [] if consumer is None else consumer.assignment()

    def revoking(self) -> list[TopicPartition]:
        """Partitions held now but assigned elsewhere: commit them, then release."""
        consumer = self._joined()
        return [] if consumer is None else consumer.revoking()

    # membership ------------------------------------------------------------------

    async def set_position(self, topic: str, partition: int, offset: int) -> None:
        """Move where this member's next poll of a held partition starts (after `offset`)."""
        consumer = await self._consumer.get()
        self._runtime.check()
        consumer.set_position(topic, partition, offset)
        self._drop_ahead({(topic, partition)})

    # consuming ---------------------------------------------------------------

    async def poll(self, timeout: float = 1.0, max_messages: int = 500) -> list[Message]:
        """Records from the member's partitions; waits up to `timeout` on the loop for one.

        Cancelled while a read runs, the positions move back: the records it
        read come again from the next poll, so `commit()` never covers them."""
        consumer = await self._consumer.get()
        wait = max(0.0, timeout)

        def rewind(msgs: list[Message]) -> None:
            _rewind(consumer, msgs)

        # The core's poll with no wait is one read (after releasing revoked
        # partitions); the wait between reads happens here, on the loop. Half
        # a second at most between reads, as in the core: revoked partitions
        # are released from a read.
        return await self._runtime.poll(
            lambda: self._runtime.undoable(rewind, consumer.poll, 0, max_messages),
            wait,
            [(topic, None) for topic in consumer.topics],
            due_in=lambda _: 0.5,
        )

    async def commit(self, msg: Message | None = None) -> None:
        """Commit the position of everything poll returned, or up to `msg`.

        With `async for`, `commit()` covers what the iteration yielded: what
        it read ahead is read again first. NotAssigned / StaleGeneration as
        for the sync member."""
        consumer = await self._consumer.get()
        if msg is not None:
            await self._runtime.call(consumer.commit, msg)
            return
        ahead = list(self._ahead)
        self._ahead.clear()

        def commit_yielded() -> None:
            _rewind(consumer, ahead)
            consumer.commit()

        await self._runtime.call(commit_yielded)

    async def close(self) -> None:
        """Leave the group: `on_revoke` runs for everything held, then the
        partitions go to the remaining members."""
        self._closed = True
        self._ahead.clear()
        consumer = self._joined()
        if consumer is not None:
            await self._runtime.call(consumer.close)

    async def __aenter__(self) -> AsyncGroupConsumer:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncGroupConsumer:
        return self

    async def __anext__(self) -> Message:
        """The next record of the member's partitions, waiting for one on the
        loop; the iteration ends when the consumer or its log is closed."""
        while True:
            if self._closed:
                raise StopAsyncIteration
            held = set(self.assignment())
            while self._ahead:
                msg = self._ahead.popleft()
                if (msg.topic, msg.partition) in held:  # a revoked partition's records are its next owner's
                    return msg
            try:
                got = await self.poll(timeout=ITERATE_WAIT_S, max_messages=ITERATE_BATCH)
            except Closed:
                raise StopAsyncIteration from None
            except GroupError:
                if self._closed:
                    raise StopAsyncIteration from None
                raise
            self._ahead.extend(got)

    def _drop_ahead(self, partitions: set[TopicPartition]) -> None:
        self._ahead = deque(m for m in self._ahead if (m.topic, m.partition) not in partitions)


def _rewind(consumer: GroupConsumer, msgs: list[Message]) -> None:
    """Move each partition's position back to before its first record in `msgs`."""
    first: dict[TopicPartition, int] = {}
    for msg in msgs:
        first.setdefault((msg.topic, msg.partition), msg.offset)
    for (topic, partition), offset in first.items():
        try:
            consumer.set_position(topic, partition, offset - 1)
        except TidelogError:
            pass  # no longer held: its next owner starts from the committed offset


class AsyncGroup(GroupOperations):
    """A view of a stream group: members, generation, assignment, lag (see `Group`)."""

    def __init__(self, runtime: Runtime, group: Group):
        self._runtime = runtime
        self.sync = group

    async def _core(self) -> Group:
        return self.sync

    @property
    def name(self) -> str:
        """The group's name."""
        return self.sync.name
