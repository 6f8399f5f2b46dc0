"""The Kafka listener's bad inputs and limits, against a real `tidelog serve`:
each answered with Kafka's own error code or a closed connection, nothing
written (a dump of the store before and after), other clients served."""

from __future__ import annotations

import os
import random
import socket
import struct
import time

import pytest

import tidelog
from dumps import dump
from kafka_serve import KafkaServe
from kafka_wire import KafkaWire, encode_request
from pgschema import postgres_schema
from tidelog.records import NewRecord
from tidelog.server.kafka.batches import write_batch
from tidelog.server.kafka.handlers import HANDLERS
from tidelog.server.kafka.wire import APIS
from tidelog.store.base import KeepsWireBatches

ck = pytest.importorskip("confluent_kafka")

TOKEN = "kafka-s3cret"
WAIT_S = 15
UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE, OFFSET_OUT_OF_RANGE = 3, 2, 1
UNSUPPORTED_VERSION, SASL_AUTHENTICATION_FAILED, INVALID_REQUIRED_ACKS = 35, 58, 21
LZ4, ZSTD = 3, 4


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request, tmp_path_factory):
    """No auto-create, a 1 MiB request limit, on each store."""
    tmp = tmp_path_factory.mktemp(f"kafka-limits-{request.param}")
    args = ("--no-auto-create", "--max-request", "1MiB")
    if request.param == "sqlite":
        with KafkaServe(tmp / "k.db", *args) as server:
            yield server
    else:
        with postgres_schema() as url, KafkaServe(url, *args, log_dir=tmp) as server:
            yield server


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A token (SASL PLAIN), few connections, short timeouts."""
    tmp = tmp_path_factory.mktemp("kafka-guarded")
    args = ("--max-connections", "4", "--idle-timeout", "1", "--handshake-timeout", "1")
    # librdkafka retries a wrong password for as long as it runs (test_sasl_plain_with_the_token):
    # the login throttle (tests/test_auth_throttle.py) would then hold this module's right one back.
    args += ("--auth-free-failures", "100000")
    with KafkaServe(tmp / "k.db", *args, token=TOKEN) as server:
        yield server


def wire(served):
    return KafkaWire("127.0.0.1", served.kafka_port)


def batch(*values: bytes) -> bytes:
    return write_batch([(i, 1_700_000_000_000, None, v, []) for i, v in enumerate(values)])


def produce(topic: str, partition: int, records: bytes, acks: int = -1) -> dict:
    return {
        "acks": acks,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


def answered(served) -> bool:
    """A fresh client still gets an ApiVersions answer: the server serves others."""
    with wire(served) as w:
        return (
            w.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code.value == 0
        )


def test_every_served_api_has_a_handler():
    assert set(APIS) == set(HANDLERS)


def test_a_corrupt_batch_a_missing_topic_and_bad_acks_write_nothing(served):
    with tidelog.open(served.target) as log:
        log.create_topic("exists", 1)
    before = dump(served.target)
    good = batch(b"a", b"b")
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    with wire(served) as w:
        answer = w.call(0, 9, produce("exists", 0, bytes(corrupt)))
        assert answer.responses[0].partition_responses[0].error_code.value == CORRUPT_MESSAGE
        answer = w.call(0, 9, produce("exists", 0, good[:-3]))  # a batch cut short
        assert answer.responses[0].partition_responses[0].error_code.value == CORRUPT_MESSAGE
        answer = w.call(0, 9, produce("missing", 0, good))  # auto-create is off
        assert answer.responses[0].partition_responses[0].error_code.value == UNKNOWN_TOPIC_OR_PARTITION
        answer = w.call(0, 9, produce("exists", 7, good))  # no such partition
        assert answer.responses[0].partition_responses[0].error_code.value == UNKNOWN_TOPIC_OR_PARTITION
        answer = w.call(0, 9, produce("exists", 0, good, acks=2))
        assert answer.responses[0].partition_responses[0].error_code.value == INVALID_REQUIRED_ACKS
    assert dump(served.target) == before
    with wire(served) as w:  # the same batch, intact, is written
        answer = w.call(0, 9, produce("exists", 0, good))
        assert answer.responses[0].partition_responses[0].error_code.value == 0
        # A fetch past the end is out of range, its offsets -1 as Kafka answers (tests/kafka).
        fetched = w.call(
            1,
            12,
            {
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        "topic": "exists",
                        "partitions": [{"partition": 0, "fetch_offset": 9, "partition_max_bytes": 1 << 20}],
                    }
                ],
                "rack_id": "",
            },
        )
        part = fetched.responses[0].partitions[0]
        assert (part.error_code.value, part.high_watermark) == (OFFSET_OUT_OF_RANGE, -1)


def idempotent(records: bytes, producer_id: int, sequence: int) -> bytes:
    """`records` (one batch) stamped with a producer id, epoch 0 and a base sequence, its CRC made again."""
    from crc32c import crc32c

    out = bytearray(records)
    struct.pack_into(">qhi", out, 43, producer_id, 0, sequence)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_a_retried_idempotent_batch_is_written_once(served):
    with tidelog.open(served.target) as log:
        log.create_topic("retried", 1)
    first = idempotent(batch(b"x", b"y"), 4242, 0)
    with wire(served) as w:
        offsets = [
            w.call(0, 9, produce("retried", 0, first)).responses[0].partition_responses[0] for _ in range(3)
        ]
        assert [(o.error_code.value, o.base_offset) for o in offsets] == [(0, 0)] * 3
        second = w.call(0, 9, produce("retried", 0, idempotent(batch(b"z"), 4242, 2)))
        assert second.responses[0].partition_responses[0].base_offset == 2
    with tidelog.open(served.target) as log:
        assert [m.value for m in log.read("retried", 0)] == [b"x", b"y", b"z"]


def test_malformed_frames_close_the_connection_and_change_nothing(served):
    before = dump(served.target)
    request = encode_request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    cases = {
        "unknown API key": encode_request(3, 12, {"topics": None})[:4] + struct.pack(">h", 999) + request[6:],
        "unserved version of Metadata": struct.pack(">ihhih", 10, 3, 99, 1, 0),
        "shorter than its size, then a hang-up": struct.pack(">i", 100) + request[4:],
        "over --max-request": struct.pack(">i", 2 << 20),
        "a 2 GB size": struct.pack(">i", 0x7FFFFFFF),
        "a negative size": struct.pack(">i", -5),
        "no header": struct.pack(">i", 3) + b"abc",
    }
    for what, data in cases.items():
        with wire(served) as w:
            w.send(data)
            if what.endswith("hang-up"):
                w.sock.shutdown(socket.SHUT_WR)
            assert w.closed(), what
    # Bytes after a request's body are ignored, as Kafka's broker ignores them (librdkafka's
    # all-topics Metadata carries three): answered, and the connection stays open.
    with wire(served) as w:
        w.send(struct.pack(">i", len(request) - 4 + 5) + request[4:] + b"\0" * 5)
        assert struct.unpack_from(">ih", w.recv_frame()) == (1, 0)
        assert w.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    # ApiVersions at a version we do not serve: UNSUPPORTED_VERSION with the table (header v0).
    with wire(served) as w:
        w.send(struct.pack(">ihhih", 10, 18, 99, 5, 0))
        frame = w.recv_frame()
        correlation_id, code, count = struct.unpack_from(">ihi", frame)
        assert (correlation_id, code, count) == (5, UNSUPPORTED_VERSION, len(APIS))
    assert dump(served.target) == before
    assert answered(served)


def rss(served) -> int:
    """The server process's resident memory, in bytes."""
    with open(f"/proc/{served.proc.pid}/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_random_bytes_close_the_connection_and_others_are_served(served, tried):
    before = rss(served)
    rng = random.Random(30)
    closed = 0
    cases = 200
    for _ in range(cases):
        data = os.urandom(rng.randrange(1, 64))
        if rng.random() < 0.5:  # a plausible size, then garbage
            data = struct.pack(">i", rng.randrange(8, 64)) + data
        with wire(served) as w:
            w.send(data)
            w.sock.shutdown(socket.SHUT_WR)
            closed += w.closed()
        with wire(served) as w:  # and a 2 GB size prefix each round: never allocated
            w.send(struct.pack(">i", 0x7FFFFFFF) + data)
            closed += w.closed()
    assert closed == 2 * cases
    assert answered(served)
    assert rss(served) - before < 32 << 20  # memory flat: no frame was allocated for
    tried(cases=2 * cases, closed=closed)


def test_sasl_plain_with_the_token(guarded):
    producer = ck.Producer(guarded.client_config())
    producer.produce("secured", value=b"in")
    assert producer.flush(WAIT_S) == 0
    wrong = ck.Producer({**guarded.client_config(), "sasl.password": "wrong", "message.timeout.ms": 2000})
    errors = []
    wrong.produce("secured", value=b"no", on_delivery=lambda err, msg: errors.append(err))
    wrong.flush(5)
    assert errors and errors[0] is not None
    with tidelog.open(guarded.target) as log:
        assert [m.value for m in log.read("secured", 0)] == [b"in"]


def test_sasl_failure_and_requests_before_it_close_the_connection(guarded):
    with wire(guarded) as w:
        assert w.call(17, 1, {"mechanism": "PLAIN"}).error_code.value == 0
        answer = w.call(36, 2, {"auth_bytes": b"\0user\0wrong"})
        assert answer.error_code.value == SASL_AUTHENTICATION_FAILED
        assert w.closed()
    with wire(guarded) as w:
        w.send(encode_request(3, 12, {"topics": None}))  # Metadata before authenticating
        assert w.closed()
    with wire(guarded) as w:  # a 2 GB size before SASL: closed, nothing allocated for it
        w.send(struct.pack(">i", 0x7FFFFFFF))
        assert w.closed()
    with wire(guarded) as w:  # 100 KiB before SASL: past the pre-authentication bound
        w.send(struct.pack(">i", 100 << 10))
        assert w.closed()
    with wire(guarded) as w:
        assert w.call(17, 1, {"mechanism": "PLAIN"}).error_code.value == 0
        assert w.call(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()}).error_code.value == 0
        assert w.call(3, 12, {"topics": None}).brokers[0].port == guarded.kafka_port


