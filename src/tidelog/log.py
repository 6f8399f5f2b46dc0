"""The Log: topics, producing, reading, and stream-group offsets.

The core holds the semantics and no SQL: it validates input at the edge,
chooses partitions, encodes payloads and turns store rows into Messages.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, TypeVar, overload

from .bounds import MAX_OFFSET, check_time_ms
from .config import MAX_PARTITIONS, TopicConfig, check_int, check_name, check_txn, parse_duration_ms
from .errors import (
    ConfigurationError,
    InvalidRequest,
    MessageTooLarge,
    OffsetOutOfRange,
    TopicConflict,
    UnknownPartition,
    UnknownTopic,
)
from .groups import Group, GroupConsumer
from .notify import AppendNotifier, Listener, long_poll
from .outbox import Transaction
from .partitioner import partition_for_key
from .positions import check_auto_reset, reset_position
from .queues import Queue
from .records import (
    BatchSent,
    Message,
    NewRecord,
    Prepared,
    Sent,
    decode_meta,
    encode_headers,
    encode_key,
    encode_meta,
    encode_value,
    make_messages,
    message_class,
)
from .retention import CleanReport, clean
from .store.base import (
    AppendBatch,
    Cleanable,
    CleansRemotely,
    GroupOffset,
    NamedConsumers,
    PartitionOffsets,
    QueueUpkeep,
    ReadsInto,
    Replayed,
    Row,
    Store,
    StreamingAppend,
    TopicInfo,
)
from .topics import TopicCatalog, TopicDescription, check_partition, check_topic_name

DEFAULT_BATCH = 100

# The most records one batch writes (a write is one transaction: it is refused
# above this, not split, or it would stop being all or nothing).
MAX_BATCH = 100_000

# Reads take any limit; the store is asked for at most this many rows a
# query, so one query never holds more than a chunk in memory (and the http://
# store's pages stay within the server's).
READ_CHUNK = 10_000

R = TypeVar("R", bound=tuple[Any, ...])


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupLag(NamedTuple):
    """A stream group's progress on one partition: committed offset, end offset, lag."""

    group: str
    topic: str
    partition: int
    committed: int
    last_offset: int
    lag: int


