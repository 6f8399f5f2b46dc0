"""Topics as Redis streams, and Redis-shaped consumer groups.

A stream is a topic with one partition. What this module adds to the log is
the entry id, the field/value view of a record, and consumer groups with
Redis's semantics on the queue-group mechanics of the store.

Entry ids. Every record has one id `<ms>-<seq>`, strictly increasing with
the offset:

- a record that carries the header `tidelog-stream-id` (first among its
  headers) has that id: XADD stores an explicit id there, and the ids it
  has to invent when the clock is behind the stream's last id;
- every other record (XADD with `*` in the usual case, and everything sent
  through the Python API or HTTP) has the derived id `<timestamp>-<offset>`.

So an id maps to its offset directly (a derived id names it; a stored one is
found by binary search, ids being ordered like offsets), and nothing is
stored for the common record.

Fields. A record reads as the pairs `key <key>` (when it has a key),
`value <value>` (unless the value is empty and headers follow), then its
headers in order. XADD maps back: the first field named `value` is the
record's value, the first named `key` its key, every other pair a header.

Consumer groups. A Redis group is a queue group whose leases belong to a
named consumer and never expire: an entry stays pending with its consumer
until XACK, or until XCLAIM / XAUTOCLAIM moves it; its idle time is the time
since its last delivery.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .config import check_name
from .errors import (
    ConfigurationError,
    GroupExists,
    InvalidRequest,
    InvalidStreamId,
    InvalidValue,
    StreamIdTooSmall,
    UnknownGroup,
    UnknownTopic,
    WrongType,
)
from .queues import DEFAULT_MAX_DELIVERIES
from .records import F_HEADERS, NewRecord, Prepared, decode_headers, decode_meta
from .store.base import NamedConsumers, Row

if TYPE_CHECKING:
    from .log import Log
    from .store.base import ConsumerInfo

ID_HEADER = "tidelog-stream-id"
_ID_PREFIX = struct.pack(">H", len(ID_HEADER)) + ID_HEADER.encode()
_U32 = struct.Struct(">I")
MAX_U64 = (1 << 64) - 1
# A lease that never expires by itself: Redis's pending entries stay until
# acked or claimed.
NEVER = 1 << 62
OFFSET_LIMIT = 1 << 40
CHUNK = 1000


class StreamId(NamedTuple):
    ms: int
    seq: int

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    def next(self) -> StreamId:
        if self.seq < MAX_U64:
            return StreamId(self.ms, self.seq + 1)
        if self.ms < MAX_U64:
            return StreamId(self.ms + 1, 0)
        raise InvalidStreamId("the stream id is the largest possible")

    def prev(self) -> StreamId:
        if self.seq > 0:
            return StreamId(self.ms, self.seq - 1)
        if self.ms > 0:
            return StreamId(self.ms - 1, MAX_U64)
        raise InvalidStreamId("the stream id is the smallest possible")


ZERO = StreamId(0, 0)
MAX_ID = StreamId(MAX_U64, MAX_U64)


def _u64(text: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise InvalidStreamId(f"invalid stream id part {text!r}")
    n = int(text)
    if n > MAX_U64:
        raise InvalidStreamId(f"stream id part {text!r} is too large")
    return n


def parse_id(raw: str | bytes, missing_seq: int = 0) -> StreamId:
    """`<ms>-<seq>` or `<ms>` (seq = missing_seq)."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    ms, sep, seq = text.partition("-")
    return StreamId(_u64(ms), _u64(seq) if sep else missing_seq)


class Entry(NamedTuple):
    id: StreamId
    offset: int
    fields: list[tuple[bytes, bytes]]


def entry_id(row: Row) -> StreamId:
    """The id of a store row (offset, timestamp, value, meta)."""
    meta = row[3]
    if meta is not None and meta[0] & F_HEADERS:
        headers = decode_meta(meta)[2]
        if headers is not None and headers.startswith(_ID_PREFIX):
            (n,) = _U32.unpack_from(headers, len(_ID_PREFIX))
            start = len(_ID_PREFIX) + 4
            try:
                return parse_id(headers[start : start + n])
            except InvalidStreamId:
                pass  # not ours: fall back to the derived id
    return StreamId(row[1], row[0])


