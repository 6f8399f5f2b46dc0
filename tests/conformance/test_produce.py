"""Producing: offsets, partition choice, encodings, atomic batches, limits."""

from __future__ import annotations

import pytest

import tidelog
from tidelog.partitioner import partition_for_key

from .conftest import snapshot


def test_offsets_start_at_one_and_are_dense_per_partition(log):
    log.create_topic("orders", partitions=2)
    producer = log.producer()
    sent = [producer.send("orders", b"v", partition=i % 2) for i in range(10)]
    assert [s.offset for s in sent if s.partition == 0] == [1, 2, 3, 4, 5]
    assert [s.offset for s in sent if s.partition == 1] == [1, 2, 3, 4, 5]
    batch = producer.send_batch("orders", [b"a", b"b", b"c"], partition=0)
    assert (batch.first_offset, batch.count, batch.last_offset) == (6, 3, 8)
    assert [m.offset for m in log.read("orders", 0)] == list(range(1, 9))


def test_send_returns_what_was_stored(log):
    sent = log.producer().send("orders", {"orderId": 123}, key="user-7")
    assert isinstance(sent, tidelog.Sent)
    (msg,) = log.read("orders", sent.partition)
    assert (msg.topic, msg.partition, msg.offset, msg.timestamp) == tuple(sent)
    assert msg.key == b"user-7"


def test_send_to_missing_topic_creates_it(log):
    log.producer().send("fresh", b"x")
    assert log.topic("fresh").partitions == 1


def test_auto_create_off_makes_missing_topic_an_error(store):
    log = store.open(auto_create=False)
    try:
        with pytest.raises(tidelog.UnknownTopic, match="auto_create"):
            log.producer().send("fresh", b"x")
        with pytest.raises(tidelog.UnknownTopic):
            log.producer().send_batch("fresh", [b"x"])
        assert log.topics() == []
    finally:
        log.close()


@pytest.mark.parametrize(
    "value",
    [
        b"\x00\xffraw",
        b"",
        "plain text, ünïcode ✓",
        "",
        "123",  # a str that happens to be valid JSON stays a str
        {"orderId": 123, "items": [1, 2.5, None, True], "nested": {"a": "b"}},
        [1, 2, 3],
        42,
        3.25,
        True,
        None,
    ],
)
def test_values_round_trip_through_data(log, value):
    log.producer().send("values", value)
    (msg,) = log.read("values", 0)
    assert msg.data == value
    assert type(msg.data) is type(value)
    assert isinstance(msg.value, bytes)


def test_value_is_raw_bytes(log):
    producer = log.producer()
    producer.send("values", {"a": 1})
    producer.send("values", "text")
    json_msg, text_msg = log.read("values", 0)
    assert json_msg.value == b'{"a":1}'
    assert text_msg.value == b"text"
    assert (json_msg.format, text_msg.format) == ("json", "text")


def test_headers_round_trip_in_order(log):
    producer = log.producer()
    producer.send("h", b"1", headers={"trace": "abc", "bin": b"\x00\x01"})
    producer.send("h", b"2", headers=[("dup", "a"), ("dup", b"b"), ("z", "")])
    producer.send("h", b"3")
    first, second, third = log.read("h", 0)
    assert first.headers == [("trace", b"abc"), ("bin", b"\x00\x01")]
    assert second.headers == [("dup", b"a"), ("dup", b"b"), ("z", b"")]
    assert third.headers == []


def test_key_picks_a_stable_partition(log):
    log.create_topic("orders", partitions=8)
    producer = log.producer()
    for key in ["user-1", "user-2", "user-3", "a" * 50]:
        expected = partition_for_key(key.encode(), 8)
        assert {producer.send("orders", b"x", key=key).partition for _ in range(3)} == {expected}


def test_kafka_murmur2_compatibility():
    from tidelog.partitioner import murmur2

    def signed(x: int) -> int:
        return x - (1 << 32) if x >= 1 << 31 else x

    # Figures from Kafka's own partitioner tests.
    assert signed(murmur2(b"21")) == -973932308
    assert signed(murmur2(b"foobar")) == -790332482
    assert signed(murmur2(b"a-little-bit-long-string")) == -985981536


