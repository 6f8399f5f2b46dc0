"""The local engine: asyncio and httpx in one process, no JVM.

One task per (entry, partition), each a loop over one partition in order:

    fetch up to batch_size after the group's committed offset
    POST it; on 2xx commit through its last offset, else wait `interval`
    and POST the same batch again
    an empty fetch waits `interval`; a non-empty one is followed at once

Partitions go on concurrently and independently; one failing endpoint or
partition holds up no other. The store calls (fetch, commit) are short and
run on worker threads so the event loop keeps serving the other requests.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from ..log import Consumer, Log
from ..logs import event
from . import delivery
from .config import Feed, WorkerConfig
from .metrics import Metrics
from .shutdown import Shutdown


class LocalEngine:
    def __init__(self, log: Log, config: WorkerConfig, metrics: Metrics, shutdown: Shutdown):
        self.log = log
        self.config = config
        self.metrics = metrics
        self.shutdown = shutdown
        self._stopping: asyncio.Event | None = None

    def run(self) -> None:
        with self.shutdown.signals():
            asyncio.run(self._main())

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = self._stopping = asyncio.Event()

        def begin_shutdown() -> None:
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:
                pass  # the loop has already ended

        self.shutdown.on_set(begin_shutdown)
        clients = [self._client(feed) for feed in self.config.feeds]
        try:
            async with asyncio.TaskGroup() as tasks:
                for feed, client in zip(self.config.feeds, clients):
                    for partition in feed.partitions or ():
                        tasks.create_task(self._partition(feed, partition, client))
        finally:
            for client in clients:
                await client.aclose()

    def _client(self, feed: Feed) -> httpx.AsyncClient:
        n = len(feed.partitions or ()) or 1
        return httpx.AsyncClient(
            headers=delivery.request_headers(feed),
            timeout=delivery.timeout(feed),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
        )

    async def _partition(self, feed: Feed, partition: int, client: httpx.AsyncClient) -> None:
        consumer = self.log.consumer(feed.group)
        assert isinstance(consumer, Consumer)
        where = {"group": feed.group, "topic": feed.topic, "partition": partition}
        committed = await asyncio.to_thread(consumer.committed, feed.topic, partition)
        event(logging.INFO, "partition started", **where, committed=committed, endpoint=feed.endpoint)
        while not self._stopped():
            batch = await asyncio.to_thread(consumer.fetch, feed.topic, partition, feed.batch_size)
            if not batch:
                await self._pause(feed.interval_ms)
                continue
            first, last = batch[0].offset, batch[-1].offset
            content = delivery.body(feed.topic, partition, delivery.messages_json(batch))
            while True:
                attempt = await delivery.post_async(client, feed.endpoint, content)
                if attempt.ok:
                    break
                self.metrics.failed(feed.group, feed.topic, partition, attempt.cause or "unknown")
                event(
                    logging.WARNING,
                    "delivery failed",
                    **where,
                    first=first,
                    last=last,
                    cause=attempt.cause,
                    detail=attempt.detail,
                    retry_in_ms=feed.interval_ms,
                )
                if await self._pause(feed.interval_ms):
                    # Shutting down: the batch stays uncommitted and is the
                    # first one a restarted worker posts.
                    return
            await asyncio.to_thread(consumer.commit, feed.topic, partition, last)
            self.metrics.delivered(feed.group, feed.topic, partition, len(batch))
            event(logging.DEBUG, "batch delivered", **where, first=first, last=last, records=len(batch))
        event(logging.INFO, "partition stopped", **where)

    def _stopped(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    async def _pause(self, ms: int) -> bool:
        """Wait `ms`, or less if shutdown begins; True when it has."""
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), ms / 1000)
        except TimeoutError:
            pass
        return self._stopping.is_set()
