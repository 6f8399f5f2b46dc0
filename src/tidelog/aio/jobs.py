"""The job runner on an event loop: the asyncio twin of `tidelog.Jobs`.

    jobs = tidelog.aio.Jobs(log, queue="jobs", concurrency=50)

    @jobs.job("send_email")
    async def send_email(payload): ...      # runs on the loop; a plain def runs in a thread

    job = await jobs.enqueue("send_email", {"to": "a@b.c"})
    await jobs.run()                        # until jobs.stop() or the task is cancelled
    await job.status(), await job.result(timeout=10)

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
import inspect
import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import results, schedules
from ..config import check_name
from ..errors import LeaseLost, ResultTimeout, TidelogError
from ..queues import Delivery
from ..records import Sent
from ..results import DEFAULT_RESULT_TTL_S, JobInfo
from ..runner import End, Run, Runner, Settle, Start, execution
from ..schedules import ScheduleInfo, Scheduler, Tick

if TYPE_CHECKING:
    from .log import AsyncLog

logger = logging.getLogger("tidelog.jobs")


@dataclass(frozen=True)
class JobRef:
    """A job enqueued, asked on the event loop (see `tidelog.jobs.JobRef`)."""

    id: str
    topic: str
    partition: int
    offset: int
    timestamp: int
    jobs: Jobs = field(repr=False, compare=False)

    async def info(self) -> JobInfo:
        """The job's status with its attempts, result or error."""
        return await self.jobs.info(self.id)

    async def status(self) -> str:
        """waiting, delayed, running, done, failed, dead-lettered or cancelled."""
        return (await self.info()).status

    async def result(self, timeout: float | None = None) -> Any:
        """The handler's return value; see `tidelog.jobs.JobRef.result`."""
        return await self.jobs.result(self.id, timeout)

    async def cancel(self) -> JobInfo:
        """Cancel the job if it has not started; JobConflict when it runs or has finished."""
        return await self.jobs.cancel(self.id)

    @property
    def sent(self) -> Sent:
        """Where the job's record went."""
        return Sent(self.topic, self.partition, self.offset, self.timestamp)