def test_sends_without_key_spread_across_partitions(log):
    log.create_topic("orders", partitions=4)
    producer = log.producer()
    assert {producer.send("orders", b"x").partition for _ in range(8)} == {0, 1, 2, 3}


def test_short_lived_producers_without_key_do_not_all_start_on_one_partition(log):
    log.create_topic("orders", partitions=4)
    # Each producer sends once, as a command-line call does; all on one
    # partition by chance has probability 4 * (1/4)**20.
    assert len({log.producer().send("orders", b"x").partition for _ in range(20)}) > 1


def test_producer_id_is_stored_and_can_be_excluded(log):
    log.create_topic("events", partitions=1)
    mine, other = log.producer(id="worker-a"), log.producer(id="worker-b")
    mine.send("events", b"1")
    other.send("events", b"2")
    log.producer().send("events", b"3")
    mine.send_batch("events", [b"4", b"5"])
    assert [m.producer for m in log.read("events", 0)] == [
        "worker-a",
        "worker-b",
        None,
        "worker-a",
        "worker-a",
    ]
    consumer = log.consumer("g")
    assert [m.value for m in consumer.fetch("events", 0, exclude_producer="worker-a")] == [b"2", b"3"]


def test_batch_with_per_record_keys_and_headers(log):
    log.create_topic("orders", partitions=1)
    log.producer().send_batch(
        "orders",
        [tidelog.NewRecord({"n": 1}, key="k1", headers={"h": "1"}), {"n": 2}, tidelog.NewRecord(b"3")],
        headers={"default": "yes"},
    )
    msgs = log.read("orders", 0)
    assert [m.data for m in msgs] == [{"n": 1}, {"n": 2}, b"3"]
    assert [m.key for m in msgs] == [b"k1", None, None]
    assert [m.headers for m in msgs] == [[("h", b"1")], [("default", b"yes")], [("default", b"yes")]]


@pytest.mark.parametrize("size", [1, 9, 10, 11, 69, 99, 100, 101, 111, 250, 1001])
def test_batches_of_any_size_store_every_record_in_order(log, size):
    # SQLite appends a batch a hundred rows a statement, then ten, and the
    # rest row by row: every size around those edges must store each
    # record, in order, with its own key when it has one.
    log.create_topic("orders", partitions=2)
    producer = log.producer()
    producer.send("orders", b"before", partition=1)
    plain = [f"p{i}".encode() for i in range(size)]
    keyed = [tidelog.NewRecord(f"k{i}", key=f"key{i}") if i % 3 else f"t{i}" for i in range(size)]
    first = producer.send_batch("orders", plain, partition=0)
    second = producer.send_batch("orders", keyed, partition=1)
    assert (first.first_offset, first.count, second.first_offset, second.count) == (1, size, 2, size)
    got = log.read("orders", 0, limit=size + 1)
    assert [(m.offset, m.value) for m in got] == [(i + 1, v) for i, v in enumerate(plain)]
    got = log.read("orders", 1, after=1, limit=size + 1)
    assert [m.offset for m in got] == list(range(2, size + 2))
    assert [m.data for m in got] == [f"k{i}" if i % 3 else f"t{i}" for i in range(size)]
    assert [m.key for m in got] == [f"key{i}".encode() if i % 3 else None for i in range(size)]


def test_a_bad_record_deep_in_a_large_batch_writes_none_of_it(log):
    log.create_topic("orders", partitions=1)
    before = snapshot(log)
    values = ["ok"] * 250
    values[180] = "\ud800"  # a lone surrogate: only binding it finds out
    with pytest.raises(tidelog.InvalidValue):
        log.producer().send_batch("orders", values)
    assert snapshot(log) == before


def test_unknown_partition_is_refused(log):
    log.create_topic("orders", partitions=2)
    before = snapshot(log)
    with pytest.raises(tidelog.UnknownPartition, match="partition 2"):
        log.producer().send("orders", b"x", partition=2)
    with pytest.raises(tidelog.UnknownPartition):
        log.producer().send_batch("orders", [b"x"], partition=9)
    with pytest.raises(tidelog.InvalidRequest):
        log.producer().send("orders", b"x", partition=-1)
    with pytest.raises(tidelog.UnknownPartition):
        log.read("orders", 5)
    assert snapshot(log) == before


