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
from .bounds import MAX_VISIBILITY_S, check_seconds
from .config import check_name
from .errors import InvalidRequest, LeaseLost, TidelogError
from .queues import Delivery
from .records import Sent
from .results import DEFAULT_RESULT_TTL_S, JobInfo
from .schedules import Schedule, ScheduleInfo, Scheduler, Tick

if TYPE_CHECKING:
    from .log import Log

logger = logging.getLogger("tidelog.jobs")

Handler = Callable[[Any], Any]


MAX_CONCURRENCY = 1024


def check_runner(concurrency: Any, backoff: Any, max_backoff: Any) -> None:
    """The runner's options (shared with `tidelog.aio.Jobs`); InvalidRequest names the bad one.

    A retry is a nack with a delay, so the backoff stops where a nack's delay
    does (`MAX_VISIBILITY_S`, 12 hours)."""
    if (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise InvalidRequest(
            f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}, got {concurrency!r}"
        )
    check_seconds("backoff", backoff, MAX_VISIBILITY_S)
    check_seconds("max_backoff", max_backoff, MAX_VISIBILITY_S)
    if max_backoff < backoff:
        raise InvalidRequest(f"max_backoff ({max_backoff}) must be at least backoff ({backoff})")


def check_periodic_options(tz: Any, missed: Any) -> None:
    """The options of `periodic` that need no cron library (checked first)."""
    if missed not in schedules.MISSED:
        raise InvalidRequest(f"missed must be one of {', '.join(schedules.MISSED)}, got {missed!r}")
    if not isinstance(tz, str):
        raise InvalidRequest(f"tz must be a time zone name such as Europe/Paris, not {tz!r}")


def add_schedule(known: dict[str, Schedule], schedule: Schedule) -> None:
    """Refuse a second schedule of one name (with two expressions, or twice the same)."""
    if len(known) >= schedules.MAX_SCHEDULES:
        raise InvalidRequest(f"a runner has at most {schedules.MAX_SCHEDULES} schedules")
    other = known.get(schedule.name)
    if other is not None:
        if (other.cron, other.tz) != (schedule.cron, schedule.tz):
            raise InvalidRequest(
                f"schedule {schedule.name!r} is registered twice, as {other.cron!r} ({other.tz}) "
                f"and {schedule.cron!r} ({schedule.tz}): give each its own name"
            )
        raise InvalidRequest(f"schedule {schedule.name!r} is registered twice")


def retry_delay(backoff: float, max_backoff: float, delivery_count: int) -> float:
    """Exponential backoff: backoff * 2^(n-1), capped at max_backoff."""
    # 2.0 ** n overflows past n = 1023: past 64 doublings any backoff is at its cap.
    return min(max_backoff, backoff * 2.0 ** min(64, max(0, delivery_count - 1)))


def job_call(d: Delivery) -> tuple[str, Any] | None:
    """(job name, payload) of a job record, or None when the record is not one."""
    try:
        body = d.data
        return body["job"], body.get("payload")
    except (ValueError, TypeError, KeyError):
        return None


def log_redelivery(d: Delivery, name: str, max_deliveries: int) -> None:
    """Say that a job runs again: after a failure (logged then), or after its
    lease ran out on a runner that stopped or was killed mid-job (logged
    nowhere else: that runner is gone)."""
    if d.delivery_count > 1:
        logger.warning(
            "job %r (offset %s) delivered again: delivery %d of %d (an earlier one failed, "
            "or its runner stopped before settling it and its lease ran out)",
            name,
            d.offset,
            d.delivery_count,
            max_deliveries,
        )


def failure_reason(error: BaseException) -> str:
    """The dead-letter reason of a job that failed on its last delivery."""
    return f"failed: {failure(error)}"


def failure(error: BaseException) -> str:
    """A handler's failure as its job's status keeps it."""
    return f"{type(error).__name__}: {error}"


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