class Jobs(Runner):
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
        result_ttl: float = DEFAULT_RESULT_TTL_S,
    ):
        super().__init__(concurrency, backoff, max_backoff, result_ttl)
        self.log = log
        self.queue = log.queue(
            queue,
            group=group,
            visibility_timeout=visibility_timeout,
            max_deliveries=max_deliveries,
            ordering=ordering,
        )
        # What `on` gives another log: the queue's own settings are known only once it is open.
        self._queue_settings: dict[str, Any] = dict(
            group=group,
            visibility_timeout=visibility_timeout,
            max_deliveries=max_deliveries,
            ordering=ordering,
        )
        self._scheduler: Scheduler | None = None
        self._stopping = asyncio.Event()
        self._running: dict[asyncio.Task[None], Delivery] = {}
        self._settling: set[str] = set()  # receipts being acked, nacked or rejected: not extended
        self._threads: ThreadPoolExecutor | None = None

    # scheduling and enqueueing (registering: Runner) --------------------------

    async def schedules(self) -> list[ScheduleInfo]:
        """The queue's schedules with their last and next tick; see `tidelog.Jobs.schedules`."""
        return await self.log._runtime.call(
            schedules.describe, self.log.sync, self.queue.topic, self._schedules
        )

    async def tick(self) -> list[Tick]:
        """One scheduler round now; see `tidelog.Jobs.tick`."""
        queue = await self.queue._core()
        if self._scheduler is None:
            self._scheduler = Scheduler(queue, self._schedules)
        return await self.log._runtime.call(self._scheduler.round)

    async def _schedule(self, poll: float) -> None:
        # As the sync runner's: wake when the next tick falls due, or after `poll`.
        while not self._stopping.is_set():
            try:
                for t in await self.tick():
                    # Routine work, not news: a six-field cron ticks every second.
                    logger.debug("enqueued tick %s of schedule %r", t.tick, t.schedule)
                due = self._scheduler.next_due() if self._scheduler is not None else None
            except Exception:  # the store away, say: the scheduler keeps going
                logger.exception("a scheduler round failed; trying again")
                due = None
            wait = poll if due is None else min(poll, max(0.0, (due - self.log.sync.clock()) / 1000))
            try:
                await asyncio.wait_for(self._stopping.wait(), max(0.01, wait))
            except TimeoutError:
                pass

    async def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        delay: float = 0,
        key: Any = None,
        priority: int = 0,
        dedup_id: str | None = None,
    ) -> JobRef:
        """Enqueue a call of the handler registered as `name`; see `tidelog.Jobs.enqueue`."""
        check_name("job", name)
        sent = await self.queue.send(
            {"job": name, "payload": payload}, delay=delay, key=key, priority=priority, dedup_id=dedup_id
        )
        return JobRef(results.job_id(sent.partition, sent.offset), *sent, jobs=self)

    # what became of a job ------------------------------------------------------

    async def get(self, job_id: str) -> JobRef:
        """The job of this id; UnknownJob when the queue has none."""
        await self.info(job_id)
        partition, offset = results.parse_job_id(job_id)
        rows = await self.log.read(self.queue.topic, partition, after=offset - 1, limit=1)
        timestamp = rows[0].timestamp if rows and rows[0].offset == offset else 0
        return JobRef(job_id, self.queue.topic, partition, offset, timestamp, jobs=self)

    async def info(self, job_id: str) -> JobInfo:
        """The job's status with its attempts, result or error; UnknownJob when the queue has none."""
        q = self.queue
        return await self.log._runtime.call(results.info, self.log.sync, q.topic, q.group, job_id)

    async def status(self, job_id: str) -> str:
        """waiting, delayed, running, done, failed, dead-lettered or cancelled."""
        return (await self.info(job_id)).status

    async def result(self, job_id: str, timeout: float | None = None) -> Any:
        """See `tidelog.jobs.JobRef.result`; waits on the loop."""
        limit = results.check_timeout(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        delay = 0.0
        while True:
            value = results.outcome(await self.info(job_id))
            if value is not results.PENDING:
                return value
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise ResultTimeout(f"job {job_id!r} has not finished after {timeout} s")
            delay = results.next_poll(delay)
            await asyncio.sleep(delay if left is None else min(delay, left))

    async def cancel(self, job_id: str) -> JobInfo:
        """See `tidelog.jobs.JobRef.cancel`."""
        q = self.queue
        return await self.log._runtime.call(
            results.cancel, self.log.sync, q.topic, q.group, job_id, self._ttl_ms
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
            result_ttl=self.result_ttl,
            **self._queue_settings,
        )
        self._registered_on(other)
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
        scheduler = asyncio.create_task(self._schedule(poll)) if self._schedules else None
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
                        await self._settle(d, Settle("nack"))
                # A lease call the cancel caught running gives its leases back
                # once done: run() returns after that.
                await self.log._runtime.idle()
            if self._running:
                await asyncio.wait(list(self._running))
            heartbeat.cancel()
            stopping.cancel()
            if scheduler is not None:
                scheduler.cancel()
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
        # The steps are `runner.execution`'s (the sync runner takes the same ones).
        steps = execution(d, self._handlers, self.queue.max_deliveries, self.retry_delay)
        answer: Any = None
        failed: Exception | None = None
        while True:
            try:
                step = steps.send(answer) if failed is None else steps.throw(failed)
            except StopIteration:
                return
            answer, failed = None, None
            if isinstance(step, Run):
                try:
                    answer = await self._run(step)
                except Exception as e:
                    failed = e
            elif isinstance(step, Start):
                answer = await self._start(d)
            elif isinstance(step, End):
                await self._end(d, step.state, step.body)
            else:
                await self._settle(d, step)

    async def _run(self, step: Run) -> Any:
        """An `async def` handler on the loop, a function in the runner's threads."""
        if inspect.iscoroutinefunction(step.handler):
            return await step.handler(step.payload)
        result = await asyncio.get_running_loop().run_in_executor(self._pool(), step.handler, step.payload)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _start(self, d: Delivery) -> str:
        """The job's status as it starts (see `tidelog.Jobs._start`)."""
        job = results.job_id(d.partition, d.offset)
        q = self.queue
        try:
            return await self.log._runtime.call(
                results.begin, self.log.sync, q.topic, q.group, job, d.delivery_count, self._ttl_ms
            )
        except TidelogError:
            logger.exception("could not read the status of job %s; running it", job)
            return results.RUNNING

    async def _done(self, d: Delivery, value: Any) -> None:
        """The job's value and its ack, in one transaction (see `tidelog.results.done`)."""
        queue = await self.queue._core()
        await self.log._runtime.call(results.done, queue, d, value, self._ttl_ms)

    async def _end(self, d: Delivery, state: str, body: dict[str, Any]) -> None:
        """Record how a run ended, before the ack (see `tidelog.Jobs._end`)."""
        job = results.job_id(d.partition, d.offset)
        q = self.queue
        try:
            await self.log._runtime.call(
                results.finish,
                self.log.sync,
                q.topic,
                q.group,
                job,
                state,
                body,
                d.delivery_count,
                self._ttl_ms,
            )
        except TidelogError:
            logger.exception("could not record the end of job %s (%s)", job, state)

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tidelog-job")
        return self._threads

    def _current(self, d: Delivery) -> Delivery:
        """The delivery with its latest lease (the heartbeat may have extended it)."""
        task = asyncio.current_task()
        current = self._running.get(task) if task is not None else None
        return current if current is not None and current.receipt == d.receipt else d

    async def _settle(self, d: Delivery, step: Settle) -> None:
        self._settling.add(d.receipt)
        current = self._current(d)
        try:
            if step.command == "ack":
                await self.queue.ack(current)
            elif step.command == "nack":
                await self.queue.nack(current, delay=step.delay)
            elif step.command == "reject":
                await self.queue.reject(current, reason=step.reason)
            else:
                await self._done(current, step.value)
        except LeaseLost as e:
            logger.warning("could not settle a job: %s", e)
