"""The Log: a Core with the handles and the administration on top.

`Core` (core.py) holds what every subsystem needs: the store, the topic
catalog, the clock, the wake-ups, the write path and the plain reads.
`Log` is one, and hands out the handles built on it (producers, stream
consumers and groups, queue groups, outbox transactions) and the calls of an
administrator (partitions, settings, cleaning, listings). The subsystems
take a Core, never a Log, so none of them imports this module.

A Log is a Core (a subclass) rather than a wrapper around one: the public
calls that take a Core (`redrive(log, ...)`, `Cleaner(log, ...)`,
`Queue(log, ...)`) take a Log as they always did, and `log.store` is the
Core's own attribute, with no extra hop on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, overload

from .bounds import MAX_OFFSET
from .config import MAX_PARTITIONS, TopicConfig, check_int, check_name, parse_duration_ms
from .core import DEFAULT_BATCH, READ_CHUNK, Core, read_messages, read_rows
from .errors import (
    ConfigurationError,
    InvalidRequest,
    OffsetOutOfRange,
    UnknownPartition,
)
from .groups import Group, GroupConsumer, GroupLag, describe_group
from .notify import Listener, long_poll
from .outbox import Transaction
from .partitioner import partition_for_key
from .positions import check_auto_reset, reset_position
from .producer import MAX_BATCH, Producer
from .queues import Queue
from .records import Message, NewRecord, Prepared, decode_meta, make_messages
from .retention import CleanReport, clean
from .store.base import (
    Cleanable,
    CleansRemotely,
    GroupOffset,
    NamedConsumers,
    PartitionOffsets,
    QueueUpkeep,
    Row,
    Store,
    TopicInfo,
)
from .topics import TopicDescription, check_topic_name


class Log(Core):
    """A durable, partitioned log. Thread-safe; share one per process."""

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

    # topics (create_topic, topics, topic, describe: Core) --------------------

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

    # producing (write, write_stream: Core) ------------------------------------

    def producer(self, id: str | None = None) -> Producer:
        """A producer; `id` names it, so readers can skip its records (`exclude_producer`)."""
        return Producer(self, id)

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

    # reading (read: Core) -----------------------------------------------------

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
        return describe_group(self, group, topics)


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


# What other modules and the fronts import from here; each now lives below
# the Log (core.py, producer.py, groups.py), where the subsystems take it from.
__all__ = [
    "DEFAULT_BATCH",
    "MAX_BATCH",
    "READ_CHUNK",
    "Consumer",
    "GroupLag",
    "Log",
    "Message",
    "NewRecord",
    "Prepared",
    "Producer",
    "TopicDescription",
    "partition_for_key",
    "read_messages",
    "read_rows",
]
