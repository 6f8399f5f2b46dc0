"""Produce, Fetch and ListOffsets side by side with Apache Kafka 4, at every version the
listener serves: what a producer is answered (acks, codecs, idempotent producers, bad
batches) and what a consumer then decodes (offsets, keys, values, headers, timestamps),
the high watermark, the log start offset, byte limits and out-of-range answers.

Batches are written and read by tests/kafka_records.py, apart from the listener's own
code. The records a consumer decodes are compared as it hands them out: fetched from an
offset until the high watermark, each answer taking up where the last one stopped; how
many of them one answer carries is where tidelog differs (`record-batches`).
"""

from __future__ import annotations

import time

from dumps import dump
from kafka_diff import assert_same, clip, differs, make_topic, seen, until, versions
from kafka_records import (
    CODECS,
    CONTROL,
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NONE,
    NOW,
    SNAPPY,
    TRANSACTIONAL,
    ZSTD,
    Record,
    batch,
    produce_request,
    records,
)
from kafka_reference import unique
from kafka_wire import encode_request

PRODUCE, FETCH, LIST_OFFSETS, INIT_PRODUCER_ID = 0, 1, 2, 22
T0 = NOW  # near now: Kafka's retention deletes records of stamps older than 7 days
SAMPLE = [
    Record(b"v1", key=b"k1", headers=[("h", b"x"), ("empty", b"")]),
    Record(b"v2", timestamp=T0 + 5),
    Record(None, key=b"k3", timestamp=T0 + 5),  # a tombstone
]
ONE = [Record(b"one")]
API_VERSIONS = {"client_software_name": "tidelog-tests", "client_software_version": "1"}


def answered(wire) -> int:
    """ApiVersions on `wire`: its error code, or a ConnectionError when the connection is closed."""
    return wire.call(18, 3, API_VERSIONS).error_code.value


def produced(target, answer) -> dict:
    """A Produce answer as compared: error messages are free text and left out, and
    the log start offset is Kafka's (the partition's, or -1 for a request refused
    before its partition was looked at), where tidelog answers -1."""
    out = seen(answer)
    for topic in out["responses"]:
        for p in topic["partition_responses"]:
            p.pop("error_message", None)
            if "log_start_offset" in p:
                differs("produce-log-start")
                if target.is_kafka or p["log_start_offset"] == -1:
                    p["log_start_offset"] = "Kafka's"
    return out


def partition_answer(target, answer) -> dict:
    return produced(target, answer)["responses"][0]["partition_responses"][0]


def fetch_values(topic, offset, partition=0, partition_max_bytes=1 << 20, max_bytes=1 << 20, isolation=0):
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "isolation_level": isolation,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def read_through(wire, version, topic, offset=0, **limits) -> list[dict]:
    """The records a consumer hands out from `offset` on, fetching at `version` until
    the high watermark: each answer's records from where the last one stopped."""
    out: list[dict] = []
    while True:
        answer = wire.call(FETCH, version, fetch_values(topic, offset, **limits))
        p = answer.responses[0].partitions[0]
        assert p.error_code.value == 0, p
        got = [r for r in records(p.records) if r["offset"] >= offset]
        out += got
        if not got or got[-1]["offset"] + 1 >= p.high_watermark:
            return out
        offset = got[-1]["offset"] + 1


def fetched(answer) -> dict:
    """A Fetch answer but its records (compared as `read_through` reads them: `record-batches`)."""
    differs("record-batches")
    return seen(answer, drop=frozenset({"records"}))


# Produce ------------------------------------------------------------------------------


def produce_everywhere(target, topic):
    """SAMPLE with each codec and acks -1 and 1, at every Produce version; acks=0 (no
    answer, the connection goes on); then what a consumer reads back, from another broker."""
    out = {}
    with target.wire() as wire:
        for version in versions(PRODUCE):
            for name, codec in CODECS.items():
                for acks in (-1, 1):
                    answer = wire.call(
                        PRODUCE, version, produce_request(topic, 0, batch(SAMPLE, codec), acks)
                    )
                    out[version, name, acks] = produced(target, answer)
            wire.send(encode_request(PRODUCE, version, produce_request(topic, 0, batch(ONE), acks=0)))
            out[version, "acks=0, then"] = answered(wire)
    with target.wire(-1) as wire:
        out["read"] = read_through(wire, 12, topic)
    return out