def test_connection_idle_and_handshake_limits(guarded):
    # The handshake deadline: a client that never authenticates is closed.
    with wire(guarded) as w:
        assert w.closed()
    # max_connections: a fifth connection is refused at once while four are open.
    held = [wire(guarded) for _ in range(4)]
    try:
        time.sleep(0.2)  # let the server accept them
        with wire(guarded) as extra:
            assert extra.closed()
    finally:
        for w in held:
            w.close()
    # The idle timeout: an authenticated client that goes silent is closed.
    with wire(guarded) as w:
        assert w.call(17, 1, {"mechanism": "PLAIN"}).error_code.value == 0
        assert w.call(36, 2, {"auth_bytes": b"\0user\0" + TOKEN.encode()}).error_code.value == 0
        assert w.closed()


def fetch_request(topic: str, offset: int, partition_max: int, max_bytes: int = 1 << 20) -> dict:
    return {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": partition_max}
                ],
            }
        ],
        "rack_id": "",
    }


def records_in(records: bytes) -> int:
    """How many records a fetched batch holds (its record count, at byte 57)."""
    return struct.unpack_from(">i", records, 57)[0] if records else 0


def test_a_fetch_holds_to_its_byte_limits_but_returns_one_record_at_least(served):
    with tidelog.open(served.target) as log:
        log.create_topic("sized", 1)
        log.producer().send_batch("sized", [bytes([i]) * 1000 for i in range(10)], partition=0)
    with wire(served) as w:
        counts = {}
        for limit in (10, 2500, 5500, 1 << 20):
            part = w.call(1, 12, fetch_request("sized", 0, limit)).responses[0].partitions[0]
            counts[limit] = records_in(part.records)
        # 1,000-byte values: what fits in the limit, and one record even past it (KIP-74).
        assert counts == {10: 1, 2500: 2, 5500: 5, 1 << 20: 10}
        part = w.call(1, 12, fetch_request("sized", 7, 1 << 20)).responses[0].partitions[0]
        assert (records_in(part.records), struct.unpack_from(">q", part.records)[0]) == (3, 7)


