"""The pumps behind miniqueue's subscribe (subscribe.py): one a queue group.

All subscribers of one queue group share a `Pump`: one task that applies
every waiting answer and leases a record for every waiting subscriber in one
trip to the pumps' own thread, so the cost of a trip is shared by all of them.

The pumps live in the server's context and use three things of it
(`PumpContext`): a protocol here rather than an import of context.py, so the
context can hold the pumps and nothing imports back.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ...errors import TidelogError
from ...queues import Delivery, Queue
from ..runtime.hub import AppendHub
from ..runtime.threads import LoopThreads

log = logging.getLogger("tidelog.server")

T = TypeVar("T")

VISIBILITY_S = 30.0  # the lease on a pushed message, extended while the client holds it
EXTEND_EVERY_S = VISIBILITY_S / 3
MAX_DACK_COUNTS = 100_000

# A settle: (command, delivery, seconds for DACK). EXTEND is the client's
# (keep holding) and the server's (the lease of a held message, every EXTEND_EVERY_S).
Settle = tuple[str, Delivery, float | None]
# The client's words as `Queue.settle_many`'s commands.
# RETURN is the server's too: a record leased ahead that the client never saw.
_COMMANDS = {
    "ACK": "ack",
    "NACK": "nack",
    "BACK": "back",
    "DACK": "delay",
    "EXTEND": "extend",
    "RETURN": "return",
}


class PumpContext(Protocol):
    """What the pumps use of the server's context (`context.Context` is one)."""

    hub: AppendHub  # an append wakes a pump that waits for records

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking core call off the event loop."""
        ...

    def queue(
        self, topic: str, group: str, options: dict[str, Any] | None = None, *, create: bool = True
    ) -> Queue:
        """The context's handle on a queue group (blocking)."""
        ...


