"""Fetch, ListOffsets and DeleteRecords: tidelog's partitions read as Kafka's.

Offsets: Kafka's start at 0, tidelog's at 1, so the record at tidelog
offset n is at Kafka offset n - 1, and a position (the next record to read)
is the same number on both sides: a Kafka fetch from offset k reads
tidelog's records after k, a partition's high watermark is its last
offset, its log start offset is its first offset - 1, and a committed
offset means the same thing in a Kafka group and in tidelog's stream group.

A Fetch long-polls: when the partitions asked hold fewer than min_bytes it
waits for an append to one of them (the hub's wake-ups, also from other
processes through the store) until max_wait, at most MAX_WAIT_S. Records
go out as one uncompressed batch a partition, at least one record even
past the byte limits (KIP-74), so a large record never stalls a consumer;
the limits count the batch's bytes on the wire, as Kafka's do.

Records a Kafka producer sent in a compressed batch go out in that batch,
as Kafka serves them, where the store kept it (SQLite: `KeepsWireBatches`)
and every record of it is still there (compaction and retention end
that): no record is read or encoded again, and the consumer decompresses.

A consumer that is behind asks for the next range as soon as it has taken
one in, so a fetch that stopped at its byte limit starts reading the next
range of those partitions on a thread as it answers (a read-ahead): the
store read and the encoding, most of a fetch's cost, then run while the
client decodes, instead of after it asks. The next fetch of the connection
takes what was read if it asks for that position with the same limits
within READ_AHEAD_TTL_S and the partition's bounds, read afresh, still hold
it; else it is dropped and read again. A connection holds one read-ahead a
partition, no more bytes in all than the fetch's own limit.
There are no transactions, so read_committed reads what read_uncommitted
does (the last stable offset is the high watermark) and fetch sessions are
not kept (session id 0: the client sends its whole fetch each time).
"""

from __future__ import annotations

import struct
import time
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from ...errors import OffsetOutOfRange, TidelogError, UnknownTopic
from ...log import Log, read_rows
from ...records import decode_meta
from ...store.base import KeepsWireBatches, PartitionOffsets
from .batches import CODEC, HEAD_SIZE, ZSTD, RowBatch
from .broker import Broker, Session
from .codes import error_code
from .wire import Request

MAX_WAIT_S = 30.0
FIRST_READ_ROWS = 500  # the most the first store read of a partition's fetch asks for
SMALL_RECORD = 32  # bytes: a guess of a record's least size, for a small budget's first read
MAX_READ_ROWS = 10_000  # the most one store read asks for
# How long a read-ahead stays usable: a consumer that keeps up asks again
# within milliseconds; the bound keeps a topic deleted and made again, or
# compacted, meanwhile from being answered with what was read before.
READ_AHEAD_TTL_S = 1.0
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
READ_UNCOMMITTED = 0


class _Partition:
    __slots__ = (
        "topic",
        "partition",
        "position",
        "max_bytes",
        "code",
        "high",
        "start",
        "records",
        "size",
        "last",
        "more",
    )

    def __init__(self, topic: str, partition: int, position: int, max_bytes: int):
        self.topic = topic
        self.partition = partition
        self.position = position
        self.max_bytes = max_bytes
        self.code = ErrorCode.none
        self.high = -1
        self.start = -1
        self.records: bytes | bytearray | None = None
        self.size = 0
        self.last = -1
        self.more = False


class Chunk(NamedTuple):
    """A partition's records read for a fetch: its batch, and where it stopped."""

    records: bytes | bytearray
    size: int  # what it counts against the fetch's byte limits
    last: int  # tidelog offset of its last record: the Kafka position after it
    more: bool  # stopped at the byte budget with records left behind it


class Ahead(NamedTuple):
    """A chunk read ahead, and the creation time of its topic when it was read."""

    created: int
    chunk: Chunk