def fetched(part) -> list[tuple[int, bytes | None]]:
    """(Kafka offset, value) of each record in a fetched partition's batches, read by
    aiokafka's reader (not ours), every batch's CRC checked."""
    from aiokafka.record.memory_records import MemoryRecords

    records = MemoryRecords(bytes(part.records or b""))
    out = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        out.extend((r.offset, r.value) for r in batch)
    return out


def test_fetches_answered_from_their_read_ahead_read_the_log_in_order(served):
    """A fetch stopped at its byte limit reads the next range ahead; the
    connection's next fetches take it: every record once, in order."""
    values = [b"%04d" % i * 25 for i in range(300)]  # 100-byte values
    with tidelog.open(served.target) as log:
        log.create_topic("ahead", 1)
        log.producer().send_batch("ahead", values, partition=0)
    got: list[tuple[int, bytes | None]] = []
    with wire(served) as w:
        while len(got) < len(values):
            part = w.call(1, 12, fetch_request("ahead", len(got), 4000)).responses[0].partitions[0]
            assert part.error_code.value == 0 and part.records
            got.extend(fetched(part))
            assert len(got) < len(values) or part.high_watermark == len(values)
    assert got == list(enumerate(values))


def test_a_read_ahead_is_not_answered_after_its_topic_changed(served):
    """What was read ahead for a position is dropped when the topic was made
    again, or its records deleted, before the next fetch asks for it."""
    with tidelog.open(served.target) as log:
        log.create_topic("remade", 1)
        log.producer().send_batch("remade", [b"old-%03d" % i * 20 for i in range(100)], partition=0)
    with wire(served) as w:
        first = fetched(w.call(1, 12, fetch_request("remade", 0, 2000)).responses[0].partitions[0])
        assert 0 < len(first) < 100  # stopped at its limit: the next range is read ahead
        with tidelog.open(served.target) as log:
            log.delete_topic("remade")
            log.create_topic("remade", 1)
            log.producer().send_batch("remade", [b"new-%03d" % i * 20 for i in range(100)], partition=0)
        # A store that kept the old topic's partition ids may answer one empty
        # fetch before it looks again (PostgreSQL's does); never the old records.
        deadline = time.monotonic() + WAIT_S
        while not (
            part := w.call(1, 12, fetch_request("remade", len(first), 2000)).responses[0].partitions[0]
        ).records:
            assert part.error_code.value == 0 and time.monotonic() < deadline
        assert fetched(part)[0] == (len(first), b"new-%03d" % len(first) * 20)
        # Read ahead again, then the records it holds deleted: out of range, as a fresh read says.
        position = len(first) + len(fetched(part))
        with tidelog.open(served.target) as log:
            log.delete_before("remade", 0, position + 10)
        part = w.call(1, 12, fetch_request("remade", position, 2000)).responses[0].partitions[0]
        assert part.error_code.value == OFFSET_OUT_OF_RANGE and not part.records


