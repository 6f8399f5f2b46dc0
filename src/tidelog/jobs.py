"""A job runner on top of a queue group.

    jobs = tidelog.Jobs(log, queue="jobs", concurrency=4)

    @jobs.job("send_email")
    def send_email(payload): ...

    job = jobs.enqueue("send_email", {"to": "a@b.c"})
    jobs.run()          # until SIGINT/SIGTERM or jobs.stop()
    job.status(), job.result(timeout=10), jobs.get(job.id).cancel()

A job is a record `{"job": name, "payload": ...}`; its id names the record
(`tidelog.results`). The runner keeps up to `concurrency` jobs running,
extends each running job's lease, records the handler's value and acks on
success, retries a failure with exponential backoff (a nack with delay),
dead-letters after the queue's max deliveries, and on shutdown stops taking
work and lets running jobs finish. What became of a job is kept for
`result_ttl` seconds after it finished.

Registering handlers and what happens to one delivery are `tidelog.runner`'s,
written once for this runner and the asyncio one (`tidelog.aio.Jobs`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import results, schedules
from .config import check_name
from .errors import LeaseLost, TidelogError
from .queues import Delivery
from .records import Sent
from .results import DEFAULT_RESULT_TTL_S, JobInfo
from .runner import End, Run, Runner, Settle, Start, execution
from .schedules import ScheduleInfo, Scheduler, Tick

if TYPE_CHECKING:
    from .log import Log

logger = logging.getLogger("tidelog.jobs")


@dataclass(frozen=True)
class JobRef:
    """A job enqueued: where its record went (as `Sent`: topic, partition,
    offset, timestamp) and its `id`; ask it what became of the job."""

    id: str
    topic: str
    partition: int
    offset: int
    timestamp: int
    jobs: Jobs = field(repr=False, compare=False)

    def info(self) -> JobInfo:
        """The job's status with its attempts, result or error."""
        return self.jobs.info(self.id)

    def status(self) -> str:
        """waiting, delayed, running, done, failed, dead-lettered or cancelled."""
        return self.info().status

    def result(self, timeout: float | None = None) -> Any:
        """The handler's return value, waiting up to `timeout` seconds (None:
        as long as it takes) for the job to finish. JobFailed when it was
        dead-lettered, JobCancelled, ResultTimeout when the time ran out."""
        return self.jobs.result(self.id, timeout)

    def cancel(self) -> JobInfo:
        """Cancel the job if it has not started; JobConflict when it runs or has finished."""
        return self.jobs.cancel(self.id)

    @property
    def sent(self) -> Sent:
        """Where the job's record went."""
        return Sent(self.topic, self.partition, self.offset, self.timestamp)


