"""The Kafka listener's own encodings, without a server: record batches as a
Produce request brings them, decoded straight into tidelog's stored form
(batches.py: the same values and metas as the core's own encoding makes of
the same records, the runs of one timestamp where they change, bad bytes
refused), responses written once a shape and patched (wire.py: the same
bytes as kio writes), and the batches as sent that a SQLite store keeps
beside their records and hands back only while those are all there."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

import tidelog
from tidelog.errors import InvalidValue
from tidelog.records import Prepared, decode_headers, decode_meta, encode_headers, encode_meta, encode_value
from tidelog.server.kafka import produce, wire
from tidelog.server.kafka.batches import CorruptBatch, RowBatch, read_batches, write_batch
from tidelog.server.kafka.wire import APIS, Request, respond, respond_numbers
from tidelog.store.base import KeepsWireBatches, WireBatch

BASE_TS = 1_700_000_000_000

# Lengths on both sides of the inline varint reads (1 byte below 64, 2 below
# 8192) and of the looked-up key metas (below 256).
sizes = st.sampled_from([0, 1, 63, 64, 200, 255, 256, 300, 8191, 8192, 9000])
payloads = st.one_of(st.none(), sizes.map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)))
names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8).filter(
    lambda s: not s.startswith("tidelog-")
)
# A header's value may be null (Kafka's), kept so (`encode_headers(nulls=True)`).
headers = st.lists(st.tuples(names, st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
# Timestamp deltas that repeat (runs), grow past one varint byte, and go back.
deltas = st.sampled_from([0, 0, 0, 1, 2, 70, 10_000, -5])
records = st.lists(st.tuples(payloads, payloads, headers, deltas), min_size=1, max_size=40)


def expected(rows):
    values = [encode_value(value)[0] for _, value, _, _ in rows]
    metas = [encode_meta(None, key, encode_headers(h, nulls=True), None) for key, _, h, _ in rows]
    runs = []
    for i, (_, _, _, delta) in enumerate(rows):
        if not runs or runs[-1][1] != BASE_TS + delta:
            runs.append((i, BASE_TS + delta))
    return values, (metas if any(m is not None for m in metas) else None), runs, True


@settings(max_examples=150, deadline=None)
@given(records)
def test_a_batch_decodes_to_what_the_core_encodes(rows):
    data = write_batch([(i, BASE_TS + delta, key, value, h) for i, (key, value, h, delta) in enumerate(rows)])
    (batch,) = read_batches(data, 1 << 20)
    assert tuple(batch.records) == expected(rows)


@settings(max_examples=150, deadline=None)
@given(records)
def test_a_batch_read_and_fetched_again_is_the_same_bytes(rows):
    # A header's null value came back empty: Kafka's consumers read b"" for None.
    data = write_batch([(i, BASE_TS + delta, key, value, h) for i, (key, value, h, delta) in enumerate(rows)])
    (batch,) = read_batches(data, 1 << 20)
    values, metas = batch.records.values, batch.records.metas or [None] * len(rows)
    stored = [(i + 1, BASE_TS + delta, values[i], metas[i]) for i, (_, _, _, delta) in enumerate(rows)]
    fetched = RowBatch(decode_meta)
    assert fetched.add(stored, 1 << 30, True) == len(rows)
    assert bytes(fetched.finish()) == data


def test_headers_written_before_null_values_read_as_they_did():
    pairs = [("a", b""), ("b", b"x" * 300), ("a", b"\xff\xff\xff\xff")]
    assert encode_headers(pairs, nulls=True) == encode_headers(pairs)
    blob = encode_headers([("a", None), ("b", b"x"), ("c", None)], nulls=True)
    assert decode_headers(blob) == [("a", b""), ("b", b"x"), ("c", b"")]  # tidelog's API: (str, bytes)
    with pytest.raises(InvalidValue, match="must be str or bytes"):
        encode_headers([("a", None)])  # only the Kafka listener writes null values


def test_two_batches_of_one_request_and_a_tombstone():
    data = write_batch([(0, BASE_TS, b"k", b"v", [])]) + write_batch([(1, BASE_TS, b"gone", None, [])])
    first, second = read_batches(data, 1 << 20)
    assert first.records.values == [b"v"] and second.records.values == ["null"]  # JSON null
    assert second.records.metas == [encode_meta(None, b"gone", None, None)]


def test_records_cut_short_or_padded_are_corrupt():
    whole = write_batch([(0, BASE_TS, b"key", b"value", [("h", b"1")])])
    body = whole[61:]
    # Length, attributes, timestamp delta, offset delta, then the key's length (byte 4).
    long_key = body[:4] + b"\x7e" + body[5:]
    for bad in (body[:-1], body + b"\0", long_key, body[:4] + b"\x03" + body[5:]):
        # A batch whose CRC is right for the bad records: only their layout is wrong.
        with pytest.raises(CorruptBatch):
            read_batches(rebatch(whole, bad), 1 << 20)


def test_a_queue_header_out_of_range_is_refused_as_any_front_refuses_it():
    data = write_batch([(0, BASE_TS, None, b"v", [("tidelog-priority", b"not a number")])])
    with pytest.raises(InvalidValue):
        read_batches(data, 1 << 20)


def rebatch(whole: bytes, body: bytes) -> bytes:
    """`whole`'s header over other record bytes, its length and CRC made right."""
    head = bytearray(whole[:61])
    struct.pack_into(">i", head, 8, 61 - 12 + len(body))
    payload = bytes(head[21:]) + body
    struct.pack_into(">I", head, 17, crc32c(payload))
    return bytes(head) + body