def test_produce_at_every_version(kafka, tidelog):
    topic = unique("produce")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    ours, theirs = produce_everywhere(tidelog, topic), produce_everywhere(kafka, topic)
    assert_same(ours, theirs)
    # zstd from v7 on (KIP-110); every other batch written, 3 records each, and acks=0's
    assert [r["offset"] for r in theirs["read"]] == list(range(3 * (2 * 4 * 7 + 2 * 3) + 7))


def refused(target, topic):
    """Batches Kafka refuses, at every Produce version: each partition's answer, and
    whether an error under acks=0 closes the connection (it does: no answer tells)."""
    cases = {
        "unknown partition": (5, batch(ONE)),
        "no bytes": (0, b""),
        "no records": (0, None),
        "a batch of none": (0, batch([])),
        "two batches": (0, batch(ONE) + batch(ONE)),
        "a control batch": (0, batch(ONE, attributes=CONTROL)),
        "a bad CRC": (0, batch(ONE, corrupt_crc=True)),
        "a record too large": (0, batch([Record(b"x" * 1_100_000)])),
        "zstd before v7": (0, batch(ONE, ZSTD)),
        "linked LZ4 blocks": (0, batch(ONE, LZ4, linked_lz4=True)),
        "transactional": (
            0,
            batch(ONE, attributes=TRANSACTIONAL, producer_id=1, producer_epoch=0, base_sequence=0),
        ),
    }
    out = {}
    with target.wire() as wire:
        for version in versions(PRODUCE):
            for name, (partition, data) in cases.items():
                if name == "zstd before v7" and version >= 7:
                    continue
                if data is None:
                    # Kafka fails on null records inside and never answers (nor closes): tidelog
                    # answers as for no bytes, which is what the suite checks of it alone.
                    differs("produce-null-records")
                    if not target.is_kafka:
                        answer = wire.call(PRODUCE, version, produce_request(topic, partition, None))
                        assert partition_answer(target, answer)["error_code"] == 87  # INVALID_RECORD
                    continue
                answer = wire.call(PRODUCE, version, produce_request(topic, partition, data))
                out[version, name] = partition_answer(target, answer)
            answer = wire.call(PRODUCE, version, produce_request(topic, 0, batch(ONE), acks=2))
            out[version, "acks=2"] = partition_answer(target, answer)
        for version in versions(PRODUCE):
            with target.wire() as other:
                other.send(encode_request(PRODUCE, version, produce_request(topic, 5, batch(ONE), acks=0)))
                out[version, "acks=0 refused, then"] = other.closed()
    return out


def test_produce_refusals_at_every_version(kafka, tidelog):
    topic = unique("refused")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    before = dump(tidelog.store)
    ours = refused(tidelog, topic)
    assert dump(tidelog.store) == before  # a refused batch writes nothing
    assert_same(ours, refused(kafka, topic))


def test_produce_to_a_missing_topic(kafka, tidelog):
    """Kafka's Produce never makes a topic (its Metadata does, which a client asks first);
    tidelog's writes make one when auto-create is on, as its other fronts' do."""
    answers = {}
    for target in (kafka, tidelog):
        topic = unique("missing")
        with target.wire() as wire:
            answers[target.name] = partition_answer(
                target, wire.call(PRODUCE, 9, produce_request(topic, 0, batch(ONE)))
            )["error_code"]
    differs("produce-creates")
    assert (answers["kafka"], answers[tidelog.name]) == (3, 0)  # UNKNOWN_TOPIC_OR_PARTITION