def test_a_fetch_reads_across_compaction_gaps_text_and_tombstones(served):
    """Kept records keep their offsets (Kafka's offset n - 1, the gaps as
    offset deltas), a JSON value goes out as its text and JSON null as a
    tombstone, within the byte limit counted on the wire."""
    with tidelog.open(served.target) as log:
        log.create_topic("gaps", 1, cleanup_policy="compact")
        # One batch: every record has the batch's timestamp, so each takes the same bytes
        # (sent one by one on a loaded machine, a delta past 63 ms took a byte more).
        records = [NewRecord({"v": i}, key=key) for i, key in enumerate(["k0", "k1", "k0", "k2", "k0", "k3"])]
        records.append(NewRecord(None, key="k3"))  # a tombstone
        log.producer().send_batch("gaps", records, partition=0)
        log.clean("gaps")
        start = log.offsets("gaps")[0].first_offset - 1
    assert start == 1  # offsets 2 (k1), 4 (k2), 5 (k0) and 7 (k3's tombstone) are kept
    with wire(served) as w:
        part = w.call(1, 12, fetch_request("gaps", start, 1 << 20)).responses[0].partitions[0]
        assert fetched(part) == [(1, b'{"v":1}'), (3, b'{"v":3}'), (4, b'{"v":4}'), (6, None)]
        # A batch header (61 bytes) and 16 bytes a record: a limit of 93 takes two, one less takes one.
        for limit, count in ((93, 2), (92, 1)):
            part = w.call(1, 12, fetch_request("gaps", start, limit)).responses[0].partitions[0]
            assert len(part.records) == 61 + 16 * count and len(fetched(part)) == count


