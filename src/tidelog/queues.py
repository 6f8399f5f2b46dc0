"""Queue groups: competing consumers with leases, as SQS and Kafka's share groups.

Any member may take any record; each record is leased for a visibility
timeout and then acked, released (nack), delayed or dead-lettered. Progress
is per record. Records are handed out highest priority first, then
oldest-available (available time, then offset): a nack puts a record at the
front, `back=True` strictly behind every record waiting now, `delay=`
schedules it. A group with ordering "key" hands out a key's records one at
a time, in offset order. Sends may carry a priority and a dedup id; many
leases settle in one store transaction (`settle_many`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, cast

from . import bounds
from .bounds import (
    DELIVER_AT,
    MAX_DELAY_S,
    MAX_DELIVERIES,
    MAX_RECEIVE,
    MAX_VISIBILITY_S,
    MAX_WAIT_S,
    PRIORITY,
    check_priority,
    check_seconds,
)
from .config import check_int, check_name
from .core import Core
from .deadletters import Redriven, redrive
from .errors import ConfigurationError, GroupConflict, InvalidRequest, LeaseLost, UnknownTopic
from .leasing import PRIORITY_WINDOW, ReceivePolicy
from .notify import long_poll
from .producer import Producer
from .records import (
    BatchSent,
    Headers,
    Message,
    NewRecord,
    Prepared,
    Sent,
    decode_headers,
    decode_meta,
    encode_headers,
    encode_meta,
    make_message,
)
from .store.base import (
    ACK,
    EXTEND,
    RELEASE,
    RETURN,
    AppendBatch,
    Leased,
    NamedConsumers,
    Pending,
    QueueStats,
    QueueUpkeep,
    Settle,
    SettlesAndReceives,
)

# DELIVER_AT, the header carrying a send's delay: queue groups do not
# deliver the record before this time (ms since epoch); stream groups see it
# at once. PRIORITY, the header carrying a send's priority (0-9, higher
# first): queue groups hand out the available records of higher priority
# first; stream groups see the record unchanged. No header means 0. Both
# are read as bounded values whatever they hold (see tidelog.bounds), by
# `tidelog.leasing`, which also holds PRIORITY_WINDOW: how far past a
# partition's cursor a receive looks.
MAX_DEDUP_ID_BYTES = 128
# A queue group's ordering: "none" hands records out in parallel; "key" hands
# the records of one key out one at a time, in offset order.
ORDERINGS = ("none", "key")
DEFAULT_VISIBILITY_S = 30.0
DEFAULT_MAX_DELIVERIES = 5
# What stats and a peek hand the store: they lease nothing, so only how a
# record's due time and priority are read matters.
_LOOKING = ReceivePolicy(int(DEFAULT_VISIBILITY_S * 1000))


@dataclass(frozen=True)
class QueueOptions:
    """A queue handle's settings, validated when the handle is made."""

    visibility_timeout: float = DEFAULT_VISIBILITY_S
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    dead_letter: str | None = None
    start: str = "earliest"
    # None: the group's stored ordering ("none" for a new group).
    ordering: str | None = None

    def validate(self, topic: str) -> QueueOptions:
        """Check every option; InvalidRequest names the first bad one."""
        check_seconds("visibility_timeout", self.visibility_timeout, MAX_VISIBILITY_S, positive=True)
        md = self.max_deliveries
        if isinstance(md, bool) or not isinstance(md, int) or not 1 <= md <= MAX_DELIVERIES:
            raise InvalidRequest(
                f"max_deliveries must be an integer from 1 to {MAX_DELIVERIES}, got {bounds._short(md)}"
            )
        if self.dead_letter is not None:
            check_name("dead-letter topic", self.dead_letter)
            if self.dead_letter == topic:
                raise InvalidRequest("the dead-letter topic must differ from the topic it serves")
        if self.start not in ("earliest", "latest"):
            raise InvalidRequest(f"start must be 'earliest' or 'latest', got {self.start!r}")
        if self.ordering is not None and self.ordering not in ORDERINGS:
            raise InvalidRequest(f"ordering must be one of {', '.join(ORDERINGS)}, got {self.ordering!r}")
        return self