def test_oversized_record_is_refused(log):
    log.create_topic("small", partitions=1, max_message_bytes=100)
    producer = log.producer()
    producer.send("small", b"x" * 100)
    before = snapshot(log)
    with pytest.raises(tidelog.MessageTooLarge, match="max_message_bytes=100"):
        producer.send("small", b"x" * 101)
    with pytest.raises(tidelog.MessageTooLarge):
        producer.send("small", "é" * 51)  # 102 bytes of UTF-8
    with pytest.raises(tidelog.MessageTooLarge):
        producer.send("small", b"x" * 90, key=b"k" * 20)
    assert snapshot(log) == before


def test_default_limit_is_one_mebibyte(log):
    producer = log.producer()
    producer.send("big", b"x" * (1 << 20))
    with pytest.raises(tidelog.MessageTooLarge):
        producer.send("big", b"x" * ((1 << 20) + 1))


class NotJson:
    pass


@pytest.mark.parametrize(
    "value", [NotJson(), {"a": NotJson()}, float("nan"), {1j: 2}, {"s": {1, 2}}, "\ud800", {"k": "\udfff"}]
)
def test_unencodable_values_are_refused(log, value):
    log.create_topic("orders", partitions=1)
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidValue):
        log.producer().send("orders", value)
    assert snapshot(log) == before


@pytest.mark.parametrize(
    "kwargs",
    [
        {"key": 1.5},
        {"key": ["list"]},
        {"headers": {"h": 5}},
        {"headers": {7: "v"}},
        {"headers": [("only-one",)]},
        {"headers": "not headers"},
        {"key": "\ud800"},
        {"headers": {"h": "\ud800"}},
    ],
)
def test_bad_keys_and_headers_are_refused(log, kwargs):
    log.create_topic("orders", partitions=1)
    before = snapshot(log)
    with pytest.raises(tidelog.InvalidValue):
        log.producer().send("orders", b"x", **kwargs)
    assert snapshot(log) == before


def test_batch_is_all_or_nothing(log):
    log.create_topic("orders", partitions=1, max_message_bytes=10)
    producer = log.producer()
    producer.send("orders", b"first")
    before = snapshot(log)
    with pytest.raises(tidelog.MessageTooLarge, match="record 2"):
        producer.send_batch("orders", [b"ok", b"ok", b"x" * 11, b"ok"])
    with pytest.raises(tidelog.InvalidValue):
        producer.send_batch("orders", [{"a": 1}, NotJson()])
    with pytest.raises(tidelog.InvalidRequest):
        producer.send_batch("orders", [])
    assert snapshot(log) == before
    assert producer.send_batch("orders", [b"a", b"b"]).first_offset == 2


def test_read_after_and_limit(log):
    producer = log.producer()
    producer.send_batch("orders", [str(i) for i in range(1, 251)])
    assert len(log.read("orders", 0)) == 100  # default limit
    page = log.read("orders", 0, after=10, limit=5)
    assert [m.offset for m in page] == [11, 12, 13, 14, 15]
    assert [m.data for m in page] == ["11", "12", "13", "14", "15"]
    assert log.read("orders", 0, after=250) == []
    with pytest.raises(tidelog.InvalidRequest):
        log.read("orders", 0, after=-1)
    with pytest.raises(tidelog.InvalidRequest):
        log.read("orders", 0, limit=0)


def test_messages_are_comparable_and_picklable(log):
    import pickle

    log.producer().send("a", b"x")
    log.producer().send("b", b"x")
    (ma,) = log.read("a", 0)
    (mb,) = log.read("b", 0)
    assert ma != mb  # same offset and payload, other topic
    clone = pickle.loads(pickle.dumps(ma))
    assert clone == ma and clone.topic == "a" and clone.data == b"x"


