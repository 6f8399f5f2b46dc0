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
past the byte limits (KIP-74), so a large record never stalls a consumer.
There are no transactions, so read_committed reads what read_uncommitted
does (the last stable offset is the high watermark) and fetch sessions are
not kept (session id 0: the client sends its whole fetch each time).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import time
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import OffsetOutOfRange, TidelogError, UnknownTopic
from ...log import read_rows
from ...records import decode_meta
from ...store.base import PartitionOffsets, Row
from .batches import write_rows
from .broker import Broker, Session
from .codes import error_code
from .wire import Request

MAX_WAIT_S = 30.0
READ_ROWS = 2000  # records a store read asks for while filling a partition's bytes
RECORD_OVERHEAD = 24  # a record's framing in a batch, roughly: what max_bytes counts beside the payload
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


_values = operator.itemgetter(2)
_metas = operator.itemgetter(3)


def _row_cost(row: Row) -> int:
    return len(row[2]) + (len(row[3]) if row[3] is not None else 0) + RECORD_OVERHEAD


def _cost(rows: list[Row] | tuple[Row, ...]) -> int:
    """What `rows` add to a fetch's bytes: values, metas and each record's framing."""
    metas = sum(map(len, filter(None, map(_metas, rows))))
    return sum(map(len, map(_values, rows))) + metas + RECORD_OVERHEAD * len(rows)


class _Partition:
    __slots__ = ("topic", "partition", "position", "max_bytes", "code", "high", "start", "records", "size")

    def __init__(self, topic: str, partition: int, position: int, max_bytes: int):
        self.topic = topic
        self.partition = partition
        self.position = position
        self.max_bytes = max_bytes
        self.code = ErrorCode.none
        self.high = -1
        self.start = -1
        self.records: bytes | None = None
        self.size = 0


def _read(broker: Broker, asked: list[_Partition], max_bytes: int) -> int:
    """On a thread: fill each partition's records, within the byte limits;
    returns the bytes read in all."""
    log = broker.log
    offsets: dict[str, list[PartitionOffsets] | TidelogError] = {}
    total = 0
    for p in asked:
        p.records, p.size, p.code = None, 0, ErrorCode.none
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
        records: list[Row] = []
        size = 0
        after = p.position
        full = False
        try:
            while not full and after < p.high:
                rows = read_rows(log.store, p.topic, p.partition, after, READ_ROWS)
                if not rows:
                    break
                # A whole chunk that fits is taken at once (lengths summed in C);
                # the chunk that crosses the budget, a record at a time.
                whole = _cost(rows)
                if size + whole <= budget:
                    records.extend(rows)
                    size += whole
                else:
                    ends = list(itertools.accumulate(map(_row_cost, rows), initial=size))
                    # the rows whose running total stays within the budget; one at least
                    take = max(bisect.bisect_right(ends, budget) - 1, 0 if records else 1)
                    records.extend(rows[:take])
                    size = ends[take]
                    full = True
                after = rows[-1][0]
        except OffsetOutOfRange:  # retention removed them under us
            p.code = ErrorCode.offset_out_of_range
            continue
        except UnknownTopic:
            p.code = ErrorCode.unknown_topic_or_partition
            continue
        if records:
            p.records = write_rows(records, decode_meta)
            p.size = size
            total += size
    return total


async def fetch(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    body = request.body
    wait = min(max(0.0, body.max_wait.total_seconds()), MAX_WAIT_S)
    min_bytes = max(0, body.min_bytes)
    max_bytes = max(1, getattr(body, "max_bytes", 0x7FFFFFFF))
    asked = [
        _Partition(t.topic, p.partition, p.fetch_offset, max(1, p.partition_max_bytes))
        for t in body.topics
        for p in t.partitions
    ]
    keys = list({(p.topic, p.partition) for p in asked})
    deadline = time.monotonic() + wait
    while True:
        seq = broker.hub.seq
        total = await broker.run(_read, broker, asked, max_bytes)
        left = deadline - time.monotonic()
        if total >= min_bytes or left <= 0 or any(p.code for p in asked) or not asked:
            break
        await broker.hub.wait(keys, seq, left)
        if broker.hub.closed:
            break
    topics: dict[str, list[dict[str, Any]]] = {}
    for p in asked:
        topics.setdefault(p.topic, []).append(
            {
                "partition_index": p.partition,
                "error_code": p.code,
                "high_watermark": p.high,
                "last_stable_offset": p.high,
                "log_start_offset": p.start,
                "aborted_transactions": None if p.code else (),
                "records": p.records or b"",
            }
        )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
    }


def _list_offset(broker: Broker, topic: str, partition: int, timestamp: int) -> dict[str, Any]:
    log = broker.log
    answer: dict[str, Any] = {
        "partition_index": partition,
        "error_code": 0,
        "timestamp": -1,
        "leader_epoch": 0,
    }
    try:
        bounds = log.offsets(topic)
        if not 0 <= partition < len(bounds):
            return {**answer, "error_code": ErrorCode.unknown_topic_or_partition, "offset": -1}
        b = bounds[partition]
        if timestamp == LATEST:
            return {**answer, "offset": b.last_offset}
        if timestamp == EARLIEST:
            return {**answer, "offset": b.first_offset - 1}
        if timestamp == MAX_TIMESTAMP:  # the last record stands for the latest stamp
            if b.last_offset < b.first_offset:
                return {**answer, "offset": -1}
            row = log.store.read(topic, partition, b.last_offset - 1, 1)
            return {**answer, "offset": b.last_offset - 1, "timestamp": row[0][1] if row else -1}
        if timestamp < 0:
            return {**answer, "error_code": ErrorCode.invalid_request, "offset": -1}
        found = log.offset_for_time(topic, partition, timestamp)
        if found is None:
            return {**answer, "offset": -1}
        row = log.store.read(topic, partition, found - 1, 1)
        return {**answer, "offset": found - 1, "timestamp": row[0][1] if row else timestamp}
    except TidelogError as e:
        return {**answer, "error_code": error_code(e), "offset": -1}


async def list_offsets(session: Session, request: Request) -> dict[str, Any]:
    broker = session.broker
    topics = []
    for t in request.body.topics:
        parts = [
            await broker.run(_list_offset, broker, t.name, p.partition_index, p.timestamp)
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