def idempotent(target, topic, gaps):
    """InitProducerId at every version (also naming the last id, as KIP-360's bump does);
    at every Produce version a producer's first batch, its retry and its next batch;
    then what a consumer reads."""
    out = {}

    def new_id(wire, version, named=-1):
        # Kafka makes its producer-id state on the first ask: it answers
        # COORDINATOR_LOAD_IN_PROGRESS meanwhile, which a client retries.
        values = {
            "transactional_id": None,
            "transaction_timeout": 60_000,
            "producer_id": named,
            "producer_epoch": -1 if named == -1 else 0,
        }
        answer = until(
            lambda: (a := wire.call(INIT_PRODUCER_ID, version, values)).error_code.value != 14 and a,
            "a producer id",
        )
        return answer

    with target.wire() as wire:
        for version in versions(INIT_PRODUCER_ID):
            answer = new_id(wire, version)
            out["init", version] = (answer.error_code.value, answer.producer_id >= 0, answer.producer_epoch)
            if version >= 3:
                again = new_id(wire, version, answer.producer_id)
                fresh = again.producer_id not in (answer.producer_id, -1)
                out["init naming the last", version] = (again.error_code.value, fresh, again.producer_epoch)
                half = {
                    "transactional_id": None,
                    "transaction_timeout": 60_000,
                    "producer_id": -1,
                    "producer_epoch": 0,
                }
                out["init with an epoch, no id", version] = seen(wire.call(INIT_PRODUCER_ID, version, half))
        for version in versions(PRODUCE):
            answer = new_id(wire, 4)
            pid, epoch = answer.producer_id, answer.producer_epoch

            def send(sequence, count, to=topic, pid=pid, epoch=epoch, version=version):
                data = batch(
                    [Record(b"i%d" % (sequence + i)) for i in range(count)], NONE, 0, pid, epoch, sequence
                )
                return partition_answer(target, wire.call(PRODUCE, version, produce_request(to, 0, data)))

            first, retry = send(0, 2), send(0, 2)
            differs("idempotent-producers")  # Kafka's retry carries its batch's time
            retry["log_append_time"] = first["log_append_time"]
            out["produce", version] = (first, retry, send(2, 1))
            send(0, 1, gaps)
            out["gap", version] = send(9, 1, gaps)["error_code"]
    with target.wire(-1) as wire:
        out["read"] = [(r["offset"], r["value"]) for r in read_through(wire, 12, topic)]
    return out


def test_idempotent_producers(kafka, tidelog):
    topic, gaps = unique("idempotent"), unique("gaps")
    for target in (kafka, tidelog):
        make_topic(target, topic)
        make_topic(target, gaps)
    ours, theirs = idempotent(tidelog, topic, gaps), idempotent(kafka, topic, gaps)
    differs("idempotent-producers")  # sequences are not checked: a gap is written
    assert {k: v for k, v in theirs.items() if k[0] == "gap"} == {("gap", v): 45 for v in versions(PRODUCE)}
    assert {k: v for k, v in ours.items() if k[0] == "gap"} == {("gap", v): 0 for v in versions(PRODUCE)}
    assert {k: v for k, v in ours.items() if k[0] != "gap"} == {
        k: v for k, v in theirs.items() if k[0] != "gap"
    }


def stamped(target, topic):
    """A batch marked LogAppendTime (the topic's setting decides, not the batch: both keep
    the producer's stamps), and a record sent without a timestamp (-1)."""
    with target.wire() as wire:
        for version in versions(PRODUCE):
            marked = [Record(b"marked-%d" % version, timestamp=T0 + version)]
            answer = wire.call(
                PRODUCE, version, produce_request(topic, 0, batch(marked, attributes=LOG_APPEND_TIME))
            )
            assert partition_answer(target, answer)["error_code"] == 0
        before = int(time.time() * 1000)
        answer = wire.call(PRODUCE, 9, produce_request(topic, 0, batch([Record(b"unstamped", timestamp=-1)])))
        assert partition_answer(target, answer)["error_code"] == 0
        after = int(time.time() * 1000)
    with target.wire(-1) as wire:
        read = read_through(wire, 12, topic)
    unstamped = read.pop()
    differs("no-timestamp")  # Kafka keeps -1, tidelog stamps it with the log's clock
    assert (unstamped["timestamp"] == -1) if target.is_kafka else (before <= unstamped["timestamp"] <= after)
    return [(r["offset"], r["value"], r["timestamp"]) for r in read]


def test_timestamps(kafka, tidelog):
    topic = unique("stamps")
    for target in (kafka, tidelog):
        make_topic(target, topic)
    assert_same(stamped(tidelog, topic), stamped(kafka, topic))