def entry_fields(row: Row) -> list[tuple[bytes, bytes]]:
    value = row[2] if isinstance(row[2], bytes) else row[2].encode()
    meta = row[3]
    if meta is None:
        return [(b"value", value)]
    _, key, headers, _ = decode_meta(meta)
    pairs = [(n.encode(), v) for n, v in decode_headers(headers) if n != ID_HEADER]
    out = [] if key is None else [(b"key", key)]
    if value or not pairs:
        out.append((b"value", value))
    return out + pairs


def make_entry(row: Row) -> Entry:
    return Entry(entry_id(row), row[0], entry_fields(row))


def encode_entry(fields: Sequence[tuple[bytes, bytes]], sid: StreamId | None) -> NewRecord:
    """The record for XADD's field/value pairs (and a stored id)."""
    value: bytes | None = None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = []
    if sid is not None:
        headers.append((ID_HEADER, str(sid).encode()))
    for name, val in fields:
        if value is None and name == b"value":
            value = val
        elif key is None and name == b"key":
            key = val
        else:
            try:
                text = name.decode()
            except UnicodeDecodeError:
                raise InvalidValue(f"field name {name[:40]!r} is not UTF-8") from None
            if text == ID_HEADER:
                raise InvalidValue(f"field name {ID_HEADER!r} is reserved for stream ids")
            headers.append((text, val))
    return NewRecord(value if value is not None else b"", key, headers or None)


class Add(NamedTuple):
    """One XADD: `id` is None for `*`, or (ms, None) for `<ms>-*`."""

    stream: str
    fields: list[tuple[bytes, bytes]]
    id: tuple[int, int | None] | None = None
    nomkstream: bool = False
    maxlen: int | None = None
    minid: StreamId | None = None


class _Last(NamedTuple):
    id: StreamId
    derived: bool  # a derived id: any later derived id is greater
    offset: int


