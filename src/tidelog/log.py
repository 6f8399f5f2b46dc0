"""The Log: topics, producing, reading, and stream-group offsets.

The core holds the semantics and no SQL: it validates input at the edge,
chooses partitions, encodes payloads and turns store rows into Messages.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .config import MAX_PARTITIONS, TopicConfig, check_int, check_name
from .errors import (
    InvalidRequest,
    MessageTooLarge,
    TopicConflict,
    UnknownTopic,
)
from .partitioner import partition_for_key
from .records import (
    BatchSent,
    Message,
    Sent,
    encode_headers,
    encode_key,
    encode_value,
    make_messages,
)
from .store.base import GroupOffset, PartitionInfo, Store, TopicInfo

DEFAULT_BATCH = 100
MAX_BATCH = 100_000


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class NewRecord:
    """One record of a batch that carries its own key or headers."""

    value: Any
    key: Any = None
    headers: Any = None


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionInfo]
    config: dict[str, Any] = field(default_factory=dict)
    created: int = 0

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)


class Log:
    """A durable, partitioned log. Thread-safe; share one per process."""

    def __init__(self, store: Store, *, auto_create: bool = True, clock: Callable[[], int] | None = None):
        self.store = store
        self.auto_create = bool(auto_create)
        self.clock = clock or _wall_clock_ms
        # name -> (partition count, max_message_bytes). Partitions only grow,
        # so a stale count is refreshed when a partition looks missing.
        self._meta: dict[str, tuple[int, int]] = {}

    # lifecycle -------------------------------------------------------------

    def close(self) -> None:
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
            differs = {k: v for k, v in config.items() if info.config.get(k) != v}
            if differs:
                raise TopicConflict(
                    f"topic {name!r} exists with {', '.join(f'{k}={info.config.get(k)!r}' for k in differs)}; "
                    f"asked for {', '.join(f'{k}={v!r}' for k, v in differs.items())}"
                )
        self._remember(info)
        return info

    def topics(self) -> list[TopicInfo]:
        return self.store.topics()

    def topic(self, name: str) -> TopicInfo:
        check_name("topic", name)
        info = self.store.topic(name)
        if info is None:
            raise UnknownTopic(f"topic {name!r} does not exist")
        self._remember(info)
        return info

    def describe(self, name: str) -> TopicDescription:
        info = self.topic(name)
        return TopicDescription(info.name, self.store.partitions(name), info.config, info.created)

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
        self._remember(info)
        return info

    def delete_topic(self, name: str) -> bool:
        check_name("topic", name)
        self._meta.pop(name, None)
        return self.store.delete_topic(name)

    def _remember(self, info: TopicInfo) -> tuple[int, int]:
        meta = (info.partitions, info.config.get("max_message_bytes", TopicConfig.max_message_bytes))
        self._meta[info.name] = meta
        return meta

    def _topic_meta(self, name: str, *, create: bool = False, refresh: bool = False) -> tuple[int, int]:
        meta = None if refresh else self._meta.get(name)
        if meta is not None:
            return meta
        info = self.store.topic(name)
        if info is None:
            if not (create and self.auto_create):
                raise UnknownTopic(
                    f"topic {name!r} does not exist"
                    + ("" if not create else " (auto_create is off; create it first)")
                )
            info = self.create_topic(name, 1)
        return self._remember(info)

    # producing -------------------------------------------------------------

    def producer(self, id: str | None = None) -> Producer:
        return Producer(self, id)

    # reading -----------------------------------------------------------------

    def read(self, topic: str, partition: int, after: int = 0, limit: int = DEFAULT_BATCH) -> list[Message]:
        """Records after an offset, without a group (an event-log cursor)."""
        check_name("topic", topic)
        check_int("partition", partition, 0)
        check_int("after", after, 0)
        check_int("limit", limit, 1, MAX_BATCH)
        return make_messages(topic, partition, self.store.read(topic, partition, after, limit))

    def consumer(self, group: str) -> Consumer:
        """A stream group member with manual assignment."""
        check_name("group", group)
        self.store.ensure_group(group, "stream")
        return Consumer(self, group)

    def groups(self) -> list[str]:
        return self.store.groups()

    def group_offsets(self, group: str) -> list[GroupOffset]:
        """A group's committed offset on every partition it committed on."""
        check_name("group", group)
        return self.store.group_offsets(group)


class Producer:
    """Sends records; `id` names the producer (see `exclude_producer`)."""

    def __init__(self, log: Log, id: str | None = None):
        if id is not None:
            check_name("producer", id)
        self.log = log
        self.id = id
        self._spread = itertools.count()

    def _partition(self, topic: str, key: bytes | None, partition: int | None) -> tuple[int, int]:
        """(partition, max_message_bytes) for a send."""
        partitions, max_bytes = self.log._topic_meta(topic, create=True)
        if partition is not None:
            check_int("partition", partition, 0)
            if partition >= partitions:
                # Maybe another process grew the topic since we cached it.
                partitions, max_bytes = self.log._topic_meta(topic, refresh=True)
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
        check_name("topic", topic)
        stored, fmt = encode_value(value)
        raw_key = encode_key(key)
        raw_headers = encode_headers(headers)
        partition, max_bytes = self._partition(topic, raw_key, partition)
        _check_size(topic, max_bytes, stored, raw_key, raw_headers)
        ts = self.log.clock()
        offset = self.log.store.append(
            topic,
            partition,
            ts,
            (stored,),
            None if fmt is None else (fmt,),
            None if raw_key is None else (raw_key,),
            None if raw_headers is None else (raw_headers,),
            self.id,
        )
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
        check_name("topic", topic)
        values = values if isinstance(values, list) else list(values)
        if not values:
            raise InvalidRequest("send_batch needs at least one record")
        if len(values) > MAX_BATCH:
            raise InvalidRequest(f"a batch holds at most {MAX_BATCH} records, got {len(values)}")
        raw_key = encode_key(key)
        raw_headers = encode_headers(headers)
        partition, max_bytes = self._partition(topic, raw_key, partition)
        stored, fmts, keys, hdrs = _encode_batch(values, raw_key, raw_headers)
        _check_batch_size(topic, max_bytes, stored, keys, hdrs)
        ts = self.log.clock()
        first = self.log.store.append(topic, partition, ts, stored, fmts, keys, hdrs, self.id)
        return BatchSent(topic, partition, first, len(stored), ts)