@pytest.mark.parametrize("version", range(APIS[0][1], APIS[0][2] + 1))
@pytest.mark.parametrize("order", [[("a", 0)], [("a", 0), ("a", 2), ("b.x-y_z", 1)]])
def test_a_produce_answer_patched_is_the_answer_kio_writes(version, order):
    answers = [produce._answer(index, 0, -1, None) for _, index in order]
    for correlation_id, first in ((7, 0), (8, 1 << 40), (-1, 123)):
        offsets = [first + 1000 * i for i in range(len(order))]
        request = Request(0, version, correlation_id, "client", None)
        make = lambda numbers: produce._response(order, answers, numbers)  # noqa: E731
        assert respond_numbers(request, tuple(order), make, offsets) == respond(request, make(offsets))
    assert wire._SHAPES[(0, version, tuple(order))] is not None  # patched, not written by kio each time


def test_kept_wire_batches_are_handed_back_while_their_records_are_all_there(tmp_path):
    with tidelog.open(str(tmp_path / "wire.db")) as log:
        store = log.store
        assert isinstance(store, KeepsWireBatches)
        log.create_topic("t", 1)
        a, b = WireBatch(5, b"A" * 5, 50), WireBatch(4, b"B" * 4, 40)  # sizes uncompressed: 50 and 40
        log.write([Prepared("t", 0, [b"p"] * 3, None)])  # 1..3: no batch kept
        # 4..8: a client's batch written as two runs of one timestamp, kept on the last.
        log.write([Prepared("t", 0, [b"a"] * 2, None, 1), Prepared("t", 0, [b"a"] * 3, None, 2, a)])
        log.write([Prepared("t", 0, [b"b"] * 4, None, 3, b)])  # 9..12
        both = [(4, 8, a.data, a.size), (9, 12, b.data, b.size)]
        assert store.wire_batches("t", 0, 3, 12, 1 << 20) == both
        assert store.wire_batches("t", 0, 5, 12, 1 << 20) == both  # from within the first
        assert store.wire_batches("t", 0, 8, 12, 1 << 20) == both[1:]
        assert store.wire_batches("t", 0, 2, 12, 1 << 20) == []  # offset 3 is in none
        assert store.wire_batches("t", 0, 3, 11, 1 << 20) == both[:1]  # past the high mark
        assert store.wire_batches("t", 0, 3, 12, 90) == both
        assert store.wire_batches("t", 0, 3, 12, 89) == both[:1]  # past the byte limit, by size
        assert store.wire_batches("t", 0, 3, 12, 1) == both[:1]  # the first whatever its size
        store.delete_offsets("t", 0, [6])  # compaction took a record of the first
        assert store.wire_batches("t", 0, 3, 12, 1 << 20) == []
        assert store.wire_batches("t", 0, 8, 12, 1 << 20) == both[1:]
        log.delete_before("t", 0, 11)  # retention took the start of the second
        assert store.wire_batches("t", 0, 10, 12, 1 << 20) == []