class Streams:
    """Redis streams over a Log. Thread-safe; blocking calls (run them off
    an event loop)."""

    def __init__(self, log: Log):
        store = log.store
        if not isinstance(store, NamedConsumers):
            raise ConfigurationError(
                f"the {type(store).__name__} store has no named consumers, which Redis streams need"
            )
        self.log = log
        self.store = store
        self._producer = log.producer()

    # streams ---------------------------------------------------------------

    def check(self, stream: str, must_exist: bool = False) -> bool:
        """True when `stream` exists; WrongType when it is a topic with several partitions."""
        shape = self.log.catalog.get(stream)
        if shape is not None and shape.partitions == 1:
            return True
        check_name("stream", stream)
        info = self.store.topic(stream)
        if info is None:
            if must_exist:
                raise UnknownTopic(f"stream {stream!r} does not exist")
            return False
        self.log.catalog.remember(info)
        if info.partitions != 1:
            raise WrongType(
                f"topic {stream!r} has {info.partitions} partitions; a stream key is a topic of one partition "
                "(use another key, or read this topic over HTTP /v1)"
            )
        return True

    def _first_row(self, stream: str) -> Row | None:
        rows = self.store.read(stream, 0, 0, 1)
        return rows[0] if rows else None

    def _last_row(self, stream: str) -> Row | None:
        rows = self.store.read_before(stream, 0, OFFSET_LIMIT, 1)
        return rows[0] if rows else None

    def _row_at(self, stream: str, offset: int) -> Row | None:
        if offset < 1:
            return None
        rows = self.store.read(stream, 0, offset - 1, 1)
        return rows[0] if rows and rows[0][0] == offset else None

    def _last(self, stream: str) -> _Last:
        row = self._last_row(stream)
        if row is None:
            last_offset = self.store.partitions(stream)[0].last_offset
            return _Last(ZERO, True, last_offset)
        sid = entry_id(row)
        return _Last(sid, sid == (row[1], row[0]), row[0])

    def lower_bound(self, stream: str, sid: StreamId) -> int:
        """The offset of the first entry with id >= sid (last offset + 1 when none)."""
        exact = self._derived_offset(stream, sid)
        if exact is not None:
            return exact
        first, last = self._first_row(stream), self._last_row(stream)
        if first is None or last is None:
            return self._last(stream).offset + 1
        lo, hi = first[0], last[0] + 1
        if sid <= entry_id(first):
            return lo
        while lo < hi:
            mid = (lo + hi) // 2
            row = self._row_at(stream, mid)
            if row is None or entry_id(row) < sid:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _derived_offset(self, stream: str, sid: StreamId) -> int | None:
        """The common case: a derived id names its offset; one read confirms it."""
        if 1 <= sid.seq < OFFSET_LIMIT:
            row = self._row_at(stream, sid.seq)
            if row is not None and entry_id(row) == sid:
                return sid.seq
        return None

    def offset_of(self, stream: str, sid: StreamId) -> int | None:
        """The offset of the entry with exactly this id, None when there is none."""
        exact = self._derived_offset(stream, sid)
        if exact is not None:
            return exact
        offset = self.lower_bound(stream, sid)
        row = self._row_at(stream, offset)
        return offset if row is not None and entry_id(row) == sid else None

    def id_at(self, stream: str, offset: int) -> StreamId:
        row = self._row_at(stream, offset)
        return ZERO if row is None else entry_id(row)

    def length(self, stream: str) -> int:
        if not self.check(stream):
            return 0
        return self.store.partitions(stream)[0].records

    def last_offset(self, stream: str) -> int:
        return self._last(stream).offset if self.check(stream) else 0

    def delete(self, stream: str) -> bool:
        if not self.check(stream):
            return False
        return self.log.delete_topic(stream)

    # adding ----------------------------------------------------------------

    def add(self, adds: Sequence[Add]) -> list[StreamId | None | Exception]:
        """Append several XADDs in as few transactions as ids allow (one, as
        a rule). Each result is the new id, None (NOMKSTREAM on a missing
        stream) or the error that refused that XADD alone."""
        results: list[Any] = [None] * len(adds)
        last: dict[str, _Last] = {}
        planned: list[tuple[int, str, NewRecord, StreamId | None]] = []
        pending_derived: set[str] = set()
        now = self.log.clock()  # once a batch: the ids only need it not to run backwards

        for i, add in enumerate(adds):
            try:
                if add.stream not in last:
                    if not self.check(add.stream):
                        if add.nomkstream:
                            continue
                        # A stream is a topic of one partition, whatever the default count.
                        self.log.catalog.shape(add.stream, create=True, partitions=1)
                    last[add.stream] = self._last(add.stream)
                if add.id is not None and add.stream in pending_derived:
                    # An explicit id must be compared with the derived ids
                    # planned before it, which exist only once written.
                    self._flush(planned, results, last)
                    pending_derived.clear()
                    now = self.log.clock()  # what was written carries a later time
                top = last[add.stream]
                sid = self._assign(add, top, now)
                record = encode_entry(add.fields, sid)
            except Exception as e:  # noqa: BLE001 - handed back to that request only
                results[i] = e
                continue
            planned.append((i, add.stream, record, sid))
            if sid is None:
                pending_derived.add(add.stream)
            else:
                last[add.stream] = _Last(sid, False, top.offset)
        self._flush(planned, results, last)
        self._trim_after_add(adds, results)
        return results

    def _assign(self, add: Add, top: _Last, now: int) -> StreamId | None:
        """The id to store, or None for a derived id (written as <ts>-<offset>)."""
        if add.id is None:
            if now > top.id.ms or (now == top.id.ms and top.derived):
                return None
            return top.id.next()  # the clock is behind the last id: continue after it
        ms, seq = add.id
        if seq is None:
            if ms < top.id.ms:
                raise StreamIdTooSmall(
                    "The ID specified in XADD is equal or smaller than the target stream top item"
                )
            seq = top.id.seq + 1 if ms == top.id.ms else 0
            if ms == top.id.ms and top.id.seq == MAX_U64:
                raise StreamIdTooSmall(
                    "The ID specified in XADD is equal or smaller than the target stream top item"
                )
        sid = StreamId(ms, seq)
        if sid == ZERO:
            raise InvalidStreamId("The ID specified in XADD must be greater than 0-0")
        if sid <= top.id:
            raise StreamIdTooSmall(
                "The ID specified in XADD is equal or smaller than the target stream top item"
            )
        return sid

    def _prepare(
        self, planned: list[tuple[int, str, NewRecord, StreamId | None]], results: list[Any]
    ) -> list[tuple[Prepared, list[tuple[int, StreamId | None]]]]:
        """One prepared batch per stream; a record that fails alone is left out."""
        by_stream: dict[str, list[tuple[int, NewRecord, StreamId | None]]] = {}
        for i, stream, record, sid in planned:
            by_stream.setdefault(stream, []).append((i, record, sid))
        out = []
        for stream, items in by_stream.items():
            try:
                prepared = self._producer.prepare(stream, [r for _, r, _ in items], partition=0)
            except Exception:  # noqa: BLE001 - find the records at fault, keep the others
                good = []
                for item in items:
                    try:
                        self._producer.prepare(stream, [item[1]], partition=0)
                        good.append(item)
                    except Exception as e:  # noqa: BLE001
                        results[item[0]] = e
                if not good:
                    continue
                items = good
                prepared = self._producer.prepare(stream, [r for _, r, _ in items], partition=0)
            out.append((prepared, [(i, sid) for i, _, sid in items]))
        return out

    def _flush(
        self,
        planned: list[tuple[int, str, NewRecord, StreamId | None]],
        results: list[Any],
        last: dict[str, _Last],
    ) -> None:
        if not planned:
            return
        batches = self._prepare(planned, results)
        planned.clear()
        if not batches:
            return
        try:
            sent = self.log.write([p for p, _ in batches])
        except Exception as e:  # noqa: BLE001 - the whole transaction failed
            for _, items in batches:
                for i, _ in items:
                    results[i] = e
            return
        for (_, items), s in zip(batches, sent):
            offset = s.first_offset
            for i, asked in items:
                sid = asked if asked is not None else StreamId(s.timestamp, offset)
                results[i] = sid
                last[s.topic] = _Last(sid, asked is None, offset)
                offset += 1

    def _trim_after_add(self, adds: Sequence[Add], results: list[Any]) -> None:
        for add, result in zip(adds, results):
            if isinstance(result, StreamId) and (add.maxlen is not None or add.minid is not None):
                self.trim(add.stream, maxlen=add.maxlen, minid=add.minid)

    def trim(self, stream: str, *, maxlen: int | None = None, minid: StreamId | None = None) -> int:
        """Remove the oldest entries beyond `maxlen`, or with ids below `minid`."""
        if not self.check(stream):
            return 0
        if maxlen is not None:
            last = self._last(stream).offset
            before = last - maxlen + 1
        elif minid is not None:
            before = self.lower_bound(stream, minid)
        else:
            raise InvalidRequest("trim needs maxlen or minid")
        return self.store.trim(stream, 0, before) if before > 1 else 0

    # reading ---------------------------------------------------------------

    def range(
        self, stream: str, start: StreamId, end: StreamId, count: int | None = None, reverse: bool = False
    ) -> list[Entry]:
        """Entries with start <= id <= end, oldest first (newest first if reverse)."""
        if not self.check(stream) or start > end or count == 0:
            return []
        out: list[Entry] = []
        want = count if count is not None else 1 << 62
        if not reverse:
            after = self.lower_bound(stream, start) - 1
            while len(out) < want:
                rows = self.store.read(stream, 0, after, min(CHUNK, want - len(out)))
                for row in rows:
                    entry = make_entry(row)
                    if entry.id > end:
                        return out
                    out.append(entry)
                if len(rows) < CHUNK:
                    break
                after = rows[-1][0]
        else:
            before = (
                self.lower_bound(stream, end.next() if end < MAX_ID else end)
                if end < MAX_ID
                else OFFSET_LIMIT
            )
            while len(out) < want:
                rows = self.store.read_before(stream, 0, before, min(CHUNK, want - len(out)))
                for row in rows:
                    entry = make_entry(row)
                    if entry.id < start:
                        return out
                    out.append(entry)
                if len(rows) < CHUNK:
                    break
                before = rows[-1][0]
        return out

    def read_after(self, stream: str, after: int, count: int | None) -> list[Entry]:
        """Entries past an offset (XREAD), at most `count`."""
        if not self.check(stream):
            return []
        rows = self.store.read(stream, 0, after, min(count or CHUNK * 10, CHUNK * 10))
        return [make_entry(r) for r in rows]

    def offset_after(self, stream: str, sid: StreamId) -> int:
        """The offset XREAD continues after, for `sid` (entries with id > sid follow it)."""
        if not self.check(stream):
            return 0
        if sid >= MAX_ID:
            return self._last(stream).offset
        return self.lower_bound(stream, sid.next()) - 1

    # consumer groups -------------------------------------------------------

    def _group(self, stream: str, group: str) -> None:
        check_name("group", group)
        if not self.check(stream):
            raise UnknownGroup(f"stream {stream!r} does not exist")

    def cursor_for(self, stream: str, sid: StreamId | None) -> int:
        """The cursor (last offset delivered) for a group id: None is `$`."""
        if sid is None:
            return self._last(stream).offset
        if sid == ZERO:
            return 0
        return self.offset_after(stream, sid)

    def create_group(self, stream: str, group: str, sid: StreamId | None, mkstream: bool = False) -> None:
        """XGROUP CREATE: sid None means `$` (only entries added from now on)."""
        check_name("group", group)
        if not self.check(stream):
            if not mkstream:
                raise UnknownTopic(f"stream {stream!r} does not exist")
            self.log.create_topic(stream, 1)
        cursor = self.cursor_for(stream, sid)
        # The queue settings a `Log.queue` handle on this group would take.
        config = {"kind": "redis", "max_deliveries": DEFAULT_MAX_DELIVERIES, "dead_letter": f"{stream}.dlq"}
        if not self.store.queue_create(group, stream, config, [cursor], self.log.clock()):
            raise GroupExists("Consumer Group name already exists")

    def set_group_id(self, stream: str, group: str, sid: StreamId | None) -> None:
        self._group(stream, group)
        self.store.queue_set_cursor(group, stream, 0, self.cursor_for(stream, sid))

    def destroy_group(self, stream: str, group: str) -> bool:
        check_name("group", group)
        if not self.check(stream):
            return False
        return self.store.queue_delete(group, stream)

    def create_consumer(self, stream: str, group: str, consumer: str) -> bool:
        self._group(stream, group)
        return self.store.queue_add_consumer(group, stream, check_consumer(consumer), self.log.clock())

    def delete_consumer(self, stream: str, group: str, consumer: str) -> int:
        self._group(stream, group)
        return self.store.queue_delete_consumer(group, stream, check_consumer(consumer))

    def read_group(
        self, stream: str, group: str, consumer: str, count: int | None, noack: bool
    ) -> list[Entry]:
        """XREADGROUP `>`: entries never delivered to the group, now pending on `consumer`."""
        self._group(stream, group)
        rows = self.store.queue_take(
            group,
            stream,
            0,
            check_consumer(consumer),
            min(count or CHUNK * 10, CHUNK * 10),
            self.log.clock(),
            None if noack else NEVER,
        )
        return [make_entry(r) for r in rows]

    def read_history(
        self, stream: str, group: str, consumer: str, after: StreamId, count: int | None
    ) -> list[Entry]:
        """XREADGROUP with an id: the consumer's pending entries with id > after."""
        self._group(stream, group)
        first = 0 if after == ZERO else self.offset_after(stream, after) + 1
        pending = self.store.queue_pending(
            group, stream, 0, first=first, consumer=check_consumer(consumer), limit=count or CHUNK * 10
        )
        return self._entries(stream, [p.offset for p in pending])

    def _entries(self, stream: str, offsets: Sequence[int]) -> list[Entry]:
        out = []
        for offset in offsets:
            row = self._row_at(stream, offset)
            if row is not None:
                out.append(make_entry(row))
        return out

    def ack(self, stream: str, group: str, ids: Sequence[StreamId]) -> int:
        """XACK: finish the pending entries with these ids; returns how many were pending.

        A derived id names its offset and its record's timestamp: the store
        confirms both, and that the record holds no stored id, as it acks,
        in one transaction (an XACK of what XREADGROUP delivered). The ids
        it cannot confirm so (stored ids, ids of no entry) are looked up
        one by one, as `offsets_of` does, and acked after."""
        self._group(stream, group)
        named = [(sid.seq, sid.ms) for sid in ids if 1 <= sid.seq < OFFSET_LIMIT]
        acked, unmatched = (
            self.store.queue_ack_stamped(group, stream, 0, named, _ID_PREFIX) if named else (0, [])
        )
        rest = [sid for sid in ids if not 1 <= sid.seq < OFFSET_LIMIT] + [
            StreamId(ms, seq) for seq, ms in unmatched
        ]
        if rest:
            offsets = self.offsets_of(stream, rest)
            if offsets:
                acked += self.store.queue_ack_offsets(group, stream, 0, offsets)
        return acked

    def offsets_of(self, stream: str, ids: Sequence[StreamId]) -> list[int]:
        """The offsets of the entries with exactly these ids (those that exist).

        Derived ids name their offsets: when they lie close together (an
        XACK of what one XREADGROUP delivered), one read of their span
        confirms them all, not one read an id."""
        named = sorted({sid.seq for sid in ids if 1 <= sid.seq < OFFSET_LIMIT})
        rows: dict[int, Row] = {}
        if len(named) > 1 and named[-1] - named[0] < 4 * len(named):
            rows = {row[0]: row for row in self.store.read(stream, 0, named[0] - 1, named[-1] - named[0] + 1)}
        out = []
        for sid in ids:
            row = rows.get(sid.seq)
            if row is not None and entry_id(row) == sid:
                out.append(sid.seq)
                continue
            offset = self.offset_of(stream, sid)
            if offset is not None:
                out.append(offset)
        return out

    def pending_summary(
        self, stream: str, group: str
    ) -> tuple[int, StreamId | None, StreamId | None, list[tuple[str | None, int]]]:
        self._group(stream, group)
        s = self.store.queue_pending_summary(group, stream, 0)
        if not s.leases or s.first is None or s.last is None:
            return 0, None, None, []
        return s.leases, self.id_at(stream, s.first), self.id_at(stream, s.last), s.consumers

    def pending(
        self,
        stream: str,
        group: str,
        start: StreamId,
        end: StreamId,
        count: int,
        consumer: str | None = None,
        min_idle_ms: int = 0,
    ) -> list[tuple[StreamId, str, int, int]]:
        """(id, consumer, idle ms, delivery count) of pending entries, by id."""
        self._group(stream, group)
        if start > end or count <= 0:
            return []
        now = self.log.clock()
        first = self.lower_bound(stream, start)
        last = self.lower_bound(stream, end.next()) - 1 if end < MAX_ID else OFFSET_LIMIT - 1
        rows = self.store.queue_pending(
            group,
            stream,
            0,
            first=first,
            last=last,
            consumer=None if consumer is None else check_consumer(consumer),
            delivered_before=now - min_idle_ms if min_idle_ms else None,
            limit=count,
        )
        return [
            (self.id_at(stream, p.offset), p.consumer or "", max(0, now - p.delivered), p.delivery_count)
            for p in rows
        ]

    def claim(
        self,
        stream: str,
        group: str,
        consumer: str,
        min_idle_ms: int,
        ids: Sequence[StreamId],
        *,
        idle_ms: int | None = None,
        time_ms: int | None = None,
        retrycount: int | None = None,
        force: bool = False,
        justid: bool = False,
    ) -> list[Entry] | list[StreamId]:
        """XCLAIM: move entries idle at least `min_idle_ms` to `consumer`."""
        self._group(stream, group)
        now = self.log.clock()
        offsets = [o for o in (self.offset_of(stream, sid) for sid in ids) if o is not None]
        delivered = time_ms if time_ms is not None else now - (idle_ms or 0)
        if not 0 <= delivered <= now:
            delivered = now  # as Redis takes a TIME in the future or an IDLE before the epoch
        claimed = self.store.queue_claim(
            group,
            stream,
            0,
            offsets,
            check_consumer(consumer),
            now,
            delivered_before=now - min_idle_ms,
            delivered=delivered,
            deadline=NEVER,
            deliveries=retrycount,
            count_delivery=not justid,
            force=force,
        )
        if justid:
            return [self.id_at(stream, o) for o in claimed]
        return self._entries(stream, claimed)

    def autoclaim(
        self,
        stream: str,
        group: str,
        consumer: str,
        min_idle_ms: int,
        start: StreamId,
        count: int = 100,
        justid: bool = False,
    ) -> tuple[StreamId, list[Entry] | list[StreamId]]:
        """XAUTOCLAIM: claim up to `count` entries idle long enough, from `start`;
        returns the id to continue from (0-0 when the scan is complete)."""
        self._group(stream, group)
        now = self.log.clock()
        rows = self.store.queue_pending(
            group,
            stream,
            0,
            first=self.lower_bound(stream, start),
            delivered_before=now - min_idle_ms,
            limit=count + 1,
        )
        following = self.id_at(stream, rows[count].offset) if len(rows) > count else ZERO
        claimed = self.store.queue_claim(
            group,
            stream,
            0,
            [p.offset for p in rows[:count]],
            check_consumer(consumer),
            now,
            delivered_before=now - min_idle_ms,
            delivered=now,
            deadline=NEVER,
            count_delivery=not justid,
        )
        if justid:
            return following, [self.id_at(stream, o) for o in claimed]
        return following, self._entries(stream, claimed)

    # introspection ---------------------------------------------------------

    def info(self, stream: str) -> dict[str, Any]:
        self.check(stream, must_exist=True)
        part = self.store.partitions(stream)[0]
        first, last = self._first_row(stream), self._last_row(stream)
        return {
            "length": part.records,
            "last-generated-id": self._last(stream).id,
            "entries-added": part.last_offset,
            "recorded-first-entry-id": entry_id(first) if first else ZERO,
            "groups": len(self.store.queue_list(stream)),
            "first-entry": make_entry(first) if first else None,
            "last-entry": make_entry(last) if last else None,
        }

    def groups(self, stream: str) -> list[dict[str, Any]]:
        self.check(stream, must_exist=True)
        last_offset = self._last(stream).offset
        out = []
        for group in self.store.queue_list(stream):
            cursor = self.store.queue_cursor(group, stream, 0)
            summary = self.store.queue_pending_summary(group, stream, 0)
            out.append(
                {
                    "name": group,
                    "consumers": len(self.store.queue_consumers(group, stream)),
                    "pending": summary.leases,
                    "last-delivered-id": self.id_at(stream, cursor) if cursor else ZERO,
                    "entries-read": cursor,
                    "lag": max(0, last_offset - cursor),
                }
            )
        return out

    def consumers(self, stream: str, group: str) -> list[ConsumerInfo]:
        self._group(stream, group)
        return self.store.queue_consumers(group, stream)


def check_consumer(name: Any) -> str:
    """Consumer names are values, not identifiers: any text of 1 to 200 characters."""
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise InvalidRequest(f"invalid consumer name {name!r}: use 1 to 200 characters")
    return name