class Delivery(NamedTuple):
    """One delivery of a record to a queue group member."""

    message: Message
    delivery_count: int
    receipt: str
    lease_deadline: int  # ms since epoch

    @property
    def topic(self) -> str:
        """The record's topic."""
        return self.message.topic

    @property
    def partition(self) -> int:
        """The record's partition."""
        return self.message.partition

    @property
    def offset(self) -> int:
        """The record's offset in its partition."""
        return self.message.offset

    @property
    def timestamp(self) -> int:
        """When the record was appended (ms since epoch)."""
        return self.message.timestamp

    @property
    def value(self) -> bytes:
        """The payload as raw bytes."""
        return self.message.value

    @property
    def data(self) -> Any:
        """The payload decoded, as `Message.data`."""
        return self.message.data

    @property
    def key(self) -> bytes | None:
        """The record's key, or None."""
        return self.message.key

    @property
    def headers(self) -> Headers:
        """The record's headers as (name, bytes) pairs."""
        return self.message.headers


def queue_stats(log: Core, topic: str, group: str) -> QueueStats:
    """A queue group's counts without opening a handle (which would register the group)."""
    return log.store.queue_stats(
        check_name("group", group), check_name("topic", topic), _LOOKING, log.clock()
    )


MAX_PEEK = 1000


class Peeked(NamedTuple):
    """A record a queue group holds for a receive, seen without leasing it (`peek`)."""

    message: Message
    delivery_count: int  # deliveries so far; 0: never handed out
    due: int  # ms since epoch it is (or was) due; 0: nacked to the front
    priority: int
    delayed: bool  # not due yet: a receive would not hand it out now


def _upkeep(log: Core) -> QueueUpkeep:
    store = log.store
    if not isinstance(store, QueueUpkeep):
        raise ConfigurationError(f"the {type(store).__name__} store cannot peek into or purge queue groups")
    return store


def peek(log: Core, topic: str, group: str | None = None, limit: int = 10) -> list[Peeked]:
    """Up to `limit` records the queue group holds for a receive, leasing
    nothing and registering nothing: the due ones in the order a receive
    takes them (priority, then due time, then partition and offset), then the
    delayed ones. In-flight records are not listed (`Queue.in_flight`).
    UnknownGroup when the group does not exist on the topic."""
    check_name("topic", topic)
    name = check_name("group", group if group is not None else topic)
    check_int("limit", limit, 1, MAX_PEEK)
    rows = _upkeep(log).queue_peek(name, topic, _LOOKING, log.clock(), limit)
    return [
        Peeked(make_message(topic, w.partition, w[1:5]), w.delivery_count, w.due, w.priority, w.delayed)
        for w in rows
    ]


def in_flight(log: Core, topic: str, group: str | None = None, limit: int = 100) -> list[Pending]:
    """Up to `limit` records the queue group has leased now (their lease not
    run out), by partition and offset: who holds each (None for an unnamed
    `receive`), when it was delivered, how many times, until when. Registers
    nothing; UnknownGroup when the group does not exist on the topic."""
    check_name("topic", topic)
    name = check_name("group", group if group is not None else topic)
    check_int("limit", limit, 1, 10_000)
    return _upkeep(log).queue_in_flight(name, topic, log.clock(), limit)


def purge(log: Core, topic: str, group: str | None = None) -> int:
    """Finish every record the queue group holds now, in one transaction:
    waiting, delayed and in flight (a later ack of a purged lease is a
    no-op). Records stay in the topic for its other groups; records appended
    later reach this group as usual. Returns how many records it finished.
    UnknownGroup when the group does not exist on the topic (nothing changes)."""
    check_name("topic", topic)
    name = check_name("group", group if group is not None else topic)
    return _upkeep(log).queue_purge(name, topic, log.clock())


def check_dedup_id(dedup_id: Any) -> str:
    """A send's deduplication id: a non-empty string of at most 128 bytes (UTF-8)."""
    if not isinstance(dedup_id, str) or not dedup_id:
        raise InvalidRequest(f"dedup_id must be a non-empty string, not {dedup_id!r}")
    size = len(dedup_id.encode("utf-8", "surrogatepass"))
    if size > MAX_DEDUP_ID_BYTES:
        raise InvalidRequest(f"dedup_id must be at most {MAX_DEDUP_ID_BYTES} bytes, got {size}")
    return dedup_id


