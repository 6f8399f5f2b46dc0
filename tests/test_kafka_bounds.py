"""The Kafka front's bounds after login: a compressed batch inflates under
--max-batch-inflated whatever its codec, a Fetch is capped by
--fetch-max-bytes and counts a repeated partition once, and a refused group
step writes nothing. Before: a 32 KiB zstd batch that inflates to 1 GiB grew
the worker by 2 GB before it was refused (an lz4 one of 1.1 MiB by 499 MB); a
Fetch naming one partition 50 times with max_bytes 2^31-1 answered 191 MiB to
a 1 KB request; Heartbeat, OffsetCommit and LeaveGroup refused with
UNKNOWN_MEMBER_ID left their groups behind."""

from __future__ import annotations

import struct

import cramjam
import pytest
from crc32c import crc32c

import tidelog
from dumps import dump
from kafka_serve import KafkaServe
from kafka_wire import KafkaWire

CORRUPT_MESSAGE = 2
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
ZSTD, LZ4 = 4, 3


def varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def inflating_batch(codec: int, inflated: int) -> bytes:
    """A record batch of one record whose value is `inflated` zero bytes, compressed
    as the codec says (streamed: the test never holds the inflated value)."""
    # lz4 in independent blocks: Kafka's clients write those, and linked ones are refused.
    compressor = cramjam.zstd.Compressor() if codec == ZSTD else cramjam.lz4.Compressor(block_linked=False)
    head = bytes([0]) + varint(0) + varint(0) + varint(-1) + varint(inflated)  # attrs, ts, offset, key, value
    record_len = len(head) + inflated + 1
    compressor.compress(varint(record_len) + head)
    chunk = bytes(16 << 20)
    left = inflated
    while left:
        piece = chunk[: min(left, len(chunk))]
        compressor.compress(piece)
        left -= len(piece)
    compressor.compress(varint(0))  # no headers
    body = bytes(compressor.finish())
    after_crc = struct.pack(">hiqqqhii", codec, 0, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, 1) + body
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, the rest
    return struct.pack(">qiib", 0, length, 0, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def produce(topic: str, records: bytes) -> dict:
    data = [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]
    return {"acks": -1, "timeout": 5000, "topic_data": data}


@pytest.fixture
def served(tmp_path):
    with KafkaServe(
        tmp_path / "k.db", "--max-batch-inflated", "32MiB", "--fetch-max-bytes", "1MiB"
    ) as server:
        yield server


@pytest.mark.parametrize(("codec", "inflated"), [(ZSTD, 1 << 30), (LZ4, 256 << 20)], ids=["zstd", "lz4"])
def test_a_batch_that_inflates_past_the_bound_is_refused_holding_no_more(served, codec, inflated):
    with tidelog.open(served.target) as log:
        log.create_topic("bombed", 1)
    before = dump(served.target)
    bomb = inflating_batch(codec, inflated)
    assert len(bomb) < 5 << 20
    peak = peak_rss(served.proc.pid)
    with KafkaWire("127.0.0.1", served.kafka_port) as w:
        answer = w.call(0, 9, produce("bombed", bomb))
        assert answer.responses[0].partition_responses[0].error_code.value == CORRUPT_MESSAGE
    grown = peak_rss(served.proc.pid) - peak
    assert grown < 3 * (32 << 20), f"the server grew by {grown >> 20} MiB"
    assert dump(served.target) == before
    # A batch within the bound is written.
    with KafkaWire("127.0.0.1", served.kafka_port) as w:
        answer = w.call(0, 9, produce("bombed", inflating_batch(codec, 1 << 20)))
        assert answer.responses[0].partition_responses[0].error_code.value == 0


def fetch(topic: str, partitions: list[int], max_bytes: int = 0x7FFFFFFF) -> dict:
    each = [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 0x7FFFFFFF} for p in partitions]
    return {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "topics": [{"topic": topic, "partitions": each}],
        "rack_id": "",
    }


