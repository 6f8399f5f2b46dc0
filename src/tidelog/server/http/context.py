"""What every route shares: the log, the writer, the hub, metrics and settings."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import UnknownGroup
from ...log import Consumer, Log, Producer
from ...notify import along_poll
from ...queues import Queue
from ...retention import DEFAULT_TXN_WINDOW_MS, Cleaner
from ...store.base import NamedConsumers
from ..limits import Limits
from ..runtime.hub import AppendHub
from ..runtime.writer import GroupCommitWriter
from ..throttle import AuthThrottle
from .connections import Connections
from .metrics import Metrics
from .pumps import Pumps
from .remote_members import Members

T = TypeVar("T")

DEFAULT_MAX_BODY = 8 << 20
MAX_WAIT_S = 30.0
DEFAULT_CLEAN_INTERVAL_S = 60.0
READ_THREADS = 4
# A turn's reads go to the pool in up to READ_THREADS hops of at least this
# many calls: one hop for a few, parallel hops (PostgreSQL round trips
# overlap) when hundreds of long-polls wake at once.
READS_A_HOP = 64
HAND_BACK_S = 0.002  # a hop hands its finished reads back to the loop at least this often
_CACHE_LIMIT = 10_000


@dataclass(frozen=True)
class Settings:
    max_body: int = DEFAULT_MAX_BODY
    max_wait: float = MAX_WAIT_S  # long-polls are held to this (30 s at most)
    keepalive: float = 15.0  # seconds between SSE comments on an idle stream
    clean_interval: float = DEFAULT_CLEAN_INTERVAL_S  # background retention; 0: off
    txn_window_ms: int | None = DEFAULT_TXN_WINDOW_MS  # idempotent-write ids older than this are forgotten
    limits: Limits = Limits()  # connections, timeouts, holds: the bounds every front shares


class Context:
    def __init__(self, log: Log, settings: Settings, owns_log: bool):
        self.log = log
        self.settings = settings
        self.owns_log = owns_log
        self.metrics = Metrics(log)
        self.connections = Connections(settings.limits, self.metrics.registry)
        # Failed logins, counted per address across every front of this process.
        self.throttle = AuthThrottle.of(
            settings.limits, count=lambda front, outcome: self.metrics.auth.labels(front, outcome).inc()
        )
        self.hub = AppendHub(log)
        self.writer = GroupCommitWriter(log, self.metrics.written)
        # Store reads block: they run here, each thread with its own SQLite
        # reader connection.
        self.pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="tidelog-read")
        self._reads: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._producers: dict[str | None, Producer] = {}
        self._groups: set[str] = set()
        self._queues: dict[tuple[str, str], Queue] = {}
        self.cleaner: Cleaner | None = None
        self.pumps = Pumps(self, settings.max_wait)
        self.members = Members()
        # Queue handles make their dead-letter topics whatever the policy (as
        # the Python API's do); a handle is only opened on a topic that exists.
        self._queue_log = log.view(auto_create=True)

    async def start(self) -> None:
        self.connections.start()
        self.hub.start()
        self.writer.start()
        if self.settings.clean_interval > 0:
            self.cleaner = Cleaner(
                self.log, self.settings.clean_interval, txn_window_ms=self.settings.txn_window_ms
            ).start()

    async def stop(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.connections.stop)
        self.hub.stop()
        await self.pumps.stop()
        if self.cleaner is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.cleaner.stop)
        await self.writer.stop()
        self.pool.shutdown(wait=True)
        if self.owns_log:
            self.log.close()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking core call off the event loop."""
        call = functools.partial(fn, *args, **kwargs) if kwargs else (lambda: fn(*args))
        return await asyncio.get_running_loop().run_in_executor(self.pool, call)

    async def read(self, fn: Callable[[], T]) -> T:
        """`run` for a blocking store read, with the other reads of this loop turn.

        One append wakes every long-poll waiting on its partition in one
        turn of the loop; each then reads again. Run one by one, 500 woken
        pulls were 500 hand-offs to the pool and back, each thread fighting
        the loop for the GIL (issue 15's fan-out profile). Here the reads a
        turn starts are queued and run together, in order, in a few hops;
        each call still runs alone and gets its own result or exception.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._reads:
            loop.call_soon(self._start_reads)
        self._reads.append((fn, future))
        return await future

    def _start_reads(self) -> None:
        reads, self._reads = self._reads, []
        loop = asyncio.get_running_loop()
        hops = max(1, min(READ_THREADS, len(reads) // READS_A_HOP))
        size = -(-len(reads) // hops)
        for i in range(0, len(reads), size):
            try:
                self.pool.submit(_run_reads, loop, reads[i : i + size])
            except RuntimeError as e:  # the pool is shut down: the server is stopping
                _settle([(future, None, e) for _, future in reads[i : i + size]])

    async def long_poll(self, keys: list[tuple[str, int]], wait: float, read: Callable[[], T]) -> T:
        """Call `read` (blocking, on a thread) until it finds records or `wait` passes;
        wakes on an append to one of `keys`."""
        return await along_poll(
            lambda: self.read(read),
            wait,
            lambda: self.hub.seq,
            lambda seq, left: self.hub.wait(keys, seq, left),
        )

    def producer(self, id: str | None) -> Producer:
        # One producer per id, so keyless sends keep spreading round-robin.
        producer = self._producers.get(id)
        if producer is None:
            if len(self._producers) > _CACHE_LIMIT:
                self._producers.clear()
            producer = self._producers[id] = self.log.producer(id)
        return producer

    def consumer(self, group: str, register: bool = True) -> Consumer:
        """A stateless view of a group: it reads after the committed offset.

        The group is registered the first time the server sees its name
        (unless `register` is false: a look at offsets is no consumer).
        """
        if register and group not in self._groups:
            self.log.consumer(group)  # validates the name and registers the group
            if len(self._groups) > _CACHE_LIMIT:
                self._groups.clear()
            self._groups.add(group)
        return Consumer(self.log, group)

    def queue(
        self, topic: str, group: str, options: dict[str, Any] | None = None, *, create: bool = True
    ) -> Queue:
        """A handle on a queue group (blocking: run it on a thread).

        Opening a group stores its settings on first use (`log.queue`);
        handles are kept, so later requests cost no store write. A handle
        may create its dead-letter topic when it first dead-letters a
        record, as the Python API does; a send route makes a missing topic
        (the log's auto-create policy) before it opens the handle. With
        `create` false (settling a lease) a group that does not exist is
        UnknownGroup: only a send, a receive or an open registers one.
        """
        key = (topic, group)
        queue = self._queues.get(key)
        if queue is None or options:
            self.log.topic(topic)  # UnknownTopic: reading a queue never creates its topic
            store = self.log.store
            if not create and isinstance(store, NamedConsumers) and store.queue_info(group, topic) is None:
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            queue = self._queue_log.queue(topic, group, **(options or {}))
            if len(self._queues) > _CACHE_LIMIT:
                self._queues.clear()
            self._queues[key] = queue
        return queue

    def forget_topic(self, topic: str) -> None:
        """Drop cached handles on a deleted topic (a new topic of that name starts afresh)."""
        for key in [k for k in self._queues if k[0] == topic]:
            del self._queues[key]


def _run_reads(
    loop: asyncio.AbstractEventLoop, reads: list[tuple[Callable[[], Any], asyncio.Future[Any]]]
) -> None:
    """On a pool thread: run each read; hand the outcomes back every few
    milliseconds, so a read answers soon after it ran, not after the last."""
    outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
    since = time.monotonic()
    for fn, future in reads:
        try:
            outcomes.append((future, fn(), None))
        except BaseException as e:  # the caller's to raise, as `run` would
            outcomes.append((future, None, e))
        if time.monotonic() - since >= HAND_BACK_S:
            _hand_back(loop, outcomes)
            outcomes, since = [], time.monotonic()
    if outcomes:
        _hand_back(loop, outcomes)


def _hand_back(
    loop: asyncio.AbstractEventLoop, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
) -> None:
    try:
        loop.call_soon_threadsafe(_settle, outcomes)
    except RuntimeError:  # the loop closed under us: nobody is waiting
        pass


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        if future.done():  # the request went away (a client hung up: its task was cancelled)
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