class Jobs(Runner):
    """A job runner over a queue group: register handlers by name, enqueue calls, run workers.

    Each job is a queue record; a handler that returns acks it, one that raises
    is retried after an exponential backoff until the queue's max deliveries
    send it to the dead-letter topic.
    """

    def __init__(
        self,
        log: Log,
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
        # ordering="key": jobs enqueued with the same key never run at once
        # and run in the order enqueued (a retry holds the key's later jobs back).
        super().__init__(concurrency, backoff, max_backoff, result_ttl)
        self.queue = log.queue(
            queue,
            group=group,
            visibility_timeout=visibility_timeout,
            max_deliveries=max_deliveries,
            ordering=ordering,
        )
        self._scheduler: Scheduler | None = None
        self._stopping = threading.Event()
        self._drained = threading.Event()  # set once run() has no job left running
        self._running: dict[Future[None], Delivery] = {}
        self._settled: set[str] = set()  # receipts being acked or nacked: no longer extended
        self._lock = threading.Lock()

    # scheduling and enqueueing (registering: Runner) --------------------------

    def schedules(self) -> list[ScheduleInfo]:
        """The queue's schedules (these and any other runner's that ticked) with their last and next tick."""
        return schedules.describe(self.queue.log, self.queue.topic, self._schedules)

    def tick(self) -> list[Tick]:
        """One scheduler round now: enqueue the ticks due by the log's clock that
        no runner enqueued yet (`run()` does this as ticks fall due)."""
        if self._scheduler is None:
            self._scheduler = Scheduler(self.queue, self._schedules)
        return self._scheduler.round()

    def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        delay: float = 0,
        key: Any = None,
        priority: int = 0,
        dedup_id: str | None = None,
    ) -> JobRef:
        """Enqueue a call of the handler registered as `name` with these
        arguments; `priority` (0-9) runs it before waiting jobs of lower
        priority; a `dedup_id` enqueued again within the topic's dedup window
        enqueues nothing (the first one's job is returned)."""
        check_name("job", name)
        sent = self.queue.send(
            {"job": name, "payload": payload}, delay=delay, key=key, priority=priority, dedup_id=dedup_id
        )
        return self._ref(sent)

    def _ref(self, sent: Sent) -> JobRef:
        return JobRef(results.job_id(sent.partition, sent.offset), *sent, jobs=self)

    # what became of a job ------------------------------------------------------

    def get(self, job_id: str) -> JobRef:
        """The job of this id (as `enqueue` returned it); UnknownJob when the queue has none."""
        self.info(job_id)
        partition, offset = results.parse_job_id(job_id)
        rows = self.queue.log.read(self.queue.topic, partition, after=offset - 1, limit=1)
        timestamp = rows[0].timestamp if rows and rows[0].offset == offset else 0
        return JobRef(job_id, self.queue.topic, partition, offset, timestamp, jobs=self)

    def info(self, job_id: str) -> JobInfo:
        """The job's status with its attempts, result or error; UnknownJob when the queue has none."""
        return results.info(self.queue.log, self.queue.topic, self.queue.group, job_id)

    def status(self, job_id: str) -> str:
        """waiting, delayed, running, done, failed, dead-lettered or cancelled."""
        return self.info(job_id).status

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """See `JobRef.result`."""
        return results.wait(lambda: self.info(job_id), job_id, timeout)

    def cancel(self, job_id: str) -> JobInfo:
        """See `JobRef.cancel`."""
        return results.cancel(self.queue.log, self.queue.topic, self.queue.group, job_id, self._ttl_ms)

    # running -------------------------------------------------------------------

    def on(self, log: Log) -> Jobs:
        """The same handlers and settings on another log (`tidelog --db URL jobs run`)."""
        other = Jobs(
            log,
            self.queue.topic,
            concurrency=self.concurrency,
            visibility_timeout=self.queue.visibility_timeout,
            max_deliveries=self.queue.max_deliveries,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            group=self.queue.group,
            ordering=self.queue.ordering,
            result_ttl=self.result_ttl,
        )
        self._registered_on(other)
        return other

    def stop(self) -> None:
        """Stop taking work; `run()` returns once running jobs finished."""
        self._stopping.set()

    def run(self, *, poll: float = 1.0, install_signals: bool = True) -> None:
        """Run jobs until `stop()` or SIGINT/SIGTERM."""
        restore = self._install_signals() if install_signals else None
        logger.info(
            "job runner started: queue %r, %d handler%s (%s), concurrency %d",
            self.queue.topic,
            len(self._handlers),
            "" if len(self._handlers) == 1 else "s",
            ", ".join(sorted(self._handlers)) or "none",
            self.concurrency,
        )
        self._drained.clear()
        heartbeat = threading.Thread(target=self._heartbeat, name="tidelog-jobs-heartbeat", daemon=True)
        heartbeat.start()
        scheduler = None
        if self._schedules:
            scheduler = threading.Thread(
                target=self._schedule, args=(poll,), name="tidelog-jobs-scheduler", daemon=True
            )
            scheduler.start()
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="tidelog-job") as pool:
                while not self._stopping.is_set():
                    free = self.concurrency - len(self._running)
                    if free <= 0:
                        self._wait_for_a_slot()
                        continue
                    for d in self.queue.receive(max_messages=free, wait=poll):
                        future = pool.submit(self._execute, d)
                        with self._lock:
                            self._running[future] = d
                        future.add_done_callback(self._finished)
                # Leaving the pool's `with` waits for the running jobs.
        finally:
            self._stopping.set()
            self._drained.set()
            heartbeat.join(timeout=5)
            if scheduler is not None:
                scheduler.join(timeout=5)
            if restore:
                restore()

    def _schedule(self, poll: float) -> None:
        # Wake when the next tick falls due, or after `poll` at the latest (a
        # clock that jumps, as a test's does, is seen within that).
        while not self._stopping.is_set():
            try:
                for t in self.tick():
                    # Routine work, not news: a six-field cron ticks every second.
                    logger.debug("enqueued tick %s of schedule %r", t.tick, t.schedule)
                due = self._scheduler.next_due() if self._scheduler is not None else None
            except Exception:  # the store away, say: the scheduler keeps going
                logger.exception("a scheduler round failed; trying again")
                due = None
            wait = poll if due is None else min(poll, max(0.0, (due - self.queue.log.clock()) / 1000))
            self._stopping.wait(max(0.01, wait))

    def _wait_for_a_slot(self) -> None:
        with self._lock:
            running = list(self._running)
        if running:
            from concurrent.futures import FIRST_COMPLETED, wait

            wait(running, timeout=0.5, return_when=FIRST_COMPLETED)

    def _finished(self, future: Future[None]) -> None:
        with self._lock:
            d = self._running.pop(future, None)
            if d is not None:
                self._settled.discard(d.receipt)

    def _install_signals(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, lambda *_: self.stop())

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _heartbeat(self) -> None:
        # Extend running leases well before they expire, so a long job is
        # never handed to a second worker while it still runs. It keeps its
        # pace after stop(): the jobs still running need their leases until
        # run() has waited for them.
        interval = max(0.05, self.queue.visibility_timeout / 3)
        while not self._drained.wait(interval):
            with self._lock:
                running = [(f, d) for f, d in self._running.items() if d.receipt not in self._settled]
            for future, d in running:
                if future.done():
                    continue
                try:
                    new = self.queue.extend(d, self.queue.visibility_timeout)
                    with self._lock:
                        if future in self._running:
                            self._running[future] = new
                except LeaseLost:
                    with self._lock:
                        settled = d.receipt in self._settled  # acked since we looked: not a loss
                    if not settled:
                        logger.warning("job lease lost (offset %s); it may run again", d.offset)
                except TidelogError:
                    logger.exception("extending a job lease failed")

    def _execute(self, d: Delivery) -> None:
        # The steps are `runner.execution`'s (the asyncio runner takes the same ones).
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
                    answer = step.handler(step.payload)
                    if inspect.isawaitable(answer):
                        answer = asyncio.run(_await(answer))
                except Exception as e:
                    failed = e
            elif isinstance(step, Start):
                answer = self._start(d)
            elif isinstance(step, End):
                self._end(d, step.state, step.body)
            else:
                self._settle(d, step)

    def _start(self, d: Delivery) -> str:
        """The job's status as it starts (a cancel may have come first; see `results.begin`)."""
        job = results.job_id(d.partition, d.offset)
        q = self.queue
        try:
            return results.begin(q.log, q.topic, q.group, job, d.delivery_count, self._ttl_ms)
        except TidelogError:
            logger.exception("could not read the status of job %s; running it", job)
            return results.RUNNING

    def _end(self, d: Delivery, state: str, body: dict[str, Any]) -> None:
        """Record how a run ended, before the ack: a runner killed between the
        two leaves a job whose next delivery sees it done and acks it unrun."""
        job = results.job_id(d.partition, d.offset)
        q = self.queue
        try:
            results.finish(q.log, q.topic, q.group, job, state, body, d.delivery_count, self._ttl_ms)
        except TidelogError:
            logger.exception("could not record the end of job %s (%s)", job, state)

    def _current(self, d: Delivery) -> Delivery:
        """The delivery with its latest lease (the heartbeat may have extended it)."""
        with self._lock:
            for current in self._running.values():
                if current.receipt == d.receipt:
                    return current
        return d

    def _settle(self, d: Delivery, step: Settle) -> None:
        with self._lock:
            self._settled.add(d.receipt)
        current = self._current(d)
        try:
            if step.command == "ack":
                self.queue.ack(current)
            elif step.command == "nack":
                self.queue.nack(current, delay=step.delay)
            elif step.command == "reject":
                self.queue.reject(current, reason=step.reason)
            else:
                results.done(self.queue, current, step.value, self._ttl_ms)
        except LeaseLost as e:
            logger.warning("could not settle a job: %s", e)


async def _await(result: Any) -> Any:
    return await result