class Pump:
    """Leases and settles for every WebSocket subscriber of one queue group."""

    def __init__(
        self,
        ctx: PumpContext,
        queue: Queue,
        max_wait: float,
        dack_counts: DackCounts | None = None,
        thread: LoopThreads | None = None,
    ):
        self.ctx = ctx
        self.max_wait = max_wait  # the longest sleep between looks (the server's max_wait)
        self.queue = queue
        self.thread = thread  # where rounds run (None: the context's pool)
        self.users = 0
        self._settles: list[tuple[Settle, asyncio.Future]] = []
        self._waiting: deque[asyncio.Future] = deque()
        self._takers: list[asyncio.Future] = []  # those the running round serves
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.dack_counts = DackCounts() if dack_counts is None else dack_counts
        self.on_idle: Any = lambda pump: None
        self.held: dict[int, Delivery] = {}  # subscriber id -> the message it holds
        self.ahead: dict[int, asyncio.Future] = {}  # subscriber id -> its next record, leased ahead

    def start(self) -> Pump:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tidelog-pump")
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for fut in [f for _, f in self._settles] + list(self._waiting) + self._takers:
            if not fut.done():
                fut.set_exception(ConnectionAbortedError("the server is stopping"))

    def settle(self, settle: Settle) -> asyncio.Future:
        """Apply a client's answer in the next round; the future holds the error, if any."""
        fut = asyncio.get_running_loop().create_future()
        self._settles.append((settle, fut))
        self._wake.set()
        return fut

    def next(self) -> asyncio.Future:
        """A future for the next delivery; cancel it to stop waiting."""
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self._wake.set()
        return fut

    def release(self, d: Delivery) -> None:
        """Back to the front, for a subscriber that went away (nobody waits for the result)."""
        self.settle(("NACK", d, None)).add_done_callback(_ignore)

    def unlease(self, d: Delivery) -> None:
        """Back to the front uncounted: a record leased ahead that no client saw."""
        self.settle(("RETURN", d, None)).add_done_callback(_ignore)

    def unlease_ahead(self, ahead: asyncio.Future | None) -> None:
        """Give back a subscriber's record leased ahead, or stop waiting for it
        (a round that still leases it gives it back)."""
        if ahead is None:
            return
        if not ahead.done():
            ahead.cancel()
        elif not ahead.cancelled() and ahead.exception() is None:
            self.unlease(ahead.result())

    # the round -------------------------------------------------------------------

    def _round(self, settles: list[Settle], want: int) -> tuple[list[Any], list[Delivery], int | None]:
        """On the pumps' thread: apply answers, then lease up to `want` records
        (each answer still succeeds or fails on its own)."""
        q = self.queue
        many = [
            (_COMMANDS[command], d, VISIBILITY_S if command == "EXTEND" else seconds)
            for command, d, seconds in settles
        ]
        try:
            # One store transaction: the answers, then the leases.
            results, got, next_due = q.settle_and_poll(many, want, VISIBILITY_S)
        except TidelogError:
            # One answer is bad (a DACK out of range): nothing was settled;
            # apply them one by one, so only that one fails.
            results = []
            for item in many:
                try:
                    results.append(q.settle_many([item])[0])
                except TidelogError as e:
                    results.append(e)
            got, next_due = q.poll(want, VISIBILITY_S) if want else ([], None)
        return results, got, next_due

    async def _run(self) -> None:
        ctx = self.ctx
        while True:
            if self.users <= 0 and not self._settles:
                self.on_idle(self)  # the last subscriber left and its answers are applied
                return
            await self._wake.wait()
            self._wake.clear()
            while self._settles or self._waiting:
                settles, self._settles = self._settles, []
                # The round serves the subscribers waiting now, in order; one
                # that asks meanwhile waits for the next round, so it never
                # gets a record before the answers said meanwhile are applied.
                takers = self._takers = [f for f in self._waiting if not f.done()]
                self._waiting.clear()
                seq = ctx.hub.seq
                try:
                    results, got, next_due = await self._trip([s for s, _ in settles], len(takers))
                except Exception as e:  # the store failed: tell everyone in this round
                    log.exception("queue pump round failed")
                    for _, fut in settles:
                        if not fut.done():
                            fut.set_result(e)
                    got, next_due = [], None
                    await asyncio.sleep(0.1)
                else:
                    for ((command, d, _), fut), result in zip(settles, results):
                        self._count(command, d, result)
                        if not fut.done():
                            fut.set_result(result)
                waiting = deque(takers)
                for d in got:
                    while waiting and waiting[0].done():
                        waiting.popleft()
                    if waiting:
                        waiting.popleft().set_result(d)
                    else:  # its subscriber left, or answered so that it must come later
                        self.unlease(d)
                self._waiting = deque(f for f in [*waiting, *self._waiting] if not f.done())
                if got or self._settles or not self._waiting:
                    continue
                # Someone waits and nothing is available: sleep until an append,
                # a record falls due, or a subscriber speaks.
                pause = self.max_wait
                if next_due is not None:
                    pause = min(pause, max(0.001, (next_due - self.queue.log.clock()) / 1000))
                await self._sleep(seq, pause)

    async def _trip(self, settles: list[Settle], want: int) -> tuple[list[Any], list[Delivery], int | None]:
        if self.thread is None:
            return await self.ctx.run(self._round, settles, want)
        return await self.thread.run(self._round, settles, want)

    async def _sleep(self, seq: int, pause: float) -> None:
        hub = asyncio.ensure_future(self.ctx.hub.wait([(self.queue.topic, None)], seq, pause))
        spoke = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({hub, spoke}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hub.cancel()
            spoke.cancel()
        self._wake.clear()

    def _count(self, command: str, d: Delivery, result: Any) -> None:
        if isinstance(result, BaseException):
            return
        if command == "DACK":
            self.dack_counts.add(self.queue, d)
        elif command == "ACK":
            self.dack_counts.forget(self.queue, d)

    def dack_count(self, d: Delivery) -> int:
        """The DACKs this server saw for the record, in this queue group."""
        return self.dack_counts.get(self.queue, d)


class DackCounts:
    """How often each record was DACKed, kept by the server across pumps (a
    subscriber that reconnects keeps its backoff) and bounded: the oldest
    counts are dropped first."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, int, int], int] = {}

    def add(self, queue: Queue, d: Delivery) -> None:
        key = (queue.topic, queue.group, d.partition, d.offset)
        self._counts[key] = self._counts.pop(key, 0) + 1
        if len(self._counts) > MAX_DACK_COUNTS:
            del self._counts[next(iter(self._counts))]

    def forget(self, queue: Queue, d: Delivery) -> None:
        self._counts.pop((queue.topic, queue.group, d.partition, d.offset), None)

    def get(self, queue: Queue, d: Delivery) -> int:
        return self._counts.get((queue.topic, queue.group, d.partition, d.offset), 0)


def leased(fut: asyncio.Future) -> bool:
    """The future holds a delivery."""
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _ignore(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


class Pumps:
    """One Pump per queue group with subscribers; stopped when the last one leaves."""

    def __init__(self, ctx: PumpContext, max_wait: float):
        self.ctx = ctx
        self.max_wait = max_wait
        self.running: dict[tuple[str, str], Pump] = {}
        self.dack_counts = DackCounts()
        # Every round of every pump on one thread of their own: a record's
        # chain (answer in, commit, next lease, out) waits for no pool, and
        # the thread keeps one SQLite reader connection for the server's life.
        self.thread = LoopThreads(1, "tidelog-pump")

    async def take(self, topic: str, group: str) -> Pump:
        key = (topic, group)
        pump = self.running.get(key)
        if pump is None:
            queue = await self.ctx.run(self.ctx.queue, topic, group)
            pump = self.running.get(key)  # another subscriber may have made it meanwhile
            if pump is None:
                pump = self.running[key] = Pump(self.ctx, queue, self.max_wait, self.dack_counts, self.thread)
                pump.on_idle = self._ended
                pump.start()
        pump.users += 1
        return pump

    def give_back(self, pump: Pump) -> None:
        """A subscriber left; the pump ends once the last one's answers are applied."""
        pump.users -= 1
        pump._wake.set()

    def _ended(self, pump: Pump) -> None:
        key = (pump.queue.topic, pump.queue.group)
        if self.running.get(key) is pump:
            del self.running[key]

    async def stop(self) -> None:
        """Server shutdown: messages held by connected clients go back to the front."""
        pumps = list(self.running.values())
        self.running.clear()
        owed = [
            (
                p,
                [(_COMMANDS[s[0]], s[1], None) for s, _ in p._settles if s[0] in ("NACK", "RETURN")]
                + [("nack", d, None) for d in p.held.values()]
                + [("return", f.result(), None) for f in p.ahead.values() if leased(f)],
            )
            for p in pumps
        ]
        for pump in pumps:
            pump.stop()

        def release() -> None:
            for pump, settles in owed:
                try:  # each may have been settled or expired meanwhile: a LeaseLost result
                    pump.queue.settle_many(settles)
                except TidelogError:
                    pass

        await self.ctx.run(release)
        await asyncio.get_running_loop().run_in_executor(None, self.thread.stop)