def dedup_txn(topic: str, dedup_id: str) -> str:
    """The idempotent-write id a dedup id is kept as: per topic, of a fixed size
    whatever the id holds (a hash, as txn ids take a narrow alphabet)."""
    digest = hashlib.sha256(f"{topic}\0{dedup_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"dedup:{digest}"


def dedup_write(log: Core, topic: str, dedup_id: str) -> tuple[str, int]:
    """(txn id, txn_since) that make `Log.write` of a send to `topic` with
    `dedup_id` happen once within the topic's dedup window."""
    check_dedup_id(dedup_id)
    window = log.catalog.shape(topic, create=True).dedup_window_ms
    # At least 1: 0 would mean "an id never expires".
    return dedup_txn(topic, dedup_id), max(1, log.clock() - window)


def queue_headers(headers: Any, now: int, *, delay: float = 0, priority: int = 0) -> Any:
    """`headers` with the queue's own added: a delay's due time (`now` + delay
    seconds, at most a year) and a priority. Unchanged when neither is asked."""
    delay = check_seconds("delay", delay, MAX_DELAY_S)
    check_priority(priority)
    if not delay and not priority:
        return headers
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    if delay:
        pairs.append((DELIVER_AT, str(now + int(delay * 1000))))
    if priority:
        pairs.append((PRIORITY, str(priority)))
    return pairs


def prepare_send(
    log: Core,
    topic: str,
    values: list[Any],
    *,
    key: Any = None,
    headers: Any = None,
    delay: float = 0,
    partition: int | None = None,
    producer: Producer | None = None,
    priority: int = 0,
) -> Prepared:
    """`Queue.prepare` without a handle: every check of a queue send, nothing
    opened or written, so a front refuses a bad send before it opens the group."""
    delay = check_seconds("delay", delay, MAX_DELAY_S)
    check_priority(priority)
    now = log.clock()
    if delay or priority:
        values = [
            NewRecord(v.value, v.key, queue_headers(v.headers, now, delay=delay, priority=priority))
            if isinstance(v, NewRecord) and v.headers is not None
            else v
            for v in values
        ]
    headers = queue_headers(headers, now, delay=delay, priority=priority)
    return (producer or Producer(log)).prepare(topic, values, key=key, headers=headers, partition=partition)


@functools.cache
def _settles_and_receives(store_type: type) -> bool:
    # Asked every round of a pump: a runtime protocol check costs ~100 µs.
    return issubclass(store_type, SettlesAndReceives)


class Queue:
    """A handle on a queue group of a topic. Thread-safe."""

    def __init__(self, log: Core, topic: str, group: str | None = None, **options: Any):
        check_name("topic", topic)
        self.group = check_name("group", group if group is not None else topic)
        self.log = log
        self.topic = topic
        opts = QueueOptions(**options).validate(topic)
        self.visibility_timeout = opts.visibility_timeout
        log.catalog.shape(topic, create=True)
        stored = log.store.queue_open(
            self.group,
            topic,
            {
                "max_deliveries": opts.max_deliveries,
                "dead_letter": opts.dead_letter or f"{topic}.dlq",
                # None (not asked): a new group stores none, an existing one keeps its own.
                "ordering": opts.ordering,
            },
            opts.start,
            log.clock(),
        )
        # Group settings are stored on first use; later handles take them.
        self.max_deliveries: int = stored["max_deliveries"]
        self.dead_letter: str = stored["dead_letter"]
        # Groups made before orderings existed have none stored.
        self.ordering: str = stored.get("ordering") or "none"
        # How the store picks what to lease, at the handle's visibility timeout.
        self._policy = ReceivePolicy(
            int(self.visibility_timeout * 1000), PRIORITY_WINDOW, ordered=self.ordering == "key"
        )
        if opts.ordering is not None and opts.ordering != self.ordering:
            raise GroupConflict(
                f"queue group {self.group!r} on topic {topic!r} has ordering {self.ordering!r}, not "
                f"{opts.ordering!r}; a group's ordering cannot change: use another group name"
            )

    # sending -------------------------------------------------------------------

    def _delay_headers(self, headers: Any, delay: float, priority: int = 0) -> Any:
        return queue_headers(headers, self.log.clock(), delay=delay, priority=priority)

    def send(
        self,
        value: Any,
        *,
        key: Any = None,
        headers: Any = None,
        delay: float = 0,
        partition: int | None = None,
        priority: int = 0,
        dedup_id: str | None = None,
    ) -> Sent:
        """Send a record; with `delay` queue groups do not deliver it before
        then; `priority` (0-9) hands it out before available records of lower
        priority. A `dedup_id` sent again within the topic's dedup window
        (`dedup_window_ms`, 5 minutes by default) appends nothing and returns
        the first send's offset, also from another process."""
        if dedup_id is not None:
            sent = self.send_batch(
                [value],
                key=key,
                headers=headers,
                delay=delay,
                partition=partition,
                priority=priority,
                dedup_id=dedup_id,
            )
            return Sent(sent.topic, sent.partition, sent.first_offset, sent.timestamp)
        headers = self._delay_headers(headers, delay, priority)
        return Producer(self.log).send(self.topic, value, key=key, headers=headers, partition=partition)

    def send_batch(
        self,
        values: list[Any],
        *,
        key: Any = None,
        headers: Any = None,
        delay: float = 0,
        partition: int | None = None,
        priority: int = 0,
        dedup_id: str | None = None,
    ) -> BatchSent:
        """Enqueue several records atomically; all or none become visible.
        With a `dedup_id`, as `send`: the batch is written once in the window."""
        prepared = self.prepare(
            values, key=key, headers=headers, delay=delay, partition=partition, priority=priority
        )
        if dedup_id is None:
            return self.log.write([prepared])[0]
        txn, since = self.dedup(dedup_id)
        return self.log.write([prepared], txn, txn_since=since)[0]

    def dedup(self, dedup_id: str) -> tuple[str, int]:
        """(txn id, txn_since) of a send with `dedup_id`, for `Log.write`."""
        return dedup_write(self.log, self.topic, dedup_id)

    def prepare(
        self,
        values: list[Any],
        *,
        key: Any = None,
        headers: Any = None,
        delay: float = 0,
        partition: int | None = None,
        producer: Producer | None = None,
        priority: int = 0,
    ) -> Prepared:
        """Validate and encode a batch for `Log.write` (a server's group commit).

        The delay and priority travel on every record, also on a `NewRecord`
        that carries headers of its own (those replace the batch's).
        """
        return prepare_send(
            self.log,
            self.topic,
            values,
            key=key,
            headers=headers,
            delay=delay,
            partition=partition,
            producer=producer,
            priority=priority,
        )

    # receiving -----------------------------------------------------------------

    def receive(
        self, max_messages: int = 1, wait: float = 0, visibility_timeout: float | None = None
    ) -> list[Delivery]:
        """Lease up to `max_messages` records; wait up to `wait` seconds for one."""
        if (
            isinstance(max_messages, bool)
            or not isinstance(max_messages, int)
            or not 1 <= max_messages <= MAX_RECEIVE
        ):
            raise InvalidRequest(
                f"max_messages must be an integer from 1 to {MAX_RECEIVE}, got {max_messages!r}"
            )
        wait = check_seconds("wait", wait, MAX_WAIT_S)
        visibility = self._visibility(visibility_timeout)
        notifier = self.log.notifier
        # Wake on an append, or when a delayed or leased record falls due.
        got, _ = long_poll(
            lambda: self._receive_once(max_messages, int(visibility * 1000)),
            wait,
            notifier.version,
            notifier.wait,
            found=lambda r: r[0],
            due_in=lambda r: None if r[1] is None else (r[1] - self.log.clock()) / 1000,
        )
        return got

    def poll(
        self, max_messages: int = 1, visibility_timeout: float | None = None
    ) -> tuple[list[Delivery], int | None]:
        """Lease what is available now, without waiting; also says when a
        leased, released or delayed record falls due next (ms since epoch,
        None when nothing waits), so an event loop can wait for that time or
        an append (`Log.listen`) instead of blocking a thread."""
        if (
            isinstance(max_messages, bool)
            or not isinstance(max_messages, int)
            or not 1 <= max_messages <= MAX_RECEIVE
        ):
            raise InvalidRequest(
                f"max_messages must be an integer from 1 to {MAX_RECEIVE}, got {max_messages!r}"
            )
        return self._receive_once(max_messages, int(self._visibility(visibility_timeout) * 1000))

    def _visibility(self, visibility_timeout: float | None) -> float:
        if visibility_timeout is None:
            return self.visibility_timeout
        return check_seconds("visibility_timeout", visibility_timeout, MAX_VISIBILITY_S, positive=True)

    def _leasing(self, lease_ms: int) -> ReceivePolicy:
        """The group's policy with leases of `lease_ms`."""
        policy = self._policy
        return policy if policy.lease_ms == lease_ms else replace(policy, lease_ms=lease_ms)

    def _receive_once(self, limit: int, lease_ms: int) -> tuple[list[Delivery], int | None]:
        out: list[Delivery] = []
        while True:
            leased, next_due = self.log.store.queue_receive(
                self.group, self.topic, self._leasing(lease_ms), self.log.clock(), limit - len(out)
            )
            got, dead = self._deliveries(leased)
            out += got
            # What was dead-lettered made room (and, ordered by key, freed
            # its key's next record): look again, as a receive that had not
            # met it would have found more.
            if not dead or len(out) >= limit:
                return out, next_due

    def _deliveries(self, leased: list[Leased]) -> tuple[list[Delivery], int]:
        """The leases as deliveries, and how many went to the dead-letter
        topic instead (delivered max_deliveries times already, never acked)."""
        out: list[Delivery] = []
        dead = 0
        for lease in leased:
            if lease.delivery_count > self.max_deliveries:
                delivered = lease._replace(delivery_count=lease.delivery_count - 1)
                self._dead_letter(delivered, f"max deliveries ({self.max_deliveries}) reached")
                dead += 1
                continue
            out.append(self._delivery(lease))
        return out, dead

    def _delivery(self, lease: Leased) -> Delivery:
        msg = make_message(
            self.topic, lease.partition, (lease.offset, lease.timestamp, lease.value, lease.meta)
        )
        return Delivery(msg, lease.delivery_count, lease.receipt, lease.deadline)

    # settling ------------------------------------------------------------------

    def _check(self, d: Delivery) -> Delivery:
        if not isinstance(d, Delivery):
            raise InvalidRequest(f"expected a Delivery from receive(), not {type(d).__name__}")
        if d.topic != self.topic:
            raise InvalidRequest(f"delivery is from topic {d.topic!r}, not {self.topic!r}")
        return d

    def ack(self, d: Delivery) -> None:
        """Done: never delivered to this group again.

        Acking twice with the same delivery is a no-op (a retried ack is
        safe). A delivery whose lease expired and whose record was delivered
        again is LeaseLost, also once that later delivery was acked or
        dead-lettered: an earlier receipt never settles a record."""
        self._check(d)
        self.log.store.queue_ack(self.group, self.topic, d.partition, d.offset, d.receipt)
        self._freed()

    def extend(self, d: Delivery, seconds: float) -> Delivery:
        """Push the lease deadline out to `seconds` from now."""
        self._check(d)
        seconds = check_seconds("extend", seconds, MAX_VISIBILITY_S)
        deadline = self.log.clock() + int(seconds * 1000)
        self.log.store.queue_extend(self.group, self.topic, d.partition, d.offset, d.receipt, deadline)
        return d._replace(lease_deadline=deadline)

    def nack(self, d: Delivery, *, back: bool = False, delay: float | None = None) -> None:
        """Make the record available again: at the front (default), behind
        every record waiting now (`back=True`, whatever the clock's
        resolution), or after `delay` seconds."""
        self._check(d)
        due, behind = self._release_due(back, delay)
        self.log.store.queue_release(self.group, self.topic, d.partition, d.offset, d.receipt, due, behind)
        self._freed()

    def _release_due(self, back: bool, delay: float | None) -> tuple[int, bool]:
        """(due, behind) of a nack."""
        if not isinstance(back, bool):
            raise InvalidRequest(f"back must be True or False, not {back!r}")
        if delay is not None:
            if back:
                raise InvalidRequest("give at most one of back and delay")
            return self.log.clock() + int(check_seconds("delay", delay, MAX_VISIBILITY_S) * 1000), False
        if back:
            # Due now, and behind every record due now, also those appended
            # in this same millisecond (the store breaks the tie).
            return self.log.clock(), True
        return 0, False  # before anything else that is due

    # settling many -------------------------------------------------------------

    def settle_many(self, items: Sequence[tuple[str, Delivery, float | None]]) -> list[Any]:
        """Settle many deliveries in one store transaction.

        Each item is `(command, delivery, seconds)`: "ack", "nack" (front),
        "back", "delay" (`seconds` from now), "extend" (to `seconds` from
        now) or "return" (front, and this delivery does not count toward
        max deliveries: for a front that leased a record ahead and never
        handed it out); `seconds` is None but for delay and extend. Returns one result an
        item, in order: None when it was settled, the new `Delivery` for an
        extend, or the `LeaseLost` the single call would have raised (one
        lost lease does not stop the others). Bad input raises
        InvalidRequest and settles nothing.
        """
        settles = self._settles(items)
        if not settles:
            return []
        lost = self.log.store.queue_settle(self.group, self.topic, settles)
        self._freed()
        return self._settled(items, settles, lost)

    def _settles(self, items: Sequence[tuple[str, Delivery, float | None]]) -> list[Settle]:
        """`settle_many`'s items as the store's settles, every one checked first."""
        if not isinstance(items, (list, tuple)) or len(items) > MAX_RECEIVE:
            raise InvalidRequest(f"give a list of at most {MAX_RECEIVE} settlements")
        now = self.log.clock()
        settles: list[Settle] = []
        for item in items:
            if not isinstance(item, tuple) or len(item) != 3:
                raise InvalidRequest(f"each settlement is (command, delivery, seconds), not {item!r}")
            command, d, seconds = item
            self._check(d)
            if command in ("ack", "nack", "back", "return"):
                if seconds is not None:
                    raise InvalidRequest(f"{command} takes no seconds, got {seconds!r}")
                if command == "ack":
                    settles.append(Settle(ACK, d.partition, d.offset, d.receipt))
                elif command == "return":
                    settles.append(Settle(RETURN, d.partition, d.offset, d.receipt))
                else:
                    back = command == "back"
                    settles.append(
                        Settle(RELEASE, d.partition, d.offset, d.receipt, now if back else 0, back)
                    )
            elif command == "delay":
                due = now + int(check_seconds("delay", seconds, MAX_VISIBILITY_S) * 1000)
                settles.append(Settle(RELEASE, d.partition, d.offset, d.receipt, due))
            elif command == "extend":
                deadline = now + int(check_seconds("extend", seconds, MAX_VISIBILITY_S) * 1000)
                settles.append(Settle(EXTEND, d.partition, d.offset, d.receipt, deadline))
            else:
                raise InvalidRequest(
                    f"unknown settle command {command!r}: use ack, nack, back, delay, extend or return"
                )
        return settles

    @staticmethod
    def _settled(
        items: Sequence[tuple[str, Delivery, float | None]],
        settles: list[Settle],
        lost: Sequence[LeaseLost | None],
    ) -> list[Any]:
        return [
            e if e is not None or s.action != EXTEND else d._replace(lease_deadline=s.time)
            for e, s, (_, d, _) in zip(lost, settles, items)
        ]

    def settle_and_poll(
        self,
        items: Sequence[tuple[str, Delivery, float | None]],
        max_messages: int,
        visibility_timeout: float | None = None,
    ) -> tuple[list[Any], list[Delivery], int | None]:
        """`settle_many(items)`, then `poll(max_messages)` (0: none), in one
        store transaction where the store can (`SettlesAndReceives`): what
        the settles free or put in front is what the poll sees. Returns
        (settle_many's results, the deliveries, poll's next due). Bad input
        raises InvalidRequest and changes nothing."""
        if (
            isinstance(max_messages, bool)
            or not isinstance(max_messages, int)
            or not 0 <= max_messages <= MAX_RECEIVE
        ):
            raise InvalidRequest(
                f"max_messages must be an integer from 0 to {MAX_RECEIVE}, got {max_messages!r}"
            )
        settles = self._settles(items)
        lease_ms = int(self._visibility(visibility_timeout) * 1000)
        store = self.log.store
        if not _settles_and_receives(type(store)):  # two transactions
            lost = store.queue_settle(self.group, self.topic, settles) if settles else []
            if settles:
                self._freed()
            got, next_due = self._receive_once(max_messages, lease_ms) if max_messages else ([], None)
            return self._settled(items, settles, lost), got, next_due
        lost, leased, next_due = cast(SettlesAndReceives, store).queue_settle_receive(
            self.group, self.topic, settles, self._leasing(lease_ms), self.log.clock(), max_messages
        )
        if settles:
            self._freed()
        got, dead = self._deliveries(leased)
        if dead and len(got) < max_messages:
            more, next_due = self._receive_once(max_messages - len(got), lease_ms)
            got += more
        return self._settled(items, settles, lost), got, next_due

    def ack_many(self, deliveries: Sequence[Delivery]) -> list[LeaseLost | None]:
        """Ack many deliveries in one store transaction: None for each acked
        (or done already with this receipt), the LeaseLost in place of each
        that was not (as `ack`)."""
        return self.settle_many([("ack", d, None) for d in self._many(deliveries)])

    def nack_many(
        self, deliveries: Sequence[Delivery], *, back: bool = False, delay: float | None = None
    ) -> list[LeaseLost | None]:
        """`nack` many deliveries in one store transaction; results as `ack_many`.
        With `back=True` they go behind every record waiting now, in the order given."""
        self._release_due(back, delay)  # the checks of a single nack
        command = "delay" if delay is not None else "back" if back else "nack"
        return self.settle_many([(command, d, delay) for d in self._many(deliveries)])

    def extend_many(self, deliveries: Sequence[Delivery], seconds: float) -> list[Delivery | LeaseLost]:
        """`extend` many leases in one store transaction: the new Delivery for
        each extended, the LeaseLost in place of each that was not."""
        return self.settle_many([("extend", d, seconds) for d in self._many(deliveries)])

    @staticmethod
    def _many(deliveries: Sequence[Delivery]) -> Sequence[Delivery]:
        if not isinstance(deliveries, (list, tuple)):
            raise InvalidRequest(f"give a list of deliveries, not {type(deliveries).__name__}")
        return deliveries

    def reject(self, d: Delivery, reason: str = "rejected") -> int:
        """Move the record straight to the dead-letter topic; returns its offset there."""
        self._check(d)
        if not isinstance(reason, str):
            raise InvalidRequest("reason must be a string")
        lease = Leased(
            d.partition, d.offset, d.timestamp, d.message[2], d.message[3], d.delivery_count, d.receipt, 0
        )
        return self._dead_letter(lease, reason)

    def _dead_letter(self, lease: Leased, reason: str) -> int:
        fmt, key, headers, producer = decode_meta(lease.meta)
        pairs = decode_headers(headers)
        pairs += [
            ("tidelog-origin-topic", self.topic.encode()),
            ("tidelog-origin-group", self.group.encode()),
            ("tidelog-origin-partition", str(lease.partition).encode()),
            ("tidelog-origin-offset", str(lease.offset).encode()),
            ("tidelog-delivery-count", str(lease.delivery_count).encode()),
            ("tidelog-reason", reason.encode()),
        ]
        meta = encode_meta(fmt, key, encode_headers(pairs), producer)
        record = AppendBatch(self.dead_letter, 0, self.log.clock(), [lease.value], [meta])
        store = self.log.store
        args = (self.group, self.topic, lease.partition, lease.offset, lease.receipt, record)
        try:
            offset = store.queue_dead_letter(*args)
        except UnknownTopic:
            # The first dead letter makes its topic, once the store found the
            # lease live (a stale receipt is LeaseLost and makes nothing).
            if store.topic(self.topic) is None:
                raise
            self.log.catalog.shape(self.dead_letter, create=True)
            offset = store.queue_dead_letter(*args)
        self.log.notifier.notify(self.dead_letter, 0, offset)
        self._freed()
        return offset

    def _freed(self) -> None:
        # A settle may free a record for this process's waiting receives (a
        # nack puts it back, an ack lets the next of its key go). The store's
        # watch wakes them only for other connections' commits (SQLite's
        # tells no connection of its own), so the waiters are told here.
        self.log.notifier.notify(self.topic)

    def redrive(self, offsets: list[int] | None = None) -> Redriven:
        """Move this topic's dead letters (all, or those at `offsets` of the
        dead-letter topic) back to it; see `tidelog.deadletters.redrive`."""
        return redrive(self.log, self.dead_letter, offsets, origin=self.topic)

    def stats(self) -> QueueStats:
        """available, in_flight, delayed, dead_lettered, oldest_available_age_ms."""
        return queue_stats(self.log, self.topic, self.group)

    def in_flight(self, limit: int = 100) -> list[Pending]:
        """The records leased now, by partition and offset: who holds each
        (None for an unnamed `receive`), when it was delivered, how many times."""
        check_int("limit", limit, 1, 10_000)
        store = self.log.store
        if not isinstance(store, NamedConsumers):
            raise ConfigurationError(f"the {type(store).__name__} store does not list leases")
        out: list[Pending] = []
        for p in range(self.log.topic(self.topic).partitions):
            out += store.queue_pending(self.group, self.topic, p, limit=limit - len(out))
            if len(out) >= limit:
                break
        return out