def read_chunk(
    log: Log, topic: str, partition: int, after: int, high: int, budget: int, first: bool, zstd: bool = True
) -> Chunk | None:
    """The records after `after` (up to `high`) that fit `budget` bytes, as
    one batch; at least one when `first` (KIP-74). None when there are none.
    Where the store kept the batches producers sent them in, those batches
    as they came instead (`wire_chunk`; zstd ones only when `zstd`)."""
    if isinstance(log.store, KeepsWireBatches):
        chunk = wire_chunk(log.store, topic, partition, after, high, budget, first, zstd)
        if chunk is not None:
            return chunk
    batch = RowBatch(decode_meta)
    want = max(1, min(FIRST_READ_ROWS, budget // SMALL_RECORD))
    more = False
    while after < high:
        rows = read_rows(log.store, topic, partition, after, want)
        if not rows:
            break
        taken = batch.add(rows, budget, first)
        if taken < len(rows):
            more = True
            break
        after = rows[-1][0]
        # As many rows as the budget left holds at the size seen so far: a
        # store read costs a Python object a row, so reading far past the
        # budget would cost what encoding does.
        if batch.count:
            per_row = (batch.size - HEAD_SIZE) / batch.count
            want = int(min(max((budget - batch.size) / per_row, 1) + 16, MAX_READ_ROWS))
    if not batch.count:
        return None
    return Chunk(batch.finish(), batch.size, batch.last_offset, more)


def wire_chunk(
    store: KeepsWireBatches,
    topic: str,
    partition: int,
    after: int,
    high: int,
    budget: int,
    first: bool,
    zstd: bool = True,
) -> Chunk | None:
    """The batches producers sent from the one holding offset `after` + 1 on,
    as Kafka serves them: each as it came (compressed, its producer's ids
    and timestamps), but its base offset (tidelog's offset - 1) and leader
    epoch, which its CRC does not cover. The first batch may begin before
    `after` + 1: a Kafka client skips what it did not ask for. None when
    no kept batch holds `after` + 1, or the first does not fit `budget`.
    The byte limits count a batch at its records' size uncompressed, not
    at its bytes as Kafka does: a consumer sizes its fetches (and librdkafka
    its queue, pausing a second when a fetch overfills it) for the records
    it holds, and a batch compressed tenfold would hand it ten times more.
    A client that fetches below v10 cannot read zstd (KIP-110): without
    `zstd`, the batches stop before the first zstd one."""
    kept = store.wire_batches(topic, partition, after, high, budget)
    if not zstd:
        for i, (_, _, data, _) in enumerate(kept):
            if data[_ATTRIBUTES_AT + 1] & CODEC == ZSTD:
                kept = kept[:i]
                break
    if not kept:
        return None
    size = sum(counts for _, _, _, counts in kept)
    if size > budget and not first:
        return None
    out = bytearray().join(data for _, _, data, _ in kept)
    at = 0
    for first_offset, _, data, _ in kept:
        _BASE.pack_into(out, at, first_offset - 1)
        _EPOCH.pack_into(out, at + _EPOCH_AT, 0)
        at += len(data)
    last = kept[-1][1]
    return Chunk(out, size, last, last < high)


_BASE = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_EPOCH_AT = 12  # after the base offset (8) and the batch length (4)
_ATTRIBUTES_AT = 21  # an i16: the codec is in its low bits
ZSTD_FETCH = 10  # the first Fetch version whose client reads zstd batches


def _read(
    broker: Broker, asked: list[_Partition], max_bytes: int, ready: dict[Any, Ahead | None], zstd: bool
) -> int:
    """On a thread: fill each partition's records, within the byte limits,
    taking what was read ahead where it still holds; returns the bytes read in all."""
    log = broker.log
    offsets: dict[str, list[PartitionOffsets] | TidelogError] = {}
    created: dict[str, int | None] = {}
    total = 0
    for p in asked:
        p.records, p.size, p.code, p.last, p.more = None, 0, ErrorCode.none, -1, False
        bounds = offsets.get(p.topic)
        if bounds is None:
            try:
                bounds = offsets[p.topic] = log.offsets(p.topic)
            except TidelogError as e:
                bounds = offsets[p.topic] = e
        if isinstance(bounds, TidelogError):
            p.code = error_code(bounds)
            continue
        if not 0 <= p.partition < len(bounds):
            p.code = ErrorCode.unknown_topic_or_partition
            continue
        b = bounds[p.partition]
        p.high, p.start = b.last_offset, b.first_offset - 1
        if not p.start <= p.position <= p.high:
            p.code = ErrorCode.offset_out_of_range
            continue
        budget = min(p.max_bytes, max_bytes - total)
        if p.position == p.high or (budget <= 0 and total):
            continue
        chunk = None
        ahead = ready.pop((p.topic, p.partition, p.position, p.max_bytes, zstd), None)
        if ahead is not None and ahead.chunk.size <= budget and ahead.chunk.last <= p.high:
            if p.topic not in created:
                try:
                    created[p.topic] = log.topic(p.topic).created
                except TidelogError:
                    created[p.topic] = None
            if created[p.topic] == ahead.created:
                chunk = ahead.chunk
        if chunk is None:  # none read ahead, or not for this topic and limits
            try:
                chunk = read_chunk(log, p.topic, p.partition, p.position, p.high, budget, not total, zstd)
            except OffsetOutOfRange:  # retention removed them under us
                p.code = ErrorCode.offset_out_of_range
                continue
            except UnknownTopic:
                p.code = ErrorCode.unknown_topic_or_partition
                continue
        if chunk is not None:
            p.records, p.size, p.last, p.more = chunk.records, chunk.size, chunk.last, chunk.more
            total += chunk.size
    return total


def _ahead(log: Log, topic: str, partition: int, after: int, budget: int, zstd: bool) -> Ahead | None:
    """A read-ahead, on a thread: what a fetch from `after` would read, or None."""
    try:
        # The topic's creation time before its records: a topic made again
        # under the name meanwhile shows as another time when it is used.
        created = log.topic(topic).created
        chunk = read_chunk(log, topic, partition, after, 1 << 62, budget, True, zstd)
    except TidelogError:  # the fetch that asks for it reads again and answers the error
        return None
    return None if chunk is None else Ahead(created, chunk)


def _read_ahead(session: Session, asked: list[_Partition], max_bytes: int, zstd: bool) -> None:
    """Start reading the ranges after the partitions that stopped at their byte
    limit, within the fetch's own byte limit in all (one more answer's worth)."""
    broker = session.broker
    now = time.monotonic()
    room = max_bytes
    for p in asked:
        budget = min(p.max_bytes, max_bytes)
        if p.more and budget <= room:
            room -= budget
            future = broker.threads.run(_ahead, broker.log, p.topic, p.partition, p.last, budget, zstd)
            session.ahead[(p.topic, p.partition, p.last, p.max_bytes, zstd)] = (now, future)


async def _take_ahead(session: Session, asked: list[_Partition], zstd: bool) -> dict[Any, Ahead | None]:
    """What was read ahead for this fetch's partitions and positions (the rest is dropped)."""
    ahead, session.ahead = session.ahead, {}
    ready: dict[Any, Ahead | None] = {}
    if not ahead:
        return ready
    fresh = time.monotonic() - READ_AHEAD_TTL_S
    for p in asked:
        key = (p.topic, p.partition, p.position, p.max_bytes, zstd)
        started = ahead.get(key)
        if started is not None and started[0] >= fresh:
            ready[key] = await started[1]  # still reading: waiting beats reading twice
    return ready


async def fetch(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    wait = min(max(0.0, body.max_wait.total_seconds()), MAX_WAIT_S)
    min_bytes = max(0, body.min_bytes)
    # Capped by the broker's fetch_max_bytes (Kafka's fetch.max.bytes): a 1 KB request
    # once asked for 2^31-1 bytes and was answered 191 MiB.
    max_bytes = max(1, min(getattr(body, "max_bytes", 0x7FFFFFFF), broker.limits.fetch_max_bytes))
    # A partition named twice counts once, as in Kafka (a map from partition to its
    # fetch: the first naming's place, the last one's position and limit).
    by_key: dict[tuple[str, int], _Partition] = {}
    for t in body.topics:
        for p in t.partitions:
            by_key[(t.topic, p.partition)] = _Partition(
                t.topic, p.partition, p.fetch_offset, max(1, p.partition_max_bytes)
            )
    asked = list(by_key.values())
    keys = list(by_key)
    zstd = request.version >= ZSTD_FETCH
    ready = await _take_ahead(session, asked, zstd)
    deadline = time.monotonic() + wait
    while True:
        seq = broker.hub.seq
        total = await broker.run(_read, broker, asked, max_bytes, ready, zstd)
        ready = {}
        left = deadline - time.monotonic()
        if total >= min_bytes or left <= 0 or any(p.code for p in asked) or not asked:
            break
        await broker.hub.wait(keys, seq, left)
        if broker.hub.closed:
            break
    _read_ahead(session, asked, max_bytes, zstd)
    # As Kafka answers: no aborted transactions to a read_uncommitted fetch (null),
    # none found to a read_committed one (empty); a partition that failed has -1
    # for its offsets, and an empty list when it is unknown (answered before a read).
    aborted = () if getattr(body, "isolation_level", READ_UNCOMMITTED) else None
    topics: dict[str, list[dict[str, Any]]] = {}
    for p in asked:
        answer: dict[str, Any]
        if p.code:
            answer = {
                "partition_index": p.partition,
                "error_code": p.code,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": () if p.code == ErrorCode.unknown_topic_or_partition else None,
                "records": b"",
            }
        else:
            answer = {
                "partition_index": p.partition,
                "error_code": p.code,
                "high_watermark": p.high,
                "last_stable_offset": p.high,
                "log_start_offset": p.start,
                "aborted_transactions": aborted,
                "records": p.records or b"",
            }
        topics.setdefault(p.topic, []).append(answer)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
    }


MAX_TIMESTAMP_LIST = 7  # the first ListOffsets version that asks for the max timestamp (KIP-734)


def _stamp(log: Log, topic: str, partition: int, offset: int) -> int:
    """The timestamp of the record at tidelog's `offset` (-1 when it is gone)."""
    found = log.read(topic, partition, offset - 1, 1)
    return found[0].timestamp if found else -1


def _list_offset(broker: Broker, topic: str, partition: int, timestamp: int, version: int) -> dict[str, Any]:
    """A partition's answer, as Kafka 4 gives it: the offset (Kafka's), the
    timestamp of the record found (-1 for the earliest and latest), and -1
    for both and the leader epoch when there is no such record."""
    log = broker.log
    none: dict[str, Any] = {
        "partition_index": partition,
        "error_code": 0,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    # -3 (the max timestamp) from v7; -4 and below are asks of later versions
    # (local and tiered log starts), which Kafka answers so.
    if timestamp < EARLIEST and (timestamp != MAX_TIMESTAMP or version < MAX_TIMESTAMP_LIST):
        return {**none, "error_code": ErrorCode.unsupported_version}
    found: dict[str, Any] = {**none, "leader_epoch": 0}
    try:
        bounds = log.offsets(topic)
        if not 0 <= partition < len(bounds):
            return {**none, "error_code": ErrorCode.unknown_topic_or_partition}
        b = bounds[partition]
        if timestamp == LATEST:
            return {**found, "offset": b.last_offset}
        if timestamp == EARLIEST:
            return {**found, "offset": b.first_offset - 1}
        if timestamp == MAX_TIMESTAMP:
            if b.last_offset < b.first_offset:
                return none
            # The first record of the largest timestamp, found as a search by
            # time finds any (timestamps rise with offsets: Log.offset_for_time):
            # the last record's stamp, then the first record at it.
            at = log.offset_for_time(topic, partition, _stamp(log, topic, partition, b.last_offset))
            offset = b.last_offset if at is None else at
            return {**found, "offset": offset - 1, "timestamp": _stamp(log, topic, partition, offset)}
        at = log.offset_for_time(topic, partition, timestamp)
        if at is None:
            return none
        return {**found, "offset": at - 1, "timestamp": _stamp(log, topic, partition, at)}
    except TidelogError as e:
        return {**none, "error_code": error_code(e)}


async def list_offsets(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    topics = []
    for t in request.body.topics:
        parts = [
            await broker.run(_list_offset, broker, t.name, p.partition_index, p.timestamp, request.version)
            for p in t.partitions
        ]
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _delete_records(broker: Broker, topic: str, partition: int, offset: int) -> dict[str, Any]:
    log = broker.log
    try:
        if offset == -1:  # Kafka's "up to the high watermark"
            bounds = log.offsets(topic)
            if not 0 <= partition < len(bounds):
                return {"partition_index": partition, "low_watermark": -1, "error_code": 3}
            offset = bounds[partition].last_offset
        elif offset < 0:
            return {
                "partition_index": partition,
                "low_watermark": -1,
                "error_code": ErrorCode.offset_out_of_range,
            }
        log.delete_before(topic, partition, offset + 1)
        start = log.offsets(topic)[partition].first_offset - 1
        return {"partition_index": partition, "low_watermark": max(start, offset), "error_code": 0}
    except TidelogError as e:
        return {"partition_index": partition, "low_watermark": -1, "error_code": error_code(e)}


async def delete_records(session: Session, request: Request) -> dict[str, Any]:
    """Records below a Kafka offset go (tidelog's below offset + 1): the partition's log start moves up."""
    broker = session.broker
    topics = []
    for t in request.body.topics:
        parts = [
            await broker.run(_delete_records, broker, t.name, p.partition_index, p.offset)
            for p in t.partitions
        ]
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