def test_log_append_time_topics(kafka, tidelog):
    made = {}
    for target in (kafka, tidelog):
        with target.wire() as wire:
            answer = wire.call(
                19,
                7,
                {
                    "topics": [
                        {
                            "name": unique("append-time"),
                            "num_partitions": 1,
                            "replication_factor": 1,
                            "configs": [{"name": "message.timestamp.type", "value": "LogAppendTime"}],
                        }
                    ],
                    "timeout": 30_000,
                    "validate_only": False,
                },
            )
        made[target.name] = answer.topics[0].error_code.value
    differs("log-append-time")
    assert (made["kafka"], made[tidelog.name]) == (0, 40)  # INVALID_CONFIG


def test_null_header_values(kafka, tidelog):
    topic = unique("null-headers")
    read = {}
    for target in (kafka, tidelog):
        make_topic(target, topic)
        with target.wire() as wire:
            data = batch([Record(b"v", headers=[("null", None), ("set", b"1")])])
            assert (
                partition_answer(target, wire.call(PRODUCE, 9, produce_request(topic, 0, data)))["error_code"]
                == 0
            )
            read[target.name] = read_through(wire, 12, topic)[0]["headers"]
    assert read["kafka"] == [("null", None), ("set", b"1")]
    assert read[tidelog.name] == read["kafka"]  # a null value kept null through the listener


# Fetch --------------------------------------------------------------------------------

BATCHES = [(NONE, 3), (GZIP, 3), (ZSTD, 3), (SNAPPY, 3), (LZ4, 3)]  # offsets 0 to 14


def fill(target, topic):
    with target.wire() as wire:
        at = 0
        for codec, count in BATCHES:
            rows = [
                Record(b"r%d" % (at + i), key=b"k%d" % (at + i), timestamp=T0 + at + i) for i in range(count)
            ]
            answer = wire.call(PRODUCE, 9, produce_request(topic, 0, batch(rows, codec)))
            assert partition_answer(target, answer)["error_code"] == 0
            at += count


def fetch_everywhere(target, topic):
    """At every Fetch version: the answer from the start, inside a batch, at and past the
    high watermark, before the log start, of a missing partition and topic, read
    committed, and within byte limits of 1; the records read through from the start,
    from inside a batch and one record at a time; then the same after DeleteRecords."""
    cases = {
        "from 0": dict(offset=0),
        "inside a batch": dict(offset=4),
        "at the high watermark": dict(offset=15),
        "past the end": dict(offset=16),
        "negative": dict(offset=-1),
        "a missing partition": dict(offset=0, partition=3),
        "a missing topic": dict(offset=0, topic=topic + "-missing"),
        "read committed": dict(offset=0, isolation=1),
        "read committed past the end": dict(offset=16, isolation=1),
        "partition max bytes 1": dict(offset=0, partition_max_bytes=1),
        "max bytes 1": dict(offset=0, max_bytes=1),
    }
    out = {}
    with target.wire(-1) as wire:
        for version in versions(FETCH):
            for name, case in cases.items():
                values = fetch_values(**{"topic": topic, **case})
                out[version, name] = fetched(wire.call(FETCH, version, values))
            out[version, "read from 0"] = read_through(wire, version, topic)
            out[version, "read from 4"] = read_through(wire, version, topic, 4)
            out[version, "read 1 byte at a time"] = read_through(
                wire, version, topic, 0, partition_max_bytes=1
            )
    with target.wire() as wire:
        answer = wire.call(
            21,
            2,
            {
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 5}]}],
                "timeout": 30_000,
            },
        )
        out["delete records"] = seen(answer)
    with target.wire(-1) as wire:
        for version in versions(FETCH):
            out[version, "before the log start"] = fetched(wire.call(FETCH, version, fetch_values(topic, 2)))
            out[version, "at the log start"] = fetched(wire.call(FETCH, version, fetch_values(topic, 5)))
            out[version, "read from the log start"] = read_through(wire, version, topic, 5)
    return out


