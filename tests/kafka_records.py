"""Kafka record batches (magic 2) for the differential suite, written and read here,
apart from the listener's own code (src/tidelog/server/kafka/batches.py): the bytes a
Produce request carries, and the records a client decodes from a Fetch's answer.

    data = batch([Record(b"v", key=b"k", headers=[("h", b"1")])], codec=GZIP)
    wire.call(0, 9, produce_request(topic, 0, data))
    records(fetched_bytes)   # [{"offset": 0, "timestamp": ..., "key": b"k", ...}]

The codecs are Kafka's framings: gzip, snappy in xerial's blocks (as Kafka's Java
producer writes it), LZ4 frames, zstd frames (cramjam, the listener's own dependency,
does the compression; the framing is written here, and LZ4's blocks are independent, as
Kafka's clients write them).
"""

from __future__ import annotations

import gzip
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import cramjam
from crc32c import crc32c

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
_HEAD = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count: 61 bytes
_XERIAL = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
# The suite's records are stamped near now: Kafka's retention (7 days by default)
# deletes older ones on its next check, every 5 minutes, whenever that falls.
NOW = int(time.time()) * 1000


@dataclass(frozen=True)
class Record:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = NOW  # ms; one stamp for the process, so both brokers keep the same one


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _bytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def _record(r: Record, delta: int, base_timestamp: int) -> bytes:
    body = bytearray(b"\0")  # attributes
    body += _varint(r.timestamp - base_timestamp) + _varint(delta)
    body += _bytes(r.key) + _bytes(r.value) + _varint(len(r.headers))
    for name, value in r.headers:
        body += _bytes(name.encode()) + _bytes(value)
    return _varint(len(body)) + bytes(body)


def compress(codec: int, data: bytes, linked: bool = False) -> bytes:
    if codec == GZIP:
        return gzip.compress(data)
    if codec == SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        return _XERIAL + struct.pack(">i", len(block)) + block
    if codec == LZ4:
        return lz4_frame(data, linked)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    return data


def lz4_frame(data: bytes, linked: bool = False) -> bytes:
    """An LZ4 frame of independent blocks, as Kafka's clients write it (`linked`: blocks
    that refer back to the one before, which Kafka's broker cannot read)."""
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=linked)
    compressor.compress(data)
    return bytes(compressor.finish())


def decompress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return gzip.decompress(data)
    if codec == SNAPPY:
        if not data.startswith(_XERIAL[:8]):
            return bytes(cramjam.snappy.decompress_raw(data))
        out, at = bytearray(), 16
        while at < len(data):
            (n,) = struct.unpack_from(">i", data, at)
            out += bytes(cramjam.snappy.decompress_raw(data[at + 4 : at + 4 + n]))
            at += 4 + n
        return bytes(out)
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    return data


def batch(
    records: list[Record],
    codec: int = NONE,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    corrupt_crc: bool = False,
    linked_lz4: bool = False,
) -> bytes:
    """One record batch of `records` (none: an empty batch, which Kafka refuses).
    `corrupt_crc` spoils its CRC; `linked_lz4` writes an LZ4 frame of linked blocks."""
    base_ts = records[0].timestamp if records else -1
    max_ts = max((r.timestamp for r in records), default=-1)
    body = b"".join(_record(r, i, base_ts) for i, r in enumerate(records))
    body = compress(codec, body, linked_lz4)
    attributes |= codec
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        max(len(records) - 1, 0),
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    tail += body
    crc = crc32c(tail) ^ (1 if corrupt_crc else 0)
    # base offset 0, the length of what follows it, leader epoch -1, magic 2, CRC
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), -1, 2, crc) + tail


def produce_request(
    topic: str, partition: int, data: bytes | None, acks: int = -1, timeout: int = 30_000
) -> dict[str, Any]:
    """A Produce request's values for kio (every version: the fields a version lacks are dropped)."""
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": timeout,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}],
    }


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = data[at]
        at += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), at
        shift += 7


def _read_bytes(data: bytes, at: int) -> tuple[bytes | None, int]:
    n, at = _read_varint(data, at)
    if n < 0:
        return None, at
    return bytes(data[at : at + n]), at + n


def batches(data: bytes | None) -> list[dict[str, Any]]:
    """The batches of a Fetch's records field as a client reads them: each batch's
    header fields and its records (offsets and timestamps made whole). A batch cut
    short at the end (a fetch's byte limit may cut one) is left out, as clients do."""
    out: list[dict[str, Any]] = []
    data = data or b""
    at = 0
    while at + _HEAD.size <= len(data):
        (base, length, _, magic, crc, attrs, last_delta, base_ts, max_ts, pid, epoch, seq, count) = (
            _HEAD.unpack_from(data, at)
        )
        end = at + 12 + length
        if end > len(data):
            break
        assert magic == 2, magic
        assert crc32c(data[at + 21 : end]) == crc, "a batch's CRC does not match"
        body = decompress(attrs & 0x07, data[at + _HEAD.size : end])
        items, pos = [], 0
        for _ in range(count):
            size, pos = _read_varint(body, pos)
            stop = pos + size
            pos += 1  # attributes
            ts_delta, pos = _read_varint(body, pos)
            offset_delta, pos = _read_varint(body, pos)
            key, pos = _read_bytes(body, pos)
            value, pos = _read_bytes(body, pos)
            n, pos = _read_varint(body, pos)
            headers = []
            for _ in range(n):
                name, pos = _read_bytes(body, pos)
                hv, pos = _read_bytes(body, pos)
                headers.append(((name or b"").decode(), hv))
            assert pos == stop, "a record's length does not match its fields"
            items.append(
                {
                    "offset": base + offset_delta,
                    "timestamp": max_ts if attrs & LOG_APPEND_TIME else base_ts + ts_delta,
                    "key": key,
                    "value": value,
                    "headers": headers,
                }
            )
        out.append(
            {
                "base_offset": base,
                "last_offset_delta": last_delta,
                "codec": attrs & 0x07,
                "log_append_time": bool(attrs & LOG_APPEND_TIME),
                "transactional": bool(attrs & TRANSACTIONAL),
                "control": bool(attrs & CONTROL),
                "producer_id": pid,
                "producer_epoch": epoch,
                "base_sequence": seq,
                "records": items,
            }
        )
        at = end
    return out


def records(data: bytes | None) -> list[dict[str, Any]]:
    """Every record of a Fetch's records field, in order, as a client hands them out."""
    return [r for b in batches(data) for r in b["records"]]
