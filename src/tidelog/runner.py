"""What the two job runners share, written once: `tidelog.Jobs` (threads) and
`tidelog.aio.Jobs` (tasks on an event loop).

`Runner` is a runner's settings and its handlers and schedules by name:
registering does no I/O, so it is the same code for both. `execution` is
what happens to one delivery (is it a job, is its handler known, was it
cancelled, is a failure retried or dead-lettered, what is recorded before
the ack), as a generator of steps that each runner carries out its own way:
the sync runner calls, the asyncio runner awaits. Only the carrying out is
written twice; the policy cannot drift between the two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from . import results, schedules
from .bounds import MAX_VISIBILITY_S, check_seconds
from .config import check_name
from .errors import InvalidRequest
from .queues import Delivery
from .schedules import Schedule

logger = logging.getLogger("tidelog.jobs")

Handler = Callable[[Any], Any]

MAX_CONCURRENCY = 1024


def check_runner(concurrency: Any, backoff: Any, max_backoff: Any) -> None:
    """The runner's options; InvalidRequest names the bad one.

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


class Runner:
    """A job runner's settings, and its handlers and schedules by name (no I/O)."""

    def __init__(self, concurrency: int, backoff: float, max_backoff: float, result_ttl: float):
        check_runner(concurrency, backoff, max_backoff)
        self.result_ttl = float(result_ttl)
        self._ttl_ms = results.check_ttl(result_ttl)
        self.concurrency = concurrency
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._handlers: dict[str, Handler] = {}
        self._schedules: dict[str, Schedule] = {}

    def job(self, name: str) -> Callable[[Handler], Handler]:
        """Register a handler for job `name`: a function or an `async def`
        (the asyncio runner runs an `async def` on its loop, a function in a thread)."""
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
            schedule = Schedule(name or fn.__name__, cron, tz, missed).validate()
            add_schedule(self._schedules, schedule)
            self.job(schedule.name)(fn)
            self._schedules[schedule.name] = schedule
            return fn

        return register

    @property
    def registered_schedules(self) -> dict[str, Schedule]:
        """The schedules registered on this runner, by name (no I/O)."""
        return dict(self._schedules)

    def retry_delay(self, delivery_count: int) -> float:
        """Exponential backoff: backoff * 2^(n-1), capped at max_backoff."""
        return retry_delay(self.backoff, self.max_backoff, delivery_count)

    def _registered_on(self, other: Runner) -> None:
        """Give `other` (the same runner on another log, see `on`) these handlers and schedules."""
        other._handlers = dict(self._handlers)
        other._schedules = dict(self._schedules)


# A job's execution, as steps ------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Mark the job running; send back its status as it starts (`results.begin`:
    a cancel may have come first, or an earlier delivery may have finished it)."""


@dataclass(frozen=True)
class Run:
    """Call the handler with the payload; send back its value, or throw its exception in."""

    handler: Handler
    payload: Any


@dataclass(frozen=True)
class End:
    """Record how the run ended (`results.finish`), before the settle: a runner
    killed between the two leaves a job whose next delivery sees it done and
    acks it unrun."""

    state: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Settle:
    """Settle the delivery, with its latest lease: "ack"; "nack" after `delay`;
    "reject" to the dead-letter topic with `reason`; "done": keep `value` as
    the job's result and ack, in one transaction (`results.done`)."""

    command: str
    delay: float | None = None
    reason: str = ""
    value: Any = None


Step = Start | Run | End | Settle


def execution(
    d: Delivery, handlers: Mapping[str, Handler], max_deliveries: int, retry_delay: Callable[[int], float]
) -> Generator[Step, Any, None]:
    """The steps of running the job in `d`; the runner carries out each one."""
    call = job_call(d)
    if call is None:
        logger.error("not a job record at offset %s; dead-lettering it", d.offset)
        yield Settle("reject", reason="not a job record")
        return
    name, payload = call
    handler = handlers.get(name)
    if handler is None:
        logger.error("no handler for job %r (offset %s); dead-lettering it", name, d.offset)
        yield End(results.DEAD_LETTERED, {"error": f"no handler for job {name!r}"})
        yield Settle("reject", reason=f"unknown job {name!r}")
        return
    status = yield Start()
    if status in results.FINAL:  # cancelled before it ran, or finished by an earlier delivery
        logger.info("job %r (offset %s) is %s: not run", name, d.offset, status)
        yield Settle("ack")
        return
    log_redelivery(d, name, max_deliveries)
    try:
        value = yield Run(handler, payload)
    except Exception as e:
        if d.delivery_count >= max_deliveries:
            logger.exception(
                "job %r failed on its last delivery (%s); dead-lettering it", name, d.delivery_count
            )
            yield End(results.DEAD_LETTERED, {"error": failure(e)})
            yield Settle("reject", reason=failure_reason(e))
        else:
            delay = retry_delay(d.delivery_count)
            logger.exception("job %r failed (delivery %s); retrying in %.1fs", name, d.delivery_count, delay)
            yield End(results.FAILED, {"error": failure(e)})
            yield Settle("nack", delay=delay)
        return
    yield Settle("done", value=value)


def job_call(d: Delivery) -> tuple[str, Any] | None:
    """(job name, payload) of a job record, or None when the record is not one."""
    try:
        return results.job_call(d.data)
    except ValueError:  # not JSON
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