class Log:
    """A durable, partitioned log. Thread-safe; share one per process."""

    def __init__(
        self,
        store: Store,
        *,
        auto_create: bool = True,
        default_partitions: int = 1,
        clock: Callable[[], int] | None = None,
    ):
        self.store = store
        self.clock = clock or _wall_clock_ms
        self.catalog = TopicCatalog(
            store,
            lambda name, partitions: self.create_topic(name, partitions),
            auto_create=auto_create,
            default_partitions=default_partitions,
        )
        self.notifier = AppendNotifier(store)

    @property
    def auto_create(self) -> bool:
        """Whether a write to a missing topic creates it (reads never do)."""
        return self.catalog.auto_create

    @property
    def default_partitions(self) -> int:
        """The partitions of a topic a write creates implicitly."""
        return self.catalog.default_partitions

    def view(self, *, auto_create: bool | None = None, default_partitions: int | None = None) -> Log:
        """Another Log on the same store, clock and wake-ups, with its own topic
        policy (unset: this log's). Closing a view closes the store."""
        view = Log(
            self.store,
            auto_create=self.auto_create if auto_create is None else auto_create,
            default_partitions=default_partitions or self.default_partitions,
            clock=self.clock,
        )
        view.notifier = self.notifier
        return view

    # lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Close the store (connections, files); the log is unusable afterwards."""
        self.store.close()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # topics ----------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, **config: Any) -> TopicInfo:
        """Create a topic; idempotent when partitions and given settings match."""
        check_name("topic", name)
        check_int("partitions", partitions, 1, MAX_PARTITIONS)
        full = TopicConfig.from_dict(config).to_dict()
        info, created = self.store.create_topic(name, partitions, full)
        if not created:
            asked = TopicConfig.parse(config)
            differs = {k: v for k, v in asked.items() if info.config.get(k, full.get(k)) != v}
            if differs:
                raise TopicConflict(
                    f"topic {name!r} exists with {', '.join(f'{k}={info.config.get(k)!r}' for k in differs)}; "
                    f"asked for {', '.join(f'{k}={v!r}' for k, v in differs.items())}"
                )
        self.catalog.remember(info)
        return info

    def topics(self) -> list[TopicInfo]:
        """Every topic, by name."""
        return self.store.topics()

    def topic(self, name: str) -> TopicInfo:
        """One topic; UnknownTopic when it does not exist."""
        check_name("topic", name)
        info = self.store.topic(name)
        if info is None:
            raise UnknownTopic(f"topic {name!r} does not exist")
        self.catalog.remember(info)
        return info

    def describe(self, name: str) -> TopicDescription:
        """A topic with each partition's first and last offset and figures."""
        info = self.topic(name)
        return TopicDescription(info.name, self.store.partitions(name), info.config, info.created)

    def offsets(self, name: str) -> list[PartitionOffsets]:
        """Each partition's first and last offset, without the figures
        `describe` counts: O(partitions) on every store (a planner's call)."""
        check_name("topic", name)
        return self.store.offsets(name)

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        """Grow a topic to `partitions` in all; a topic never shrinks."""
        check_name("topic", name)
        check_int("partitions", partitions, 1, MAX_PARTITIONS)
        info = self.topic(name)
        if partitions < info.partitions:
            raise InvalidRequest(
                f"topic {name!r} has {info.partitions} partitions; partitions never shrink "
                f"(asked for {partitions})"
            )
        info = self.store.add_partitions(name, partitions)
        self.catalog.remember(info)
        return info

    def alter_topic(self, name: str, **config: Any) -> TopicInfo:
        """Change a topic's settings (retention, compaction, limits)."""
        info = self.topic(name)
        full = TopicConfig.normalize(config, info.config).to_dict()
        self.store.set_topic_config(name, full)
        return self.topic(name)

    def clean(
        self, topic: str | None = None, *, chunk: int = 2000, txn_window: int | str | None = "7d"
    ) -> list[CleanReport]:
        """Apply retention and compaction now (every topic, or one).

        Cleaning every topic also forgets idempotent-write ids (`write(...,
        txn=)`) older than `txn_window` (a duration such as "7d", or ms;
        None keeps them): a write retried after that appends again.
        """
        if topic is not None:
            check_name("topic", topic)
        check_int("chunk", chunk, 1)
        window = None if txn_window is None else parse_duration_ms("txn_window", txn_window)
        if isinstance(self.store, CleansRemotely):  # a server's store (http://): its own core cleans there
            return [CleanReport(**report) for report in self.store.clean(topic, chunk)]
        if not isinstance(self.store, Cleanable):
            raise ConfigurationError(f"the {type(self.store).__name__} store cannot clean")
        return clean(self, topic, chunk=chunk, txn_window_ms=window)

    def last_clean(self, topic: str) -> dict[str, Any] | None:
        """The figures of the topic's last cleaning, if any."""
        check_name("topic", topic)
        return self.store.last_clean(topic)

    def delete_topic(self, name: str) -> bool:
        """Delete a topic and its records; False when there was none."""
        check_name("topic", name)
        self.catalog.forget(name)
        return self.store.delete_topic(name)

    # producing -------------------------------------------------------------

    def producer(self, id: str | None = None) -> Producer:
        """A producer; `id` names it, so readers can skip its records (`exclude_producer`)."""
        return Producer(self, id)

    def write(
        self, batches: list[Prepared], txn: str | None = None, *, txn_since: int = 0
    ) -> list[BatchSent]:
        """Commit prepared batches in one transaction (group commit).

        All or nothing; each batch gets consecutive offsets in its partition.

        `txn` makes the write idempotent: the id is recorded in the same
        transaction as the records, and a later write with the same id
        writes nothing and returns the first write's result. A caller that
        may run a write twice (a retried task, a replayed micro-batch) names
        it by what it is, e.g. query, batch and task. `txn_since` (ms since
        epoch) bounds how far back an id counts: one recorded by a write
        stamped earlier is taken over by this write (a dedup window).

        A batch's records get its `timestamp` when it carries one (a remote
        producer's clock), else the log's clock.
        """
        if txn is not None:
            check_txn(txn)
        check_time_ms("txn_since", txn_since)
        if not batches:
            return []
        for b in batches:  # every batch was checked: now a missing topic may be made
            self.catalog.ensure(b.topic)
        now = self.clock()
        stamps = [now if b.timestamp is None else b.timestamp for b in batches]
        appends = [AppendBatch(b.topic, b.partition, ts, b.values, b.metas) for b, ts in zip(batches, stamps)]

        def append() -> list[int] | Replayed:
            if txn is None:
                return self.store.append_many(appends)
            return (
                self.store.append_many(appends, txn, txn_since)
                if txn_since
                else self.store.append_many(appends, txn)
            )

        try:
            firsts = append()
        except UnknownTopic:
            # A topic we knew was deleted elsewhere: with auto-create on, a
            # write makes it again, as it would have with a fresh cache.
            if not self._remake({b.topic for b in batches}):
                raise
            firsts = append()
        return self._sent(
            firsts, [(b.topic, b.partition, len(b.values), ts) for b, ts in zip(batches, stamps)]
        )

    def _remake(self, topics: Iterable[str]) -> bool:
        """After the store found a cached topic gone: make the missing ones
        again if auto-create is on; True when the write may be tried again."""
        if not self.auto_create:
            return False
        for topic in topics:
            self.catalog.forget(topic)
            self.catalog.ensure(topic)
        return True

    def write_stream(self, batches: Iterable[Prepared], txn: str) -> list[BatchSent]:
        """`write(list(batches), txn=txn)` for batches that arrive one by one.

        On a store that can (`StreamingAppend`: SQLite, PostgreSQL) each batch is
        appended as it arrives, inside the one transaction, so making the
        next batch overlaps writing this one: a Spark task receives rows
        while it writes. Elsewhere the batches are gathered and written as
        `write` does. A replayed `txn` draws no batch. Every batch is of
        one topic, and it exists (nothing may create a topic while the
        transaction is open): make them with `Producer.prepare`.
        """
        check_txn(txn)
        if not isinstance(self.store, StreamingAppend):
            gathered = list(batches)
            topics = sorted({b.topic for b in gathered})
            if len(topics) > 1:
                raise InvalidRequest(
                    f"a streamed write goes to one topic, not {', '.join(map(repr, topics))}"
                )
            return self.write(gathered, txn=txn)
        now = self.clock()
        seen: list[tuple[str, int, int, int]] = []  # topic, partition, count, timestamp

        def appends() -> Iterator[AppendBatch]:
            for b in batches:
                ts = now if b.timestamp is None else b.timestamp
                seen.append((b.topic, b.partition, len(b.values), ts))
                yield AppendBatch(b.topic, b.partition, ts, b.values, b.metas)

        return self._sent(self.store.append_stream(appends(), txn), seen)

    def _sent(
        self, firsts: list[int] | Replayed, written: Iterable[tuple[str, int, int, int]]
    ) -> list[BatchSent]:
        """An append's answer as BatchSent, given each batch's (topic,
        partition, count, timestamp); wakes the readers of what is new (a
        replay wrote nothing, so it wakes nobody)."""
        if isinstance(firsts, Replayed):
            return [BatchSent(t, p, f, n, firsts.timestamp) for t, p, f, n in firsts.batches]
        sent = [BatchSent(t, p, f, n, ts) for (t, p, n, ts), f in zip(written, firsts)]
        for s in sent:
            self.notifier.notify(s.topic, s.partition, s.last_offset)
        return sent

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(topic, partition, last_offset)` after appends.

        Appends by other processes arrive with all three None ("look
        again"). Listeners run on the appending thread: keep them short.
        Returns the function that stops the listener.
        """
        return self.notifier.listen(listener)

    def wait_for_records(self, topic: str, partition: int, after: int, timeout: float) -> bool:
        """Block until the partition holds a record past `after`, or `timeout`
        seconds pass; True when there is one. Wakes on the append, not on a tick."""
        check_name("topic", topic)
        check_int("partition", partition, 0)
        check_int("after", after, 0, MAX_OFFSET)
        return bool(
            long_poll(
                lambda: self.store.read(topic, partition, after, 1),
                max(0.0, timeout),
                self.notifier.version,
                self.notifier.wait,
            )
        )

    # reading -----------------------------------------------------------------

    def read(self, topic: str, partition: int, after: int = 0, limit: int = DEFAULT_BATCH) -> list[Message]:
        """Up to `limit` records after an offset, without a group (an event-log cursor).

        Any limit is served: the store is read in chunks of `READ_CHUNK`
        records, and the list holds what was asked for. To walk a partition
        with memory bounded by one chunk, use `iter`.
        """
        check_name("topic", topic)
        check_int("partition", partition, 0)
        check_int("after", after, 0, MAX_OFFSET)
        check_int("limit", limit, 1)
        return read_messages(self.store, topic, partition, after, limit)

    def delete_before(self, topic: str, partition: int, offset: int) -> int:
        """Remove a partition's records with an offset below `offset` (Kafka's
        DeleteRecords; offsets are never reused); returns how many went.
        OffsetOutOfRange past the partition's end + 1."""
        check_name("topic", topic)
        check_int("partition", partition, 0)
        check_int("offset", offset, 1)
        if not isinstance(self.store, NamedConsumers):
            raise ConfigurationError(f"the {type(self.store).__name__} store cannot delete records")
        bounds = {p.partition: p for p in self.offsets(topic)}
        if partition not in bounds:
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(bounds) - 1}; partition {partition} does not exist"
            )
        last = bounds[partition].last_offset
        if offset > last + 1:
            raise OffsetOutOfRange(
                f"offset {offset} is past the end of {topic!r}/{partition} (last offset {last})",
                first=bounds[partition].first_offset,
                last=last,
            )
        return self.store.trim(topic, partition, offset) if offset > 1 else 0

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        """The first offset whose record's timestamp is at or after `timestamp`
        (ms), None when no record is that late (Kafka's ListOffsets by time).

        Timestamps are taken to rise with offsets (true of the log's clock;
        a remote producer's clock may step back a little), so a binary search
        finds it in log2(records) reads of one record each.
        """
        check_name("topic", topic)
        check_int("partition", partition, 0)
        check_int("timestamp", timestamp, 0)
        bounds = {p.partition: p for p in self.offsets(topic)}
        if partition not in bounds:
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(bounds) - 1}; partition {partition} does not exist"
            )
        lo, hi = (
            bounds[partition].first_offset,
            bounds[partition].last_offset + 1,
        )  # the answer is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            found = self.store.read(topic, partition, mid - 1, 1)
            if not found or found[0][1] >= timestamp:
                hi = mid
            else:
                lo = found[0][0] + 1
        return None if lo > bounds[partition].last_offset else lo

    def iter(
        self, topic: str, partition: int, after: int = 0, *, chunk: int = READ_CHUNK
    ) -> Iterator[Message]:
        """Every record of a partition after `after`, read `chunk` records at a time.

        A generator: it holds one chunk in memory, and it ends at the last
        record there was when it read its final chunk (appends after that are
        not waited for). Retention that removes the next records while it
        runs raises OffsetOutOfRange, as a read would.
        """
        check_name("topic", topic)
        check_int("partition", partition, 0)
        check_int("after", after, 0, MAX_OFFSET)
        check_int("chunk", chunk, 1, READ_CHUNK)
        self.store.read(topic, partition, after, 1)  # UnknownTopic / UnknownPartition now, not at next()
        return self._iter(topic, partition, after, chunk)

    def _iter(self, topic: str, partition: int, after: int, chunk: int) -> Iterator[Message]:
        while True:
            rows = self.store.read(topic, partition, after, chunk)
            yield from make_messages(topic, partition, rows)
            if len(rows) < chunk:
                return
            after = rows[-1][0]

    @overload
    def consumer(self, group: str, topics: None = None, **options: Any) -> Consumer: ...

    @overload
    def consumer(self, group: str, topics: Iterable[str], **options: Any) -> GroupConsumer: ...

    def consumer(
        self, group: str, topics: Iterable[str] | None = None, **options: Any
    ) -> Consumer | GroupConsumer:
        """A stream group member.

        Without `topics`: manual assignment (name partitions yourself). With
        `topics`: members of the group share the topics' partitions
        automatically (options: session_timeout, heartbeat_interval,
        assignor "range" | "roundrobin" | "sticky", on_assign, on_revoke,
        start "earliest" | "latest", member_id).
        """
        check_name("group", group)
        if topics is not None:
            return GroupConsumer(self, group, topics, **options)
        extra = set(options) - {"auto_reset"}
        if extra:
            raise InvalidRequest(f"options {', '.join(sorted(extra))} need topics= (automatic assignment)")
        self.store.ensure_group(group, "stream")
        return Consumer(self, group, **options)

    def group(self, name: str) -> Group:
        """A view of a stream group: members, generation, assignment, lag."""
        return Group(self, name)

    def queue(self, topic: str, group: str | None = None, **options: Any) -> Queue:
        """A queue group handle on `topic` (group defaults to the topic's name).

        Options: visibility_timeout (s, default 30), max_deliveries (default
        5), dead_letter (default "<topic>.dlq"), start ("earliest" or
        "latest"), ordering ("none", or "key": a key's records one at a time,
        in offset order; stored with the group, which keeps it). A missing
        topic is created, as a send does.
        """
        return Queue(self, topic, group, **options)

    def transaction(self, conn: Any) -> Transaction:
        """Send inside the application's own transaction on `conn` (the outbox):

            with log.transaction(conn) as tx:
                conn.execute(...)            # the application's change
                tx.send("topic", value)      # exists iff that change commits

        `conn` is a `sqlite3.Connection` to this log's file, or a psycopg
        connection to this log's PostgreSQL database and schema. See
        `tidelog.outbox`.
        """
        return Transaction(self, conn)

    def groups(self) -> list[str]:
        """The names of every group, stream and queue."""
        return self.store.groups()

    def queue_groups(self, topic: str | None = None) -> list[tuple[str, str]]:
        """(topic, group) of every queue group, or of one topic's."""
        if not isinstance(self.store, QueueUpkeep):
            raise ConfigurationError(f"the {type(self.store).__name__} store does not list queue groups")
        if topic is not None:
            return [(topic, g) for g in self.store.queue_list(self.topic(topic).name)]
        return [(t.name, g) for t in self.store.topics() for g in self.store.queue_list(t.name)]

    def group_offsets(self, group: str) -> list[GroupOffset]:
        """A group's committed offset on every partition it committed on."""
        check_name("group", group)
        return self.store.group_offsets(group)

    def describe_group(self, group: str, topics: Iterable[str] | None = None) -> list[GroupLag]:
        """Committed offset, end offset and lag per partition of a group.

        Covers every partition of the topics the group committed on, plus
        `topics` if given (partitions never committed show committed 0).
        """
        check_name("group", group)
        committed = {(o.topic, o.partition): o.committed for o in self.store.group_offsets(group)}
        names = sorted({t for t, _ in committed} | set(topics or ()))
        out = []
        for name in names:
            check_name("topic", name)
            try:
                parts = self.store.partitions(name)
            except UnknownTopic:
                continue
            for p in parts:
                done = committed.get((name, p.partition), 0)
                out.append(
                    GroupLag(group, name, p.partition, done, p.last_offset, max(0, p.last_offset - done))
                )
        return out


class Producer:
    """Sends records; `id` names the producer (see `exclude_producer`)."""

    def __init__(self, log: Log, id: str | None = None):
        if id is not None:
            check_name("producer", id)
        self.log = log
        self.id = id
        # Round-robin from a random start: short-lived producers (one CLI
        # call, one request) would otherwise all begin on partition 0.
        self._spread = itertools.count(random.randrange(MAX_PARTITIONS))

    def _partition(self, topic: str, key: bytes | None, partition: int | None) -> tuple[int, int]:
        """(partition, max_message_bytes) for a send."""
        catalog = self.log.catalog
        # A missing topic is not made here: the write is checked in full first.
        partitions, max_bytes, _ = catalog.get(topic) or catalog.planned(topic)
        if partition is not None:
            if type(partition) is not int or partition < 0:
                check_int("partition", partition, 0)
            if partition >= partitions:
                # Maybe another process grew the topic since we cached it.
                partitions, max_bytes, _ = catalog.planned(topic, refresh=True)
                check_partition(topic, partition, partitions)
            return partition, max_bytes
        if key is not None:
            return partition_for_key(key, partitions), max_bytes
        return next(self._spread) % partitions, max_bytes

    def send(
        self,
        topic: str,
        value: Any,
        *,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
    ) -> Sent:
        """Append one record; returns after it is committed."""
        check_topic_name(topic)
        stored: bytes | str
        if type(value) is bytes:
            stored, fmt = value, None
        else:
            stored, fmt = encode_value(value)
        raw_key = key if key is None or type(key) is bytes else encode_key(key)
        meta = None
        if fmt is not None or raw_key is not None or headers is not None or self.id is not None:
            meta = encode_meta(fmt, raw_key, encode_headers(headers), self.id)
        partition, max_bytes = self._partition(topic, raw_key, partition)
        if len(stored) > max_bytes >> 2 or meta is not None:
            _check_size(topic, max_bytes, 0, stored, meta)
        self.log.catalog.ensure(topic)
        ts = self.log.clock()
        try:
            offset = self.log.store.append_one(topic, partition, ts, stored, meta)
        except UnknownTopic:
            if not self.log._remake([topic]):
                raise
            offset = self.log.store.append_one(topic, partition, ts, stored, meta)
        self.log.notifier.notify(topic, partition, offset)
        return Sent(topic, partition, offset, ts)

    def send_batch(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
    ) -> BatchSent:
        """Append records atomically to one partition, with consecutive offsets.

        Items may be plain values or `NewRecord`s carrying their own key and
        headers; `key` and `headers` apply to items that carry none.
        """
        return self.log.write([self.prepare(topic, values, key=key, partition=partition, headers=headers)])[0]

    def prepare(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
    ) -> Prepared:
        """Validate and encode a batch without writing it (see `Log.write`).

        Every bad-input error is raised here, so a server can refuse one
        request and still commit the others of a group commit.
        `timestamp` (ms since epoch) stamps the records with a remote
        producer's clock instead of the log's.
        """
        check_topic_name(topic)
        if timestamp is not None:
            check_time_ms("timestamp", timestamp)
        values = values if isinstance(values, list) else list(values)
        if not values:
            raise InvalidRequest("send_batch needs at least one record")
        if len(values) > MAX_BATCH:
            raise InvalidRequest(f"a batch holds at most {MAX_BATCH} records, got {len(values)}")
        raw_key = encode_key(key)
        raw_headers = encode_headers(headers)
        partition, max_bytes = self._partition(topic, raw_key, partition)
        stored, metas = _encode_batch(values, raw_key, raw_headers, self.id)
        if max(map(len, stored)) > max_bytes >> 2 or metas is not None:
            for i, value in enumerate(stored):
                _check_size(topic, max_bytes, i, value, None if metas is None else metas[i])
        return Prepared(topic, partition, stored, metas, timestamp)


def _encode_batch(
    values: list[Any], raw_key: bytes | None, raw_headers: bytes | None, producer: str | None
) -> tuple[list[bytes | str], list[bytes | None] | None]:
    kinds = set(map(type, values))
    plain = raw_key is None and raw_headers is None and producer is None
    # Fast path: a batch of plain bytes needs no per-record work in Python.
    if kinds == {bytes} and plain:
        return values, None
    stored: list[bytes | str] = []
    metas: list[bytes | None] = []
    for v in values:
        key, headers = raw_key, raw_headers
        if isinstance(v, NewRecord):
            if v.key is not None:
                key = encode_key(v.key)
            if v.headers is not None:
                headers = encode_headers(v.headers)
            v = v.value
        s: bytes | str
        if type(v) is bytes:
            s, f = v, None
        else:
            s, f = encode_value(v)
        stored.append(s)
        metas.append(encode_meta(f, key, headers, producer))
    return stored, (None if all(m is None for m in metas) else metas)


def _check_size(topic: str, max_bytes: int, index: int, stored: bytes | str, meta: bytes | None) -> None:
    # A str needs encoding to know its byte size; skip that when even four
    # bytes a character would fit.
    n = len(stored)
    if isinstance(stored, str) and n * 4 > max_bytes:
        n = len(stored.encode())
    if meta is not None:
        n += len(meta)
    if n > max_bytes:
        where = "record" if index == 0 else f"record {index} of the batch"
        raise MessageTooLarge(
            f"{where} is {n} bytes (value, key and headers), over max_message_bytes={max_bytes} "
            f"of topic {topic!r}; nothing was written"
        )


def read_rows(store: Store, topic: str, partition: int, after: int, limit: int) -> list[Row]:
    """Up to `limit` rows after `after`, asking the store a chunk at a time."""
    return _chunked(lambda after, n: store.read(topic, partition, after, n), after, limit)


def read_messages(store: Store, topic: str, partition: int, after: int, limit: int) -> list[Message]:
    """`read_rows` as Messages; a store that can builds them as it reads."""
    if not isinstance(store, ReadsInto):
        return make_messages(topic, partition, read_rows(store, topic, partition, after, limit))
    make = message_class(topic, partition)
    return _chunked(lambda after, n: store.read_into(make, topic, partition, after, n), after, limit)


def _chunked(read: Callable[[int, int], list[R]], after: int, limit: int) -> list[R]:
    """Up to `limit` records after `after` from `read(after, n)`, `READ_CHUNK` at a time."""
    rows = read(after, min(limit, READ_CHUNK))
    if limit <= READ_CHUNK or len(rows) < READ_CHUNK:
        return rows
    while len(rows) < limit:
        got = read(rows[-1][0], min(limit - len(rows), READ_CHUNK))
        rows.extend(got)
        if len(got) < READ_CHUNK:
            break
    return rows


def _read_excluding(
    store: Store, topic: str, partition: int, after: int, limit: int, producer: str
) -> tuple[list[Row], int]:
    """Rows not sent by `producer`, and the offset the scan got to."""
    kept: list[Row] = []
    while len(kept) < limit:
        rows = store.read(topic, partition, after, min(limit - len(kept), READ_CHUNK))
        if not rows:
            break
        for row in rows:
            after = row[0]
            if row[3] is None or decode_meta(row[3])[3] != producer:
                kept.append(row)
                if len(kept) == limit:
                    break
    return kept, after


class Consumer:
    """A member of a stream group that names its partitions itself.

    The consumer keeps a position per partition: the first fetch starts after
    the group's committed offset, later fetches continue where the last one
    ended (as a Kafka consumer does). A restarted consumer resumes at
    committed + 1, so processing is at least once.
    """

    def __init__(self, log: Log, group: str, auto_reset: str = "earliest"):
        self.log = log
        self.group = group
        self.auto_reset = check_auto_reset(auto_reset)
        self._position: dict[tuple[str, int], int] = {}

    def _check(self, topic: str, partition: int) -> None:
        check_topic_name(topic)
        if type(partition) is not int or partition < 0:
            check_int("partition", partition, 0)

    def fetch(
        self,
        topic: str,
        partition: int,
        max_messages: int = DEFAULT_BATCH,
        *,
        exclude_producer: str | None = None,
    ) -> list[Message]:
        """Up to `max_messages` records of one partition after this consumer's position.

        `exclude_producer` skips records sent by that producer (a relay that
        reads a topic it also writes)."""
        self._check(topic, partition)
        if type(max_messages) is not int or max_messages < 1:
            check_int("max_messages", max_messages, 1)
        if exclude_producer is not None:
            check_name("producer", exclude_producer)
        tp = (topic, partition)
        after = self._position.get(tp)
        if after is None:
            after = self.log.store.committed(self.group, topic, partition)
        try:
            msgs, self._position[tp] = self._read(topic, partition, after, max_messages, exclude_producer)
        except OffsetOutOfRange as e:
            # Retention removed what this group would read next.
            after = reset_position(self.log.store, topic, partition, e, self.auto_reset)
            msgs, self._position[tp] = self._read(topic, partition, after, max_messages, exclude_producer)
        return msgs

    def _read(
        self, topic: str, partition: int, after: int, limit: int, exclude_producer: str | None
    ) -> tuple[list[Message], int]:
        if exclude_producer is None:
            msgs = read_messages(self.log.store, topic, partition, after, limit)
            return msgs, (msgs[-1][0] if msgs else after)
        rows, position = _read_excluding(self.log.store, topic, partition, after, limit, exclude_producer)
        return make_messages(topic, partition, rows), position

    def position(self, topic: str, partition: int) -> int:
        """The offset the last fetch ended at (next fetch starts after it)."""
        self._check(topic, partition)
        tp = (topic, partition)
        if tp not in self._position:
            self._position[tp] = self.log.store.committed(self.group, topic, partition)
        return self._position[tp]

    def set_position(self, topic: str, partition: int, offset: int) -> None:
        """Make this consumer's next fetch start after `offset`.

        Unlike `seek`, the group's committed offset does not change, and later
        commits still only move it forward (Kafka's in-memory seek): a way to
        re-read or to skip without rewinding the group.
        """
        self._check(topic, partition)
        check_int("offset", offset, 0)  # past the end: OffsetOutOfRange below
        parts = {p.partition: p for p in self.log.describe(topic).partitions}
        if partition not in parts:
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(parts) - 1}; partition {partition} does not exist"
            )
        last = parts[partition].last_offset
        if offset > last:
            raise OffsetOutOfRange(
                f"offset {offset} is past the end of {topic!r}/{partition} (last offset {last})",
                first=parts[partition].first_offset,
                last=last,
            )
        self._position[(topic, partition)] = offset

    def commit(
        self, topic: str | Message | None = None, partition: int | None = None, offset: int | None = None
    ) -> None:
        """Mark everything up to and including `offset` done.

        `commit(msg)` commits a message's offset; `commit()` commits the
        position of every partition fetched. A lower offset than the one
        committed is ignored (commits only move forward).
        """
        if isinstance(topic, Message):
            self.log.store.commit(self.group, topic.topic, topic.partition, topic[0])
            return
        if topic is None:
            for (t, p), pos in list(self._position.items()):
                if pos > 0:
                    self.log.store.commit(self.group, t, p, pos)
            return
        self._check(topic, partition)  # type: ignore[arg-type]
        if offset is None:
            raise InvalidRequest("commit(topic, partition, offset) needs an offset")
        # No upper bound here: past the end (2^63 too) the store answers
        # OffsetOutOfRange with the partition's bounds, the more useful error.
        check_int("offset", offset, 0)
        self.log.store.commit(self.group, topic, partition, offset)  # type: ignore[arg-type]

    def committed(self, topic: str, partition: int) -> int:
        """The group's committed offset on a partition (0: nothing yet)."""
        self._check(topic, partition)
        return self.log.store.committed(self.group, topic, partition)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Set the committed offset, backwards too: the next fetch starts at offset + 1."""
        self._check(topic, partition)
        check_int("offset", offset, 0)  # past the end: OffsetOutOfRange, as commit
        self.log.store.seek(self.group, topic, partition, offset)
        self._position[(topic, partition)] = offset


__all__ = ["Consumer", "Log", "NewRecord", "Prepared", "Producer", "TopicDescription", "partition_for_key"]
