"""Kafka record batches (magic 2) in and out, with their codecs.

kio reads a request's fields; a Produce request's records field is raw bytes,
and kio's own batch reader and writer do not fit a broker: the reader drops
the milliseconds of each record's timestamp (it keeps whole seconds) and
neither decompresses, and the writer builds a datetime and a buffer a record.
So the batch layout is walked here with kio's native varint readers, the
CRC32C is the crc32c package's, and the codecs are zlib (gzip) and cramjam
(snappy, lz4, zstd): nothing of the format is guessed, every length is
checked against the bytes that hold it.

Layout (Kafka's "message format", v2): base offset i64, batch length i32,
leader epoch i32, magic i8, crc u32 (CRC32C of what follows), attributes i16,
last offset delta i32, base timestamp i64, max timestamp i64, producer id
i64, producer epoch i16, base sequence i32, record count i32, records. A
record: length varint, attributes i8, timestamp delta varlong, offset delta
varint, key (varint length, -1 for null), value (the same), header count
varint, each header a key and a value as above.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

from crc32c import crc32c
from kio.serial.readers import read_signed_varint, read_signed_varlong

from ...errors import InvalidValue, TidelogError
from ...records import NULL_VALUE, encode_headers, encode_meta, encode_value, key_meta_prefix
from ...store.base import Row

_HEAD = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count: 61 bytes
HEAD_SIZE = _HEAD.size
_CRC_FROM = 21  # the CRC covers the batch from the attributes on
_LENGTH_FROM = 12  # the batch length counts the bytes after it
_CRC = struct.Struct(">I")
_CRC_AT = 17

CODEC = 0x07  # the attributes' bits that name the codec
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
TRANSACTIONAL = 0x10
CONTROL = 0x20
LOG_APPEND_TIME = 0x08
XERIAL = b"\x82SNAPPY\x00"
_LZ4_FLG = 4  # an LZ4 frame's flags, after its magic number
_LZ4_INDEPENDENT = 0x20  # the flag of a frame whose blocks are independent


class CorruptBatch(ValueError):
    """Bytes that are not a well-formed record batch (Kafka's CORRUPT_MESSAGE)."""


class UnsupportedCodec(ValueError):
    """A compression codec this listener cannot read (UNSUPPORTED_COMPRESSION_TYPE)."""


class LinkedLz4Blocks(ValueError):
    """An LZ4 frame whose blocks refer back to the one before: readable, but not by
    Kafka's broker nor its Java clients, which take frames of independent blocks."""


class Records(NamedTuple):
    """A batch's records in tidelog's stored form, a column each: what
    `Producer.prepare_stored` takes, made in one pass over the bytes."""

    values: list[bytes | str]  # a null value (a tombstone) as JSON null, as encode_value(None) makes it
    metas: list[bytes | None] | None  # key and headers (records.encode_meta); None when no record has one
    runs: list[tuple[int, int]]  # (first index, timestamp) of each run of records that share a timestamp
    # Whether the records read back are these bytes again (not so for a
    # header with a null name, which tidelog keeps as empty text).
    exact: bool


class Batch(NamedTuple):
    """One record batch of a Produce request, its records decoded."""

    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: Records
    data: memoryview  # the batch's bytes, as the client sent them
    size: int  # the batch's size uncompressed: its header and records


def read_batches(data: bytes, max_bytes: int) -> list[Batch]:
    """Every batch in a Produce request's records field.

    CorruptBatch for anything malformed (a bad CRC, a length that does not
    add up, an old message format), UnsupportedCodec for an unknown codec;
    a batch that decompresses past `max_bytes` is refused as corrupt;
    InvalidValue for a header tidelog cannot keep.
    """
    view = memoryview(data)
    batches = []
    at = 0
    while at < len(view):
        if len(view) - at < HEAD_SIZE:
            raise CorruptBatch(f"{len(view) - at} bytes left, too few for a record batch header")
        (_, length, _, magic, crc, attributes, _, base_ts, max_ts, pid, epoch, base_seq, count) = (
            _HEAD.unpack_from(view, at)
        )
        if magic != 2:
            raise CorruptBatch(f"message format v{magic} is not served: send record batches (v2)")
        end = at + _LENGTH_FROM + length
        if length < HEAD_SIZE - _LENGTH_FROM or end > len(view):
            raise CorruptBatch(f"a batch length of {length} does not fit the {len(view) - at} bytes left")
        if crc32c(view[at + _CRC_FROM : end]) != crc:
            raise CorruptBatch("record batch CRC mismatch")
        if count < 0:
            raise CorruptBatch(f"a batch of {count} records")
        codec = attributes & CODEC
        if codec == NONE:
            body = bytes(view[at + HEAD_SIZE : end])
        else:
            body = decompress(codec, view[at + HEAD_SIZE : end], max_bytes)
        records = _read_records(body, count, base_ts)
        size = HEAD_SIZE + len(body)
        batches.append(Batch(attributes, base_ts, max_ts, pid, epoch, base_seq, records, view[at:end], size))
        at = end
    return batches


def decompress(codec: int, body: memoryview, max_bytes: int) -> bytes:
    try:
        if codec == GZIP:
            inflate = zlib.decompressobj(wbits=47)  # gzip or zlib, told apart by the header
            out = inflate.decompress(body, max_bytes + 1)
        elif codec == SNAPPY:
            out = _unsnappy(bytes(body), max_bytes)
        elif codec == LZ4:
            import cramjam

            if len(body) > _LZ4_FLG and not body[_LZ4_FLG] & _LZ4_INDEPENDENT:
                raise LinkedLz4Blocks(
                    "an LZ4 frame of linked blocks: Kafka's clients read independent blocks"
                )
            out = _inflate_into(cramjam.lz4, body, max_bytes)
        elif codec == ZSTD:
            import cramjam

            out = _inflate_into(cramjam.zstd, body, max_bytes)
        else:
            raise UnsupportedCodec(f"compression codec {codec} is not one of gzip, snappy, lz4, zstd")
    except (UnsupportedCodec, CorruptBatch, LinkedLz4Blocks):
        raise
    except Exception as e:  # zlib.error, cramjam's DecompressionError
        raise CorruptBatch(f"{CODECS[codec]} data does not decompress: {e}") from None
    if len(out) > max_bytes:
        raise CorruptBatch(f"a batch decompresses past {max_bytes} bytes")
    return out


# The first output buffer an lz4 or zstd batch is inflated into, in compressed bytes:
# JSON events compress 2-10 times; a batch that inflates more is tried again in a larger one.
FIRST_RATIO = 8


def _inflate_into(codec: Any, body: memoryview, max_bytes: int) -> bytes:
    """Inflate into buffers that grow eightfold up to `max_bytes` + 1, never past: a
    32 KiB zstd batch that inflates to 1 GiB once took 2 GB before it was refused.
    cramjam stops at the buffer's end ("failed to write whole buffer")."""
    size = min(max_bytes + 1, max(1 << 16, len(body) * FIRST_RATIO))
    while True:
        out = bytearray(size)
        try:
            written = codec.decompress_into(body, out)
        except Exception as e:
            if "whole buffer" not in str(e):
                raise
            if size > max_bytes:
                raise CorruptBatch(f"a batch decompresses past {max_bytes} bytes") from None
            size = min(max_bytes + 1, size * FIRST_RATIO)
            continue
        return bytes(memoryview(out)[:written])


def _unsnappy(data: bytes, max_bytes: int) -> bytes:
    """Raw snappy (librdkafka) or the xerial framing Java clients write:
    a magic header, then blocks of a u32 length and raw snappy."""
    import cramjam

    if not data.startswith(XERIAL):
        if cramjam.snappy.decompress_raw_len(data) > max_bytes:
            raise CorruptBatch(f"a batch decompresses past {max_bytes} bytes")
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    at = 16  # magic (8), version (4), compatible version (4)
    while at < len(data):
        if at + 4 > len(data):
            raise CorruptBatch("a xerial snappy block length runs past the data")
        (n,) = struct.unpack_from(">I", data, at)
        block = data[at + 4 : at + 4 + n]
        if len(block) != n:
            raise CorruptBatch("a xerial snappy block runs past the data")
        if len(out) + cramjam.snappy.decompress_raw_len(block) > max_bytes:
            raise CorruptBatch(f"a batch decompresses past {max_bytes} bytes")
        out += cramjam.snappy.decompress_raw(block)
        at += 4 + n
    return bytes(out)


_ZIGZAG = [(b >> 1) ^ -(b & 1) for b in range(0x80)]  # a one-byte varint's value, by the byte
TOMBSTONE = encode_value(None)[0]  # how a null value is stored: JSON null
# The meta of a record with a key and no headers is a prefix (by the key's
# length) and the key: looked up for the usual key lengths.
_KEY_META = [key_meta_prefix(n) for n in range(256)]


def _read_records(body: bytes, count: int, base_ts: int) -> Records:
    """A batch's records, straight into tidelog's stored form.

    Python's cost here is per bytecode, and a produce runs this loop for
    every record, so it is written out: a varint of one byte (most lengths
    and deltas) or two (a value of 64 to 8191 bytes) is read inline, longer
    ones by kio's native reader; a record's key becomes its meta by one
    concatenation; no object is made a record but its value and its meta.
    A key or value cut short by its record's end shows as fields that do
    not add up to the record's length.
    """
    values: list[bytes | str] = []
    metas: list[bytes | None] = []
    runs: list[tuple[int, int]] = []
    add_value = values.append
    add_meta = metas.append
    key_meta = _KEY_META
    varint = read_signed_varint
    zigzag = _ZIGZAG
    run_ts = None
    keyed = False
    exact = True
    at = 0
    try:
        for i in range(count):
            b = body[at]
            if b < 0x80:
                length, at = zigzag[b], at + 1
            elif body[at + 1] < 0x80:
                z = (b & 0x7F) | (body[at + 1] << 7)
                length, at = (z >> 1) ^ -(z & 1), at + 2
            else:
                length, n = varint(body, at)
                at += n
            if length < 0:
                raise CorruptBatch(f"a record of {length} bytes")
            stop = at + length
            b = body[at + 1]  # after the record's attributes (unused)
            if b < 0x80:
                ts, at = base_ts + zigzag[b], at + 2
            else:
                delta, n = read_signed_varlong(body, at + 1)
                ts, at = base_ts + delta, at + 1 + n
            if ts != run_ts:
                runs.append((i, ts))
                run_ts = ts
            # The offset delta: offsets are ours to give.
            if body[at] < 0x80:
                at += 1
            elif body[at + 1] < 0x80:
                at += 2
            else:
                at += varint(body, at)[1]
            b = body[at]
            if b < 0x80:
                n, at = zigzag[b], at + 1
            else:
                n, size = varint(body, at)
                at += size
            key = None
            if n >= 0:
                key = body[at : at + n]
                at += n
            b = body[at]
            if b < 0x80:
                n, at = zigzag[b], at + 1
            elif body[at + 1] < 0x80:
                z = (b & 0x7F) | (body[at + 1] << 7)
                n, at = (z >> 1) ^ -(z & 1), at + 2
            else:
                n, size = varint(body, at)
                at += size
            if n >= 0:
                add_value(body[at : at + n])
                at += n
            else:
                add_value(TOMBSTONE)
            if body[at]:  # headers
                at, same = _headers(body, at, stop, key, add_meta)
                keyed = True
                exact = exact and same
            elif key is None:
                at += 1
                add_meta(None)
            else:
                at += 1
                add_meta((key_meta[n] if (n := len(key)) < 256 else key_meta_prefix(n)) + key)
                keyed = True
            if at != stop:
                raise CorruptBatch("a record's fields do not add up to its length")
    except (CorruptBatch, TidelogError):
        raise
    except Exception as e:  # an index or a varint past the end
        raise CorruptBatch(f"a record does not decode: {e}") from None
    if at != len(body):
        raise CorruptBatch(f"{len(body) - at} bytes follow the batch's {count} records")
    return Records(values, metas if keyed else None, runs, exact)


def _headers(
    body: bytes, at: int, stop: int, key: bytes | None, add_meta: Callable[[bytes | None], None]
) -> tuple[int, bool]:
    """A record's headers (from its header count at `at`) into its meta, as
    any front's would be (`encode_headers`: a queue's own headers checked);
    a null value is kept null, a null name as empty text. Returns where the
    record's fields end, and whether no name was null."""
    count, n = read_signed_varint(body, at)
    at += n
    if count < 0 or count > stop - at:
        raise CorruptBatch(f"a record announces {count} headers")
    pairs = []
    exact = True
    for _ in range(count):
        name, at = _bytes(body, at, stop)
        data, at = _bytes(body, at, stop)
        exact = exact and name is not None
        try:
            pairs.append(("" if name is None else name.decode(), data))
        except UnicodeDecodeError:
            raise InvalidValue("a header name is not UTF-8 text") from None
    add_meta(encode_meta(None, key, encode_headers(pairs, nulls=True), None))
    return at, exact


def _bytes(body: bytes, at: int, stop: int) -> tuple[bytes | None, int]:
    b = body[at]
    if b < 0x80:
        n, at = (b >> 1) ^ -(b & 1), at + 1
    else:
        n, size = read_signed_varint(body, at)
        at += size
    if n < 0:
        return None, at
    if at + n > stop:
        raise CorruptBatch("a key, value or header runs past its record")
    return body[at : at + n], at + n


# Writing ------------------------------------------------------------------------


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = [_zigzag(i) for i in range(1 << 13)]  # 0 .. 8191: one or two bytes, looked up
_NULL = _zigzag(-1)


def varint(n: int) -> bytes:
    """Kafka's zigzag varint (and varlong) of `n`."""
    return _SMALL[n] if 0 <= n < 8192 else _zigzag(n)


def _field(data: bytes | None) -> bytes:
    return _NULL if data is None else varint(len(data)) + data


def write_batch(records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]) -> bytes:
    """One uncompressed batch of `records` (Kafka offset, timestamp, key,
    value, headers), in offset order; offsets may have gaps (compaction)."""
    base_offset, base_ts = records[0][0], records[0][1]
    max_ts = base_ts
    parts: list[bytes] = []
    append = parts.append
    for offset, ts, key, value, headers in records:
        if ts > max_ts:
            max_ts = ts
        delta = offset - base_offset
        body = b"".join(
            (
                b"\0",
                varint(ts - base_ts) if ts >= base_ts else _zigzag(ts - base_ts),
                _SMALL[delta] if delta < 8192 else _zigzag(delta),
                _field(key),
                _field(value),
                varint(len(headers)),
                *(_field(name.encode()) + _field(data) for name, data in headers),
            )
        )
        append(varint(len(body)))
        append(body)
    last_delta = records[-1][0] - base_offset
    tail = struct.pack(">hiqqqhii", 0, last_delta, base_ts, max_ts, -1, -1, -1, len(records))
    payload = tail + b"".join(parts)
    head = struct.pack(">qiibI", base_offset, len(payload) + 9, 0, 2, crc32c(payload))
    return head + payload


