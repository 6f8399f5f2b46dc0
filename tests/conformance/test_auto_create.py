"""The topic policy in the Python API, on every store: writes create a
missing topic (auto_create, on by default), reads never do, and a refused
write creates nothing."""

from __future__ import annotations

import pytest

import tidelog

from .conftest import snapshot


def names(log: tidelog.Log) -> list[str]:
    return [t.name for t in log.topics()]


def test_every_write_creates_a_missing_topic_with_the_default_partitions(store):
    with store.open(default_partitions=3) as log:
        producer = log.producer()
        assert producer.send("one", b"x").partition in (0, 1, 2)
        producer.send_batch("batch", [1, 2], partition=2)
        log.write([producer.prepare("prepared", [b"y"], partition=1)])
        assert sorted(names(log)) == ["batch", "one", "prepared"]
        assert {log.topic(t).partitions for t in names(log)} == {3}
        assert [m.data for m in log.read("batch", 2)] == [1, 2]
        assert log.topic("one").config == log.create_topic("explicit").config  # default settings


def test_reads_never_create_a_topic(store, log):
    before = snapshot(log)
    consumer = log.consumer("g")
    reads = [
        lambda: log.read("missing", 0),
        lambda: list(log.iter("missing", 0)),
        lambda: log.describe("missing"),
        lambda: log.topic("missing"),
        lambda: consumer.fetch("missing", 0),
        lambda: consumer.committed("missing", 0),
        lambda: log.wait_for_records("missing", 0, 0, 0),
    ]
    for read in reads:
        with pytest.raises(tidelog.UnknownTopic, match="missing"):
            read()
    assert "missing" not in names(log)
    assert snapshot(log)[0] == before[0]


def test_auto_create_off_refuses_every_write_and_writes_nothing(store):
    with store.open(auto_create=False) as log:
        producer = log.producer()
        for write in (
            lambda: producer.send("missing", 1),
            lambda: producer.send_batch("missing", [1]),
            lambda: log.write([producer.prepare("missing", [1])]),
            lambda: log.queue("missing"),
        ):
            with pytest.raises(tidelog.UnknownTopic, match="auto_create is off"):
                write()
        assert names(log) == []


def test_a_refused_write_creates_no_topic(store, log):
    producer = log.producer()
    refused = [
        (lambda: producer.send("missing", "x" * (2 << 20)), tidelog.MessageTooLarge),
        (lambda: producer.send("missing", 1, partition=1), tidelog.UnknownPartition),
        (lambda: producer.send_batch("missing", [1, object()]), tidelog.InvalidValue),
        (lambda: producer.send_batch("missing", []), tidelog.InvalidRequest),
        (lambda: producer.send("missing", 1, headers=[("h", 5)]), tidelog.InvalidValue),
        (lambda: producer.send("bad name", 1), tidelog.InvalidName),
        (lambda: producer.send("x" * 201, 1), tidelog.InvalidName),
    ]
    for write, error in refused:
        with pytest.raises(error):
            write()
    assert names(log) == []


def test_an_implicit_name_is_checked_as_an_explicit_create(log):
    for name in ("bad name", "", "a/b", "é"):
        with pytest.raises(tidelog.InvalidName) as implicit:
            log.producer().send(name, 1)
        with pytest.raises(tidelog.InvalidName) as explicit:
            log.create_topic(name)
        assert str(implicit.value) == str(explicit.value)
    assert names(log) == []


def test_a_write_to_a_topic_deleted_elsewhere_makes_it_again(store, log):
    producer = log.producer()
    producer.send("t", 1)
    producer.send_batch("u", [1])
    with store.open() as other:
        other.delete_topic("t")
        other.delete_topic("u")
    assert producer.send("t", 2).offset == 1  # the cached topic was gone: made afresh
    assert producer.send_batch("u", [2]).first_offset == 1
    assert [m.data for m in log.read("t", 0)] == [2]