def test_group_commit_writes_several_batches_at_once(log):
    log.create_topic("a", partitions=2)
    producer = log.producer()
    producer.send("a", b"x", partition=1)
    prepared = [
        producer.prepare("a", [b"1", b"2"], partition=0),
        producer.prepare("a", [{"n": 3}], partition=1),
        producer.prepare("b", ["text"], partition=0),
        producer.prepare("a", [b"4"], partition=0),
    ]
    sent = log.write(prepared)
    assert [(s.topic, s.partition, s.first_offset, s.count) for s in sent] == [
        ("a", 0, 1, 2),
        ("a", 1, 2, 1),
        ("b", 0, 1, 1),
        ("a", 0, 3, 1),
    ]
    assert len({s.timestamp for s in sent}) == 1
    assert [m.value for m in log.read("a", 0)] == [b"1", b"2", b"4"]


def test_group_commit_is_all_or_nothing(store):
    log = store.open(auto_create=False)  # else the write would make "doomed" again
    producer = log.producer()
    log.create_topic("keep", partitions=1)
    log.create_topic("doomed", partitions=1)
    prepared = [producer.prepare("keep", [b"1"]), producer.prepare("doomed", [b"2"])]
    other = store.open()
    try:
        other.delete_topic("doomed")
    finally:
        other.close()
    before = snapshot(log)
    with pytest.raises(tidelog.UnknownTopic, match="doomed"):
        log.write(prepared)
    assert snapshot(log) == before
    assert log.read("keep", 0) == []
    log.close()


def test_a_send_to_a_topic_deleted_elsewhere_writes_nothing(store):
    log = store.open(auto_create=False)  # else the send would make "doomed" again
    producer = log.producer()
    log.create_topic("doomed", partitions=1)
    producer.send("doomed", b"1", partition=0)  # its partition id is cached now
    log.create_topic("later", partitions=1)  # a partition id past the doomed one's
    producer.send("later", b"2", partition=0)
    other = store.open()
    try:
        other.delete_topic("doomed")
    finally:
        other.close()
    for kwargs in ({}, {"key": "k"}):  # a record without and with meta
        with pytest.raises(tidelog.UnknownTopic, match="doomed"):
            producer.send("doomed", b"3", partition=0, **kwargs)
    assert [(m.offset, m.value) for m in log.read("later", 0)] == [(1, b"2")]
    assert [t.name for t in log.topics()] == ["later"]
    log.close()


def test_text_with_nul_round_trips(log):
    producer = log.producer()
    producer.send("nul", "a\x00b")
    producer.send_batch("nul", ["c\x00", b"\x00", "plain", {"j": "\x00"}])
    producer.send_batch("nul", ["\x00", "d"])
    msgs = log.read("nul", 0)
    assert [m.data for m in msgs] == ["a\x00b", "c\x00", b"\x00", "plain", {"j": "\x00"}, "\x00", "d"]
    assert [m.format for m in msgs] == ["text", "text", "bytes", "text", "json", "text", "text"]
    assert [m.data for m in log.read("nul", 0, after=5)] == ["\x00", "d"]


def test_reads_follow_values_of_either_kind(log):
    producer = log.producer()
    producer.send_batch("k", [b"1", b"2"])
    assert [m.data for m in log.read("k", 0)] == [b"1", b"2"]
    producer.send_batch("k", ["3", {"n": 4}])
    assert [m.data for m in log.read("k", 0, after=2)] == ["3", {"n": 4}]
    assert [m.data for m in log.read("k", 0, after=3)] == [{"n": 4}]
    producer.send("k", "5\x00")
    producer.send("k", b"6")
    assert [m.data for m in log.read("k", 0, after=3)] == [{"n": 4}, "5\x00", b"6"]
    assert [m.data for m in log.read("k", 0)] == [b"1", b"2", "3", {"n": 4}, "5\x00", b"6"]
    assert [m.data for m in log.read("k", 0, after=5)] == [b"6"]
    assert [m.data for m in log.read("k", 0, after=4, limit=1)] == ["5\x00"]
    assert [m.format for m in log.read("k", 0)] == ["bytes", "bytes", "text", "json", "text", "bytes"]


def test_prepared_batch_may_carry_its_timestamp(log):
    producer = log.producer()
    stamped = producer.prepare("t", [b"1"])._replace(timestamp=1_234)
    sent = log.write([stamped, producer.prepare("t", [b"2"])])
    assert sent[0].timestamp == 1_234
    assert sent[1].timestamp != 1_234
    assert [m.timestamp for m in log.read("t", 0)] == [1_234, sent[1].timestamp]
