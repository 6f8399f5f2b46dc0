"""The job runner on an event loop: the asyncio twin of `tidelog.Jobs`.

    jobs = tidelog.aio.Jobs(log, queue="jobs", concurrency=50)

    @jobs.job("send_email")
    async def send_email(payload): ...      # runs on the loop; a plain def runs in a thread

    await jobs.enqueue("send_email", {"to": "a@b.c"})
    await jobs.run()                        # until jobs.stop() or the task is cancelled

The policy is the sync runner's (`tidelog.jobs`: what a job record is, the
backoff, when a failure dead-letters): here only the running differs. An
`async def` handler is a task on the loop, so fifty running jobs cost no
thread; a plain function runs in a pool of `concurrency` threads made when
the first one runs. Cancelling `run()` is a shutdown: it stops taking work
(a receive in progress gives its leases back), lets the running jobs
finish and settle, then lets the cancellation through.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import signal
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..config import check_name
from ..errors import InvalidRequest, LeaseLost, TidelogError
from ..jobs import Handler, check_runner, failure_reason, job_call, log_redelivery, retry_delay
from ..queues import Delivery
from ..records import Sent

if TYPE_CHECKING:
    from .log import AsyncLog

logger = logging.getLogger("tidelog.jobs")


class Jobs:
    """A job runner over a queue group, on an event loop (see `tidelog.Jobs`)."""

    def __init__(
        self,
        log: AsyncLog,
        queue: str = "jobs",
        *,
        concurrency: int = 4,
        visibility_timeout: float = 30,
        max_deliveries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        group: str | None = None,
        ordering: str | None = None,
    ):
        check_runner(concurrency, backoff, max_backoff)
        self.log = log
        self.queue = log.queue(
            queue,
            group=group,
            visibility_timeout=visibility_timeout,
            max_deliveries=max_deliveries,
            ordering=ordering,
        )
        # What `on` gives another log: the queue's own settings are known only once it is open.
        self._queue_settings = dict(
            group=group,
            visibility_timeout=visibility_timeout,
            max_deliveries=max_deliveries,
            ordering=ordering,
        )
        self.concurrency = concurrency
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._handlers: dict[str, Handler] = {}
        self._stopping = asyncio.Event()
        self._running: dict[asyncio.Task[None], Delivery] = {}
        self._settling: set[str] = set()  # receipts being acked, nacked or rejected: not extended
        self._threads: ThreadPoolExecutor | None = None

    # registering and enqueueing ------------------------------------------------

    def job(self, name: str) -> Callable[[Handler], Handler]:
        """Register a handler (an `async def`, or a function run in a thread) for job `name`."""
        check_name("job", name)

        def register(fn: Handler) -> Handler:
            if name in self._handlers:
                raise InvalidRequest(f"job {name!r} is registered twice")
            self._handlers[name] = fn
            return fn

        return register

    async def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        delay: float = 0,
        key: Any = None,
        priority: int = 0,
        dedup_id: str | None = None,
    ) -> Sent:
        """Enqueue a call of the handler registered as `name`; see `tidelog.Jobs.enqueue`."""
        check_name("job", name)
        return await self.queue.send(
            {"job": name, "payload": payload}, delay=delay, key=key, priority=priority, dedup_id=dedup_id
        )

    # running -------------------------------------------------------------------

    def on(self, log: AsyncLog) -> Jobs:
        """The same handlers and settings on another log; see `tidelog.Jobs.on`."""
        other = Jobs(
            log,
            self.queue.topic,
            concurrency=self.concurrency,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            **self._queue_settings,
        )
        other._handlers = dict(self._handlers)
        return other

    def stop(self) -> None:
        """Stop taking work; `run()` returns once running jobs finished. Any thread may call it."""
        loop = self.log.loop
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            self._stopping.set()
        else:
            loop.call_soon_threadsafe(self._stopping.set)

    def retry_delay(self, delivery_count: int) -> float:
        """Exponential backoff: backoff * 2^(n-1), capped at max_backoff."""
        return retry_delay(self.backoff, self.max_backoff, delivery_count)

    async def run(self, *, poll: float = 1.0, install_signals: bool = False) -> None:
        """Run jobs until `stop()` or until the task running this is cancelled.

        `install_signals=True` makes SIGINT/SIGTERM call `stop()`; it is off
        by default because an asyncio application's server usually owns the
        signals (and cancels its tasks on shutdown).
        """
        await self.queue.open()
        restore = self._install_signals() if install_signals else None
        logger.info(
            "job runner started on the event loop: queue %r, %d handler%s (%s), concurrency %d",
            self.queue.topic,
            len(self._handlers),
            "" if len(self._handlers) == 1 else "s",
            ", ".join(sorted(self._handlers)) or "none",
            self.concurrency,
        )
        heartbeat = asyncio.create_task(self._heartbeat())
        stopping = asyncio.create_task(self._stopping.wait())
        receiving: asyncio.Future[list[Delivery]] | None = None
        try:
            while not self._stopping.is_set():
                free = self.concurrency - len(self._running)
                if free <= 0:
                    await asyncio.wait([*self._running, stopping], return_when=asyncio.FIRST_COMPLETED)
                    continue
                receiving = asyncio.ensure_future(self.queue.receive(max_messages=free, wait=poll))
                await asyncio.wait([receiving, stopping], return_when=asyncio.FIRST_COMPLETED)
                if not receiving.done():
                    break  # stopped while waiting for work
                got, receiving = receiving.result(), None
                for d in got:
                    task = asyncio.create_task(self._execute(d))
                    self._running[task] = d
                    task.add_done_callback(self._finished)
        finally:
            # Also when run() itself was cancelled: take no more work, give
            # back what a receive in progress leased, finish what runs.
            self._stopping.set()
            if receiving is not None and not receiving.done():
                receiving.cancel()
                await asyncio.wait([receiving])
                if not receiving.cancelled() and receiving.exception() is None:
                    for d in receiving.result():  # leased as we stopped: back to the front
                        await self._settle(d, functools.partial(self.queue.nack, d))
                # A lease call the cancel caught running gives its leases back
                # once done: run() returns after that.
                await self.log._runtime.idle()
            if self._running:
                await asyncio.wait(list(self._running))
            heartbeat.cancel()
            stopping.cancel()
            if self._threads is not None:
                self._threads.shutdown(wait=False)
                self._threads = None
            if restore:
                restore()

    def _finished(self, task: asyncio.Task[None]) -> None:
        d = self._running.pop(task, None)
        if d is not None:
            self._settling.discard(d.receipt)

    def _install_signals(self) -> Callable[[], None] | None:
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        try:
            for sig in signals:
                loop.add_signal_handler(sig, self.stop)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no support
            return None

        def restore() -> None:
            for sig in signals:
                loop.remove_signal_handler(sig)

        return restore

    async def _heartbeat(self) -> None:
        # Extend running leases well before they expire, so a long job is
        # never handed to a second worker while it still runs. A timer, not a
        # poll: the runner's waits for work are the queue's.
        visibility = self.queue.visibility_timeout
        while True:
            await asyncio.sleep(max(0.05, visibility / 3))
            for task, d in list(self._running.items()):
                if task.done() or d.receipt in self._settling:
                    continue
                try:
                    new = await self.queue.extend(d, visibility)
                    if task in self._running:
                        self._running[task] = new
                except LeaseLost:
                    if d.receipt not in self._settling:  # settled while we extended: not a loss
                        logger.warning("job lease lost (offset %s); it may run again", d.offset)
                except TidelogError:
                    logger.exception("extending a job lease failed")

    async def _execute(self, d: Delivery) -> None:
        call = job_call(d)
        if call is None:
            logger.error("not a job record at offset %s; dead-lettering it", d.offset)
            await self._settle(d, lambda: self.queue.reject(d, reason="not a job record"))
            return
        name, payload = call
        handler = self._handlers.get(name)
        if handler is None:
            logger.error("no handler for job %r (offset %s); dead-lettering it", name, d.offset)
            await self._settle(d, lambda: self.queue.reject(d, reason=f"unknown job {name!r}"))
            return
        log_redelivery(d, name, self.queue.max_deliveries)
        try:
            if inspect.iscoroutinefunction(handler):
                await handler(payload)
            else:
                result = await asyncio.get_running_loop().run_in_executor(self._pool(), handler, payload)
                if inspect.isawaitable(result):
                    await result
        except Exception as e:
            if d.delivery_count >= self.queue.max_deliveries:
                logger.exception(
                    "job %r failed on its last delivery (%s); dead-lettering it", name, d.delivery_count
                )
                reason = failure_reason(e)
                await self._settle(d, lambda: self.queue.reject(self._current(d), reason=reason))
            else:
                delay = self.retry_delay(d.delivery_count)
                logger.exception(
                    "job %r failed (delivery %s); retrying in %.1fs", name, d.delivery_count, delay
                )
                await self._settle(d, lambda: self.queue.nack(self._current(d), delay=delay))
            return
        await self._settle(d, lambda: self.queue.ack(self._current(d)))

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tidelog-job")
        return self._threads

    def _current(self, d: Delivery) -> Delivery:
        """The delivery with its latest lease (the heartbeat may have extended it)."""
        task = asyncio.current_task()
        current = self._running.get(task) if task is not None else None
        return current if current is not None and current.receipt == d.receipt else d

    async def _settle(self, d: Delivery, action: Callable[[], Awaitable[Any]]) -> None:
        self._settling.add(d.receipt)
        try:
            await action()
        except LeaseLost as e:
            logger.warning("could not settle a job: %s", e)