def test_fetch_at_every_version(kafka, tidelog):
    topic = unique("fetch")
    for target in (kafka, tidelog):
        make_topic(target, topic)
        fill(target, topic)
    ours, theirs = fetch_everywhere(tidelog, topic), fetch_everywhere(kafka, topic)
    assert_same(ours, theirs)
    assert [r["value"] for r in theirs[12, "read from 0"]] == [b"r%d" % i for i in range(15)]


# ListOffsets --------------------------------------------------------------------------

STAMPS = [T0, T0 + 10, T0 + 10, T0 + 20, T0 + 30, T0 + 30]  # offsets 0 to 5, in two batches


def list_values(topic, timestamp, partition=0, isolation=0):
    return {
        "replica_id": -1,
        "isolation_level": isolation,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
    }


def listed(target, topic):
    """At every ListOffsets version: the earliest (-2), latest (-1) and max timestamp
    (-3) of a partition with records and of an empty one, offsets by time (before,
    at, between and after the records' stamps), the asks of later versions (-4, -7),
    read committed, a missing partition and topic; again after DeleteRecords."""
    cases = {
        "earliest": dict(timestamp=-2),
        "latest": dict(timestamp=-1),
        "max timestamp": dict(timestamp=-3),
        "at 0": dict(timestamp=0),
        "at the first stamp": dict(timestamp=T0),
        "between stamps": dict(timestamp=T0 + 11),
        "at a shared stamp": dict(timestamp=T0 + 30),
        "after every stamp": dict(timestamp=T0 + 31),
        "earliest local (-4)": dict(timestamp=-4),
        "-7": dict(timestamp=-7),
        "latest, read committed": dict(timestamp=-1, isolation=1),
        "empty: earliest": dict(timestamp=-2, partition=1),
        "empty: latest": dict(timestamp=-1, partition=1),
        "empty: max timestamp": dict(timestamp=-3, partition=1),
        "empty: by time": dict(timestamp=T0, partition=1),
        "a missing partition": dict(timestamp=-1, partition=2),
        "a missing topic": dict(timestamp=-1, topic=topic + "-missing"),
    }
    out = {}
    with target.wire() as wire:
        for rows in (STAMPS[:3], STAMPS[3:]):
            data = batch([Record(b"s", timestamp=ts) for ts in rows])
            assert (
                partition_answer(target, wire.call(PRODUCE, 9, produce_request(topic, 0, data)))["error_code"]
                == 0
            )
    with target.wire(-1) as wire:
        for version in versions(LIST_OFFSETS):
            for name, case in cases.items():
                out[version, name] = seen(
                    wire.call(LIST_OFFSETS, version, list_values(**{"topic": topic, **case}))
                )
        wire.call(
            21,
            2,
            {
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
                "timeout": 30_000,
            },
        )
        for version in versions(LIST_OFFSETS):
            for name in ("earliest", "max timestamp", "at the first stamp"):
                values = list_values(**{"topic": topic, **cases[name]})
                out[version, name, "after DeleteRecords"] = seen(wire.call(LIST_OFFSETS, version, values))
    return out


def test_list_offsets_at_every_version(kafka, tidelog):
    topic = unique("offsets")
    for target in (kafka, tidelog):
        make_topic(target, topic, 2)
    assert_same(listed(tidelog, topic), listed(kafka, topic))


def test_offsets_by_time_when_stamps_go_back(kafka, tidelog):
    """Kafka's time index finds the first record at or after a time; tidelog searches as
    if stamps rose with offsets, and so may answer a later record when they step back."""
    topic = unique("stamps-back")
    found = {}
    for target in (kafka, tidelog):
        make_topic(target, topic)
        with target.wire() as wire:
            data = batch([Record(b"s", timestamp=T0 + ts) for ts in (10, 30, 20, 40)])
            wire.call(PRODUCE, 9, produce_request(topic, 0, data))
            found[target.name] = [
                wire.call(LIST_OFFSETS, clip(LIST_OFFSETS, 7), list_values(topic, T0 + ts))
                .topics[0]
                .partitions[0]
                .offset
                for ts in (5, 15, 25, 35)
            ]
    assert found["kafka"] == [0, 1, 1, 3]
    differs("timestamps-rise")
    assert found[tidelog.name] == [0, 1, 3, 3]
