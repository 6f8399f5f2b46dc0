"""Periodic jobs: cron schedules whose every tick is enqueued exactly once,
by any number of runner processes, with no leader and no lock.

    @jobs.periodic("*/5 * * * *", tz="Europe/Paris", missed="skip")
    def sweep(tick): ...            # tick = {"schedule": "sweep", "tick": <ms since epoch>}

Each runner's scheduler enqueues the ticks that fell due. A tick's write is
one transaction of two records, the job on the queue topic and a marker on
`<queue>.ticks` (keyed by the schedule's name, compacted), made idempotent
by a txn id naming the schedule and the tick (`Log.write(txn=...)`). So:

- two runners enqueueing one tick race on the txn id: the store keeps the
  first write and the second appends nothing. The id counts from the tick's
  own time on (`txn_since`), as no write of a tick can come before it, and
  stays until the cleaning pass forgets txn ids (`Log.clean(txn_window=)`,
  7 days by default);
- a runner (re)starting reads the markers: the last enqueued tick of each
  schedule, whoever enqueued it. It never enqueues a tick at or before
  that one, however long ago it was, so a restart repeats nothing.

Ticks missed while no runner ran: "skip" enqueues the latest of them only
(a cache refresh needs one run, not forty), "catch_up" every one, oldest
first, at most `MAX_CATCH_UP` of them (the latest ones): a runner back after
a week must not flood its queue with a minutely job's ten thousand ticks.
A schedule never seen before starts at the next tick after the runner
starts. Cron expressions are cronsim's (5 fields, or 6 with seconds first),
read in the schedule's time zone; cronsim is the `jobs` extra, imported
when the first schedule is made.
"""

from __future__ import annotations

import heapq
import json
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .config import check_name
from .core import Core
from .errors import ConfigurationError, InvalidRequest, TopicConflict
from .producer import Producer
from .queues import dedup_txn

if TYPE_CHECKING:
    from .queues import Queue

MISSED = ("skip", "catch_up")
MAX_CATCH_UP = 100
MAX_SCHEDULES = 100_000
READ_CHUNK = 1000
FIELDS = "[second] minute hour day-of-month month day-of-week"


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:
        raise ConfigurationError(
            "periodic jobs need cronsim for their cron expressions: pip install 'tidelog[jobs]'"
        ) from None
    return cronsim


@dataclass(frozen=True)
class Schedule:
    """A periodic job: its name (also the job's), cron expression, time zone
    and what to do about ticks missed while no runner ran."""

    name: str
    cron: str
    tz: str = "UTC"
    missed: str = "skip"

    def validate(self) -> Schedule:
        """Check every field; InvalidRequest names the bad one (for a cron
        expression, the field of it that does not parse)."""
        check_name("schedule", self.name)
        if self.missed not in MISSED:
            raise InvalidRequest(f"missed must be one of {', '.join(MISSED)}, got {self.missed!r}")
        zone = self.zone()
        if not isinstance(self.cron, str) or len(self.cron) > 200:
            raise InvalidRequest(
                f"schedule {self.name!r}: a cron expression is a string of at most 200 characters"
            )
        cronsim = _cronsim()
        try:
            cronsim.CronSim(self.cron, datetime.now(zone))
        except cronsim.CronSimError as e:
            raise InvalidRequest(
                f"schedule {self.name!r}: cron expression {self.cron!r} does not parse: {e} (its fields: {FIELDS})"
            ) from None
        return self

    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise InvalidRequest(
                f"schedule {self.name!r}: unknown time zone {self.tz!r} (an IANA name such as Europe/Paris)"
            ) from None

    def after(self, ms: int) -> int:
        """The first tick strictly after `ms` (ms since epoch)."""
        start = datetime.fromtimestamp(ms / 1000, self.zone())
        return _ms(next(_cronsim().CronSim(self.cron, start)))

    def latest(self, ms: int, after: int, limit: int) -> list[int]:
        """Up to `limit` ticks in (after, ms], the latest ones, oldest first."""
        # cronsim going back from a time with a fraction of a second counts
        # that whole second: from ms + 1 ms, a tick exactly at `ms` is included.
        start = datetime.fromtimestamp(ms / 1000, self.zone()) + timedelta(milliseconds=1)
        out: list[int] = []
        for when in _cronsim().CronSim(self.cron, start, reverse=True):
            tick = _ms(when)
            if tick > ms:
                continue
            if tick <= after or len(out) >= limit:
                break
            out.append(tick)
        out.reverse()
        return out

    def marker(self, tick: int) -> dict[str, Any]:
        """The value of a tick's marker on `<queue>.ticks`: enough to say the next tick too."""
        return {"schedule": self.name, "cron": self.cron, "tz": self.tz, "missed": self.missed, "tick": tick}


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def ticks_topic(queue_topic: str) -> str:
    """Where a queue's schedules keep their last ticks."""
    return f"{queue_topic}.ticks"


def tick_txn(queue_topic: str, name: str, tick: int) -> str:
    """The txn id of a tick's write: the same from every runner."""
    return dedup_txn(queue_topic, f"tick:{name}:{tick}")


class Tick(NamedTuple):
    """A tick a scheduler round enqueued (or found enqueued by another runner)."""

    schedule: str
    tick: int  # ms since epoch
    partition: int
    offset: int  # the job's record on the queue topic