def _encode_batch(
    values: list[Any], raw_key: bytes | None, raw_headers: bytes | None
) -> tuple[list, list | None, list | None, list | None]:
    n = len(values)
    kinds = set(map(type, values))
    # Fast path: a batch of plain bytes needs no per-record work in Python.
    if kinds == {bytes}:
        stored, fmts, keys, hdrs = values, None, None, None
    elif NewRecord not in kinds:
        pairs = [encode_value(v) for v in values]
        stored = [p[0] for p in pairs]
        fmts = [p[1] for p in pairs]
        keys = hdrs = None
    else:
        stored, fmts, keys, hdrs = [], [], [], []
        for v in values:
            if isinstance(v, NewRecord):
                s, f = encode_value(v.value)
                k = raw_key if v.key is None else encode_key(v.key)
                h = raw_headers if v.headers is None else encode_headers(v.headers)
            else:
                (s, f), k, h = encode_value(v), raw_key, raw_headers
            stored.append(s)
            fmts.append(f)
            keys.append(k)
            hdrs.append(h)
        return stored, fmts, keys, hdrs
    if raw_key is not None:
        keys = [raw_key] * n
    if raw_headers is not None:
        hdrs = [raw_headers] * n
    return stored, fmts, keys, hdrs


def _size(v: bytes | str) -> int:
    return len(v) if type(v) is bytes else len(v.encode())


def _check_size(
    topic: str, max_bytes: int, stored: bytes | str, key: bytes | None, headers: bytes | None
) -> None:
    # A str needs encoding to know its byte size; skip that when even four
    # bytes a character would fit.
    n = len(stored)
    if type(stored) is not bytes and n * 4 > max_bytes:
        n = len(stored.encode())
    n += (len(key) if key else 0) + (len(headers) if headers else 0)
    if n > max_bytes:
        raise MessageTooLarge(f"record of {n} bytes is over max_message_bytes={max_bytes} of topic {topic!r}")


def _check_batch_size(
    topic: str, max_bytes: int, stored: list, keys: list | None, headers: list | None
) -> None:
    longest = max(map(len, stored))
    if longest * 4 <= max_bytes and keys is None and headers is None:
        return
    for i, s in enumerate(stored):
        n = _size(s) + (len(keys[i] or b"") if keys else 0) + (len(headers[i] or b"") if headers else 0)
        if n > max_bytes:
            raise MessageTooLarge(
                f"record {i} of the batch is {n} bytes, over max_message_bytes={max_bytes} "
                f"of topic {topic!r}; nothing was written"
            )


class Consumer:
    """A member of a stream group that names its partitions itself.

    The consumer keeps a position per partition: the first fetch starts after
    the group's committed offset, later fetches continue where the last one
    ended (as a Kafka consumer does). A restarted consumer resumes at
    committed + 1, so processing is at least once.
    """

    def __init__(self, log: Log, group: str):
        self.log = log
        self.group = group
        self._position: dict[tuple[str, int], int] = {}

    def _check(self, topic: str, partition: int) -> None:
        check_name("topic", topic)
        check_int("partition", partition, 0)

    def fetch(
        self,
        topic: str,
        partition: int,
        max_messages: int = DEFAULT_BATCH,
        *,
        exclude_producer: str | None = None,
    ) -> list[Message]:
        self._check(topic, partition)
        check_int("max_messages", max_messages, 1, MAX_BATCH)
        if exclude_producer is not None:
            check_name("producer", exclude_producer)
        tp = (topic, partition)
        after = self._position.get(tp)
        if after is None:
            after = self.log.store.committed(self.group, topic, partition)
        rows = self.log.store.read(topic, partition, after, max_messages, exclude_producer)
        self._position[tp] = rows[-1][0] if rows else after
        return make_messages(topic, partition, rows)

    def position(self, topic: str, partition: int) -> int:
        """The offset the last fetch ended at (next fetch starts after it)."""
        self._check(topic, partition)
        tp = (topic, partition)
        if tp not in self._position:
            self._position[tp] = self.log.store.committed(self.group, topic, partition)
        return self._position[tp]

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
        check_int("offset", offset, 0)
        self.log.store.commit(self.group, topic, partition, offset)  # type: ignore[arg-type]

    def committed(self, topic: str, partition: int) -> int:
        self._check(topic, partition)
        return self.log.store.committed(self.group, topic, partition)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Set the committed offset, backwards too: the next fetch starts at offset + 1."""
        self._check(topic, partition)
        check_int("offset", offset, 0)
        self.log.store.seek(self.group, topic, partition, offset)
        self._position[(topic, partition)] = offset


__all__ = ["Consumer", "Log", "NewRecord", "Producer", "TopicDescription", "partition_for_key"]