def test_a_fetch_counts_a_repeated_partition_once_and_is_capped(served):
    with tidelog.open(served.target) as log:
        log.create_topic("big", 2)
        for partition in (0, 1):
            log.producer().send("big", bytes(700_000), partition=partition)
    with KafkaWire("127.0.0.1", served.kafka_port) as w:
        repeated = w.call(1, 12, fetch("big", [0] * 50))
        (topic,) = repeated.responses
        assert [p.partition_index for p in topic.partitions] == [0]
        assert 700_000 < len(topic.partitions[0].records) < 800_000
        # --fetch-max-bytes 1MiB: the first partition's record goes out, the second no longer fits.
        both = w.call(1, 12, fetch("big", [0, 1]))
        sizes = [len(p.records or b"") for p in both.responses[0].partitions]
        assert sizes[0] > 700_000 and sizes[1] == 0


def test_refused_group_steps_of_an_unknown_member_leave_no_group(served):
    with tidelog.open(served.target) as log:
        log.create_topic("t", 1)
    before = dump(served.target)
    with KafkaWire("127.0.0.1", served.kafka_port) as w:
        hb = w.call(
            12, 4, {"group_id": "ghost-hb", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        )
        assert hb.error_code.value == UNKNOWN_MEMBER_ID
        offsets = [
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}],
            }
        ]
        oc = w.call(
            8,
            8,
            {
                "group_id": "ghost-oc",
                "generation_id_or_member_epoch": 1,
                "member_id": "m",
                "group_instance_id": None,
                "topics": offsets,
            },
        )
        # Kafka's coordinator answers a member's commit to a group it does not have so.
        assert oc.topics[0].partitions[0].error_code.value == ILLEGAL_GENERATION
        lg = w.call(
            13, 4, {"group_id": "ghost-lg", "members": [{"member_id": "m", "group_instance_id": None}]}
        )
        assert lg.members[0].error_code.value == UNKNOWN_MEMBER_ID
    assert dump(served.target) == before
    with tidelog.open(served.target) as log:
        assert not {"ghost-hb", "ghost-oc", "ghost-lg"} & set(log.groups())


def header(key: int, version: int) -> bytes:
    return struct.pack(">hhih", key, version, 9, 1) + b"p"


@pytest.mark.parametrize(
    "body",
    [
        # Metadata v1: a topics array of 2^31-1 in a 20-byte frame (kio's reader reserved
        # room for them all: 208 GB asked, the process aborted, before any SASL check).
        pytest.param(header(3, 1) + struct.pack(">i", 0x7FFFFFFF), id="metadata-count"),
        # CreateTopics v5 (flexible): a topics count of about 2^34 in a varint of five bytes,
        # found by bench/soak.py's fuzzer: the native reader asked for 208 GB and the
        # server process died.
        pytest.param(header(19, 5) + b"\x00" + bytes.fromhex("ffffffff60000000"), id="compact-count"),
        # DescribeGroups v0: a group id of 32,767 bytes announced, 2 sent.
        pytest.param(header(15, 0) + struct.pack(">ih", 1, 0x7FFF) + b"ab", id="string-length"),
        # CreateTopics v2: topics null, which its schema does not allow (a handler met None).
        pytest.param(header(19, 2) + struct.pack(">iib", -1, 1000, 0), id="null-array"),
    ],
)
def test_a_frame_that_claims_more_than_it_holds_is_refused_and_the_server_stays(served, body):
    before = dump(served.target)
    with KafkaWire("127.0.0.1", served.kafka_port) as w:
        w.send(struct.pack(">i", len(body)) + body)
        assert w.closed()
    assert served.proc.poll() is None  # the server is alive
    with KafkaWire("127.0.0.1", served.kafka_port) as w:
        assert (
            w.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code.value == 0
        )
    assert dump(served.target) == before
    assert "Traceback" not in served.stderr()  # refused as malformed, not failed in a handler