class Jobs:
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
        check_runner(concurrency, backoff, max_backoff)
        self.result_ttl = float(result_ttl)
        self._ttl_ms = results.check_ttl(result_ttl)
        self.queue = log.queue(
            queue,
            group=group,
            visibility_timeout=visibility_timeout,
            max_deliveries=max_deliveries,
            ordering=ordering,
        )
        self.concurrency = concurrency
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._handlers: dict[str, Handler] = {}
        self._schedules: dict[str, Schedule] = {}
        self._scheduler: Scheduler | None = None
        self._stopping = threading.Event()
        self._drained = threading.Event()  # set once run() has no job left running
        self._running: dict[Future[None], Delivery] = {}
        self._settled: set[str] = set()  # receipts being acked or nacked: no longer extended
        self._lock = threading.Lock()

    # registering and enqueueing ------------------------------------------------

    def job(self, name: str) -> Callable[[Handler], Handler]:
        """Register a handler (a function or an `async def`) for job `name`."""
        check_name("job", name)

        def register(fn: Handler) -> Handler:
            if name in self._handlers:
                raise InvalidRequest(f"job {name!r} is registered twice")
            self._handlers[name] = fn
            return fn

        return register

    def periodic(
        self, cron: str, *, name: str | None = None, tz: str = "UTC", missed: str = "skip"
    ) -> Callable[[Handler], Handler]:
        """Register a handler run on a cron schedule (cronsim's syntax: five
        fields, or six with seconds first), read in time zone `tz`. Every tick
        runs once however many runners run (`tidelog.schedules`); ticks
        missed while no runner ran are skipped but the latest ("skip") or all
        enqueued ("catch_up", the latest 100 at most). The handler gets
        `{"schedule": name, "tick": ms since epoch}`; `name` defaults to the
        function's. A cron expression that does not parse is refused here,
        naming its field."""
        check_periodic_options(tz, missed)

        def register(fn: Handler) -> Handler:
            self._add_schedule(Schedule(name or fn.__name__, cron, tz, missed), fn)
            return fn

        return register

    def _add_schedule(self, schedule: Schedule, fn: Handler) -> None:
        schedule.validate()
        add_schedule(self._schedules, schedule)
        self.job(schedule.name)(fn)
        self._schedules[schedule.name] = schedule

    @property
    def registered_schedules(self) -> dict[str, Schedule]:
        """The schedules registered on this runner, by name (no I/O)."""
        return dict(self._schedules)

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
        other._handlers = dict(self._handlers)
        other._schedules = dict(self._schedules)
        return other

    def stop(self) -> None:
        """Stop taking work; `run()` returns once running jobs finished."""
        self._stopping.set()

    def retry_delay(self, delivery_count: int) -> float:
        """Exponential backoff: backoff * 2^(n-1), capped at max_backoff."""
        return retry_delay(self.backoff, self.max_backoff, delivery_count)

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
                    logger.info("enqueued tick %s of schedule %r", t.tick, t.schedule)
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
        call = job_call(d)
        if call is None:
            logger.error("not a job record at offset %s; dead-lettering it", d.offset)
            self._settle(d, lambda: self.queue.reject(d, reason="not a job record"))
            return
        name, payload = call
        handler = self._handlers.get(name)
        if handler is None:
            logger.error("no handler for job %r (offset %s); dead-lettering it", name, d.offset)
            self._end(d, results.DEAD_LETTERED, {"error": f"no handler for job {name!r}"})
            self._settle(d, lambda: self.queue.reject(d, reason=f"unknown job {name!r}"))
            return
        status = self._start(d)
        if status in results.FINAL:  # cancelled before it ran, or finished by an earlier delivery
            logger.info("job %r (offset %s) is %s: not run", name, d.offset, status)
            self._settle(d, lambda: self.queue.ack(self._current(d)))
            return
        log_redelivery(d, name, self.queue.max_deliveries)
        try:
            result = handler(payload)
            if inspect.isawaitable(result):
                result = asyncio.run(_await(result))
        except Exception as e:
            if d.delivery_count >= self.queue.max_deliveries:
                logger.exception(
                    "job %r failed on its last delivery (%s); dead-lettering it", name, d.delivery_count
                )
                reason = failure_reason(e)
                self._end(d, results.DEAD_LETTERED, {"error": failure(e)})
                self._settle(d, lambda: self.queue.reject(self._current(d), reason=reason))
            else:
                delay = self.retry_delay(d.delivery_count)
                logger.exception(
                    "job %r failed (delivery %s); retrying in %.1fs", name, d.delivery_count, delay
                )
                self._end(d, results.FAILED, {"error": failure(e)})
                self._settle(d, lambda: self.queue.nack(self._current(d), delay=delay))
            return
        self._settle(d, lambda: results.done(self.queue, self._current(d), result, self._ttl_ms))

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

    def _settle(self, d: Delivery, action: Callable[[], Any]) -> None:
        with self._lock:
            self._settled.add(d.receipt)
        try:
            action()
        except LeaseLost as e:
            logger.warning("could not settle a job: %s", e)


async def _await(result: Any) -> Any:
    return await result
