"""The Core: what every subsystem of the log needs, and nothing above it.

Queues, stream groups, retention, dead letters and the outbox all need the
same few things: the store, the topic catalog, the clock, the wake-ups, the
write path (a batch committed in one transaction, a missing topic made by
the auto-create policy) and a few plain reads. They take a `Core` (still
named `log` there, as in their public signatures: the Core they are given
is usually a Log), so none of them imports `log.py`; `Log` is a Core with
the handles (producers, consumers, groups, queues, transactions) and the
administration on top.

The core holds the semantics and no SQL: it validates input at the edge,
chooses partitions, encodes payloads and turns store rows into Messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .bounds import MAX_OFFSET, check_time_ms
from .config import MAX_PARTITIONS, TopicConfig, check_int, check_name, check_txn
from .errors import InvalidRequest, TopicConflict, UnknownTopic
from .notify import AppendNotifier
from .records import BatchSent, Message, Prepared, make_messages, message_class
from .store.base import AppendBatch, ReadsInto, Replayed, Row, Store, StreamingAppend, TopicInfo
from .topics import TopicCatalog, TopicDescription

DEFAULT_BATCH = 100

# Reads take any limit; the store is asked for at most this many rows a
# query, so one query never holds more than a chunk in memory (and the http://
# store's pages stay within the server's).
READ_CHUNK = 10_000

R = TypeVar("R", bound=tuple[Any, ...])


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Core:
    """The store, the topic catalog, the clock and the wake-ups of one log,
    with the write path and the plain reads built on them. Thread-safe."""

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

    # writing -----------------------------------------------------------------

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
        appends = [
            AppendBatch(b.topic, b.partition, ts, b.values, b.metas, b.wire) for b, ts in zip(batches, stamps)
        ]

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