def test_batches_as_produced_are_served_as_they_came_until_their_records_change(served):
    """On SQLite a compressed batch is kept as it came and a fetch answers
    with it (from the batch holding the offset asked for: the client skips
    the rest, as with Kafka); once compaction took a record of it, the
    records are read and encoded again."""
    with tidelog.open(served.target) as log:
        log.create_topic("kept", 1, cleanup_policy="compact")
        kept = isinstance(log.store, KeepsWireBatches)
    producer = ck.Producer(served.client_config(**{"compression.type": "lz4", "linger.ms": 200}))
    keys = ["k0", "k1", "k0", "k2", "k0", "k3"]
    every = [(i, b"v%d" % i + b"." * 200) for i in range(6)]  # worth compressing: librdkafka sends it so
    for (_, value), key in zip(every, keys):
        producer.produce("kept", value=value, key=key.encode(), partition=0)
    assert producer.flush(WAIT_S) == 0
    with wire(served) as w:
        for offset in (0, 2):
            part = w.call(1, 12, fetch_request("kept", offset, 1 << 20)).responses[0].partitions[0]
            assert fetched(part) == (every if kept else every[offset:])
            codec = struct.unpack_from(">h", part.records, 21)[0] & 7
            assert codec == (LZ4 if kept else 0)
    with tidelog.open(served.target) as log:
        log.clean("kept")  # the older k0s (Kafka offsets 0 and 2) go
        start = log.offsets("kept")[0].first_offset - 1
    assert start == 1
    with wire(served) as w:
        part = w.call(1, 12, fetch_request("kept", start, 1 << 20)).responses[0].partitions[0]
        assert fetched(part) == [every[1], every[3], every[4], every[5]]
        assert struct.unpack_from(">h", part.records, 21)[0] & 7 == 0


def test_a_zstd_batch_goes_only_to_a_client_that_fetches_at_v10_or_later(served):
    """KIP-110: below Fetch v10 a client cannot read zstd; it gets the records encoded afresh."""
    with tidelog.open(served.target) as log:
        log.create_topic("zstd-kept", 1)
        kept = isinstance(log.store, KeepsWireBatches)
    producer = ck.Producer(served.client_config(**{"compression.type": "zstd", "linger.ms": 200}))
    every = [(i, b"v%d" % i + b"." * 200) for i in range(4)]
    for _, value in every:
        producer.produce("zstd-kept", value=value, partition=0)
    assert producer.flush(WAIT_S) == 0
    with wire(served) as w:
        for version, codec in ((12, ZSTD if kept else 0), (9, 0)):
            part = w.call(1, version, fetch_request("zstd-kept", 0, 1 << 20)).responses[0].partitions[0]
            assert fetched(part) == every
            assert struct.unpack_from(">h", part.records, 21)[0] & 7 == codec
