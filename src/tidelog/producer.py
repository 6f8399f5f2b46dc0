"""Producer: validates, encodes and sends records through a Core's write path."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from typing import Any

from .bounds import check_time_ms
from .config import MAX_PARTITIONS, check_int, check_name
from .core import Core
from .errors import InvalidRequest, MessageTooLarge, UnknownTopic
from .partitioner import partition_for_key
from .records import (
    BatchSent,
    NewRecord,
    Prepared,
    Sent,
    encode_headers,
    encode_key,
    encode_meta,
    encode_value,
)
from .topics import check_partition, check_topic_name

# The most records one batch writes (a write is one transaction: it is refused
# above this, not split, or it would stop being all or nothing).
MAX_BATCH = 100_000


class Producer:
    """Sends records; `id` names the producer (see `exclude_producer`)."""

    def __init__(self, log: Core, id: str | None = None):
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
        _check_sizes(topic, max_bytes, stored, metas)
        return Prepared(topic, partition, stored, metas, timestamp)

    def prepare_stored(
        self,
        topic: str,
        partition: int,
        stored: list[bytes | str],
        metas: list[bytes | None] | None,
        timestamp: int | None = None,
    ) -> Prepared:
        """`prepare` for records already in their stored form: values as
        `encode_value` makes them, metas as `encode_meta` does (None when
        no record has one). The same checks, none of the encoding: a front
        that decodes a wire format straight into that form (Kafka's record
        batches) makes no object a record on the way.
        """
        check_topic_name(topic)
        if timestamp is not None:
            check_time_ms("timestamp", timestamp)
        if not stored:
            raise InvalidRequest("send_batch needs at least one record")
        if len(stored) > MAX_BATCH:
            raise InvalidRequest(f"a batch holds at most {MAX_BATCH} records, got {len(stored)}")
        if metas is not None and len(metas) != len(stored):
            raise InvalidRequest(f"{len(metas)} metas for {len(stored)} values")
        partition, max_bytes = self._partition(topic, None, partition)
        _check_sizes(topic, max_bytes, stored, metas)
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


def _check_sizes(
    topic: str, max_bytes: int, stored: list[bytes | str], metas: list[bytes | None] | None
) -> None:
    """MessageTooLarge for the first record over `max_bytes`. The largest
    value and the largest meta together bound every record: only when they
    could pass it (a str's bytes are at most four a character) is each
    record counted, so a batch of small records costs two C-level scans."""
    bound = max(map(len, stored)) * 4
    if metas is not None:
        bound += max(map(len, filter(None, metas)), default=0)
    if bound > max_bytes:
        for i, value in enumerate(stored):
            _check_size(topic, max_bytes, i, value, None if metas is None else metas[i])


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