def _headers_field(blob: bytes) -> bytes:
    """tidelog's headers blob (u16 name length, name, u32 value length, value;
    records.encode_headers) as a Kafka record's header count and headers, a
    value's length of NULL_VALUE as Kafka's null value."""
    out = []
    at, end = 0, len(blob)
    while at < end:
        (n,) = struct.unpack_from(">H", blob, at)
        name = blob[at + 2 : at + 2 + n]
        at += 2 + n
        (m,) = struct.unpack_from(">I", blob, at)
        if m == NULL_VALUE:
            out.append(varint(n) + name + _NULL)
            at += 4
            continue
        out.append(varint(n) + name + varint(m) + blob[at + 4 : at + 4 + m])
        at += 4 + m
    return varint(len(out)) + b"".join(out)


class RowBatch:
    """One uncompressed batch of tidelog rows (offset, timestamp, stored
    value, meta), filled a store chunk at a time up to a byte budget.

    The record at tidelog offset n goes out at Kafka offset n - 1.
    `decode_meta` is the core's (records.decode_meta): a str value is text
    or JSON, sent as its UTF-8 text, and JSON null is a tombstone. `size` is
    the batch's exact size on the wire, what a fetch's byte limits count.
    """

    def __init__(self, decode_meta: Callable[[bytes], tuple[int | None, bytes | None, bytes | None, Any]]):
        self.decode_meta = decode_meta
        self.parts: list[bytes] = [bytes(HEAD_SIZE)]  # the header's place, written by `finish`
        self.size = HEAD_SIZE
        self.count = 0
        self.base_offset = self.base_ts = self.max_ts = self.last_offset = 0
        # A key and its headers, framed, by meta blob: records of a key share one.
        self.framed: dict[bytes, tuple[bytes, bytes, int | None]] = {}

    def add(self, rows: list[Row], budget: int, first: bool) -> int:
        """Take `rows` while the batch stays within `budget` bytes (the first
        record of the batch whatever its size when `first`: KIP-74); returns
        how many were taken."""
        if not rows:
            return 0
        if not self.count:
            self.base_offset, self.base_ts = rows[0][0], rows[0][1]
            self.max_ts = self.base_ts
        base_offset, base_ts, max_ts = self.base_offset, self.base_ts, self.max_ts
        small = _SMALL
        framed = self.framed
        append = self.parts.append
        size = self.size
        taken = 0
        for offset, ts, value, meta in rows:
            if meta is None:
                key_field = _NULL
                headers_field = b"\0"
                fmt = None
            else:
                known = framed.get(meta)
                if known is None:
                    fmt, key, blob, _ = self.decode_meta(meta)
                    known = framed[meta] = (
                        _NULL if key is None else varint(len(key)) + key,
                        b"\0" if blob is None else _headers_field(blob),
                        fmt,
                    )
                key_field, headers_field, fmt = known
            if type(value) is bytes:
                n = len(value)
                length = small[n] if n < 8192 else _zigzag(n)
            elif fmt is None and value == "null":  # JSON null: a tombstone
                length, value = _NULL, b""
            else:
                value = value.encode()  # type: ignore[union-attr]
                length = varint(len(value))
            dts = ts - base_ts
            delta = offset - base_offset
            # One C call builds the record (bytes % bytes): concatenating
            # its parts would make an object for each on the way.
            body = b"\0%b%b%b%b%b%b" % (
                small[dts] if 0 <= dts < 8192 else _zigzag(dts),
                small[delta] if delta < 8192 else _zigzag(delta),
                key_field,
                length,
                value,
                headers_field,
            )
            n = len(body)
            framing = small[n] if n < 8192 else _zigzag(n)
            size += len(framing) + n
            if size > budget and (taken or self.count or not first):
                size -= len(framing) + n
                break
            if ts > max_ts:
                max_ts = ts
            append(framing)
            append(body)
            taken += 1
        self.size, self.max_ts = size, max_ts
        if taken:
            self.count += taken
            self.last_offset = rows[taken - 1][0]
        return taken

    def finish(self) -> bytearray:
        """The batch's bytes (empty when no record was taken), joined once."""
        if not self.count:
            return bytearray()
        out = bytearray().join(self.parts)
        _HEAD.pack_into(
            out,
            0,
            self.base_offset - 1,
            len(out) - _LENGTH_FROM,
            0,
            2,
            0,  # the CRC, once the fields after it are in place
            0,
            self.last_offset - self.base_offset,
            self.base_ts,
            self.max_ts,
            -1,
            -1,
            -1,
            self.count,
        )
        _CRC.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_CRC_FROM:]))
        return out