class ScheduleInfo(NamedTuple):
    """A schedule as `tidelog jobs schedules` lists it."""

    name: str
    cron: str
    tz: str
    missed: str
    last_tick: int | None  # ms since epoch of the latest enqueued tick; None: none yet
    next_tick: int | None  # ms since epoch


def last_ticks(log: Core, queue_topic: str, after: int = 0) -> tuple[dict[str, dict[str, Any]], int]:
    """The latest marker of each schedule on the queue's ticks topic (past
    offset `after`), and the offset read up to. No topic: none yet."""
    topic = ticks_topic(queue_topic)
    found: dict[str, dict[str, Any]] = {}
    if log.store.topic(topic) is None:
        return found, after
    while True:
        batch = log.read(topic, 0, after=after, limit=READ_CHUNK)
        for msg in batch:
            try:
                marker = json.loads(msg.value)
                name, tick = marker["schedule"], int(marker["tick"])
            except (ValueError, TypeError, KeyError):
                continue  # not a marker: someone else's record
            if name not in found or tick > found[name]["tick"]:
                found[name] = marker
        if batch:
            after = batch[-1].offset
        if len(batch) < READ_CHUNK:
            return found, after


def describe(log: Core, queue_topic: str, schedules: dict[str, Schedule] | None = None) -> list[ScheduleInfo]:
    """The schedules of a queue, from its ticks topic (and `schedules`, registered
    here, that may not have ticked yet), with their last and next tick."""
    markers, _ = last_ticks(log, queue_topic)
    known = {
        name: Schedule(m["schedule"], m["cron"], m.get("tz", "UTC"), m.get("missed", "skip"))
        for name, m in markers.items()
    }
    known.update(schedules or {})
    now = log.clock()
    out = []
    for name in sorted(known):
        s = known[name]
        last = markers[name]["tick"] if name in markers else None
        try:
            following = s.after(max(now, last or 0))
        except Exception:  # a marker's expression this cronsim refuses: say nothing of its next tick
            following = None
        out.append(ScheduleInfo(s.name, s.cron, s.tz, s.missed, last, following))
    return out


class Scheduler:
    """One runner's scheduler over its queue's schedules. `round()` enqueues
    what fell due by the log's clock; `next_due()` says when to call it
    again. Thread-safe: a round holds a lock."""

    def __init__(self, queue: Queue, schedules: dict[str, Schedule]):
        self.queue = queue
        self.log = queue.log
        self.topic = ticks_topic(queue.topic)
        self.schedules = dict(schedules)
        self._position = 0  # the ticks topic's offset read so far
        self._last: dict[str, int] = {}  # the latest enqueued tick of each schedule
        self._due: list[tuple[int, str]] = []  # (next tick, schedule name), a heap
        self._lock = threading.Lock()
        self._open = False
        self._opened_at = 0  # a schedule never seen before counts its ticks from here

    def open(self) -> None:
        """Make the ticks topic if missing; learn each schedule's last tick; plan the next ones."""
        with self._lock:
            if self._open:
                return
            try:
                self.log.create_topic(self.topic, 1, cleanup_policy="compact", retention_ms=None)
            except TopicConflict:
                pass  # there, with settings of its operator's: fine
            self._learn()
            now = self._opened_at = self.log.clock()
            for name, s in self.schedules.items():
                # Never seen: from now on. Seen: the first tick after its last, which
                # may be past (missed while no runner ran): the next round enqueues it.
                heapq.heappush(self._due, (s.after(self._last.get(name, now)), name))
            self._open = True

    def _learn(self) -> None:
        markers, self._position = last_ticks(self.log, self.queue.topic, self._position)
        for name, m in markers.items():
            if m["tick"] > self._last.get(name, 0):
                self._last[name] = m["tick"]

    def next_due(self) -> int | None:
        """When the next tick of any schedule falls due (ms since epoch); None without schedules."""
        with self._lock:
            return self._due[0][0] if self._due else None

    def round(self) -> list[Tick]:
        """Enqueue every tick due now that no runner enqueued yet; the ticks written."""
        self.open()
        with self._lock:
            now = self.log.clock()
            if not self._due or self._due[0][0] > now:
                return []
            self._learn()  # what other runners enqueued since the last round
            out: list[Tick] = []
            while self._due and self._due[0][0] <= now:
                _, name = heapq.heappop(self._due)
                s = self.schedules[name]
                last = self._last.get(name, self._opened_at)
                ticks = s.latest(now, last, 1 if s.missed == "skip" else MAX_CATCH_UP)
                for tick in ticks:
                    out.append(self._enqueue(s, tick))
                if ticks:
                    self._last[name] = ticks[-1]
                heapq.heappush(self._due, (s.after(max(now, last, *ticks)), name))
            return out

    def _enqueue(self, s: Schedule, tick: int) -> Tick:
        q = self.queue
        job = q.prepare([{"job": s.name, "payload": {"schedule": s.name, "tick": tick}}])
        marker = Producer(self.log).prepare(self.topic, [s.marker(tick)], key=s.name)
        # Both or neither, once: a second runner's write of this tick appends nothing.
        sent = self.log.write([job, marker], tick_txn(q.topic, s.name, tick), txn_since=max(1, tick - 1))
        return Tick(s.name, tick, sent[0].partition, sent[0].first_offset)
