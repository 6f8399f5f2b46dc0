"""Writing DataFrames and streams into topics, and replays that must not duplicate."""

from __future__ import annotations

import os

import pytest

import tidelog
from tidelog.log import partition_for_key

pytestmark = pytest.mark.spark


def records(db, topic):
    with tidelog.open(db) as log:
        parts = log.describe(topic).partitions
        return [m for p in parts for m in log.read(topic, p.partition, limit=100_000)]


def save(df, db, **options):
    writer = df.write.format("tidelog").option("url", db).mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def test_batch_write_appends_every_row_once(spark, db):
    with tidelog.open(db) as log:
        log.create_topic("numbers", partitions=3)
    df = spark.range(0, 2000, numPartitions=4).selectExpr("CAST(CAST(id AS STRING) AS BINARY) AS value")
    save(df, db, topic="numbers")
    got = records(db, "numbers")
    assert sorted(int(m.value) for m in got) == list(range(2000))
    assert all(m.format == "bytes" and m.key is None for m in got)
    # Each partition's offsets stay dense: 1..n.
    with tidelog.open(db) as log:
        for p in log.describe("numbers").partitions:
            assert [m.offset for m in log.read("numbers", p.partition, limit=10_000)] == list(
                range(1, p.records + 1)
            )


def test_batch_write_takes_key_headers_partition_and_topic_columns(spark, db):
    with tidelog.open(db) as log:
        log.create_topic("keyed", partitions=4)
        log.create_topic("pinned", partitions=2)
    rows = [
        ("a", "user-1", [("trace", b"1")], None, "keyed"),
        ("b", "user-2", None, None, "keyed"),
        ("c", None, [("h", b"x"), ("h", b"y")], 1, "pinned"),
        ("d", None, None, None, None),  # no topic column value: the option's topic
    ]
    df = spark.createDataFrame(
        rows,
        "value string, key string, headers array<struct<key: string, value: binary>>, partition int, topic string",
    )
    save(df, db, topic="fallback")
    keyed = {m.data: m for m in records(db, "keyed")}
    assert set(keyed) == {"a", "b"}
    for value, key in (("a", b"user-1"), ("b", b"user-2")):
        assert keyed[value].key == key
        assert keyed[value].partition == partition_for_key(key, 4)
        assert keyed[value].format == "text"  # a string column writes text records
    assert keyed["a"].headers == [("trace", b"1")]
    (pinned,) = records(db, "pinned")
    assert (pinned.partition, pinned.data, pinned.headers) == (1, "c", [("h", b"x"), ("h", b"y")])
    assert [m.data for m in records(db, "fallback")] == ["d"]


@pytest.mark.parametrize(
    ("select", "options", "mode", "message"),
    [
        ("CAST(id AS STRING) AS key", {"topic": "t"}, "append", "column value"),
        ("CAST(id AS STRING) AS value, id AS extra", {"topic": "t"}, "append", "unknown column"),
        ("CAST(id AS STRING) AS value", {}, "append", "option topic"),
        ("CAST(id AS STRING) AS value", {"topic": "t"}, "overwrite", "only appends"),
        ("CAST(NULL AS BINARY) AS value", {"topic": "t"}, "append", "value is null"),
        ("CAST(id AS STRING) AS value", {"topic": "t", "colour": "red"}, "append", "unknown option"),
        (
            "CAST(id AS STRING) AS value, 'yaml' AS format",
            {"topic": "t"},
            "append",
            "column format is 'yaml'",
        ),
        ("'{' AS value, 'json' AS format", {"topic": "t"}, "append", "not JSON"),
        ("CAST(id AS STRING) AS value, id AS format", {"topic": "t"}, "append", "column format must be"),
    ],
)
def test_bad_writes_are_refused_and_write_nothing(spark, db, select, options, mode, message):
    with tidelog.open(db) as log:
        log.create_topic("t")
    writer = (
        spark.range(3).selectExpr(*select.split(", ")).write.format("tidelog").option("url", db).mode(mode)
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception, match=message):
        writer.save()
    assert records(db, "t") == []


def test_a_format_column_writes_each_value_back_as_the_kind_it_was_read(spark, db):
    # Issue 38: the guide's df.select("value") turned a JSON record into bytes after a
    # round trip; with includeFormat the source says each value's kind, and the sink keeps it.
    with tidelog.open(db) as log:
        producer = log.producer()
        for value in ({"orderId": 1}, "plain text", b"\xffraw", [1, 2]):
            producer.send("sent", value)
    read = spark.read.format("tidelog").option("url", db).option("subscribe", "sent").load()
    save(read.select("value"), db, topic="as-bytes")
    both = (
        spark.read.format("tidelog")
        .option("url", db)
        .option("subscribe", "sent")
        .option("includeFormat", "true")
    )
    save(both.load().select("value", "format"), db, topic="as-sent")
    assert [m.format for m in records(db, "as-bytes")] == ["bytes"] * 4
    copied = records(db, "as-sent")
    assert [(m.format, m.data) for m in copied] == [(m.format, m.data) for m in records(db, "sent")]
    assert [m.data for m in copied] == [{"orderId": 1}, "plain text", b"\xffraw", [1, 2]]


def stream_copy(spark, db, checkpoint):
    """Copy topic "in" to topic "out" as record ids, with Trigger.AvailableNow."""
    query = (
        spark.readStream.format("tidelog")
        .option("url", db)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50")
        .load()
        .selectExpr("key", "concat(partition, ':', offset) AS value")
        .writeStream.format("tidelog")
        .option("url", db)
        .option("topic", "out")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert not query.isActive and query.exception() is None
    return query


def test_stream_write_copies_each_record_once(spark, db, checkpoint):
    with tidelog.open(db) as log:
        log.create_topic("in", partitions=2)
        log.create_topic("out", partitions=2)
        producer = log.producer()
        for i in range(120):
            producer.send("in", b"x", key=f"user-{i % 9}")
    stream_copy(spark, db, checkpoint)
    out = records(db, "out")
    assert len(out) == 120 and len({m.data for m in out}) == 120
    for m in out:  # the key came along and chose the same partition again
        assert m.partition == partition_for_key(m.key, 2)


def test_a_replayed_micro_batch_is_not_appended_twice(spark, db, checkpoint):
    with tidelog.open(db) as log:
        log.create_topic("in", partitions=2)
        log.producer().send_batch("in", [b"x"] * 60, partition=0)
        log.producer().send_batch("in", [b"y"] * 40, partition=1)
    stream_copy(spark, db, checkpoint)
    assert len(records(db, "out")) == 100
    # Forget that the last micro-batch finished, as a crash between the sink's
    # write and Spark's commit log would: Spark runs that batch again.
    commits = os.path.join(checkpoint, "commits")
    last = max(int(name) for name in os.listdir(commits) if name.isdigit())
    for name in (str(last), f".{last}.crc"):  # the entry and Hadoop's checksum beside it
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    query = stream_copy(spark, db, checkpoint)
    replayed = [p for p in query.recentProgress if p["batchId"] == last]
    assert replayed and replayed[0]["numInputRows"] > 0  # the batch really ran again
    out = records(db, "out")
    assert len(out) == 100 and len({m.data for m in out}) == 100


@pytest.fixture
def pg_db():
    from pgschema import postgres_schema

    with postgres_schema() as url:
        yield url


def test_a_replayed_micro_batch_is_not_appended_twice_on_postgres(spark, pg_db, checkpoint):
    # The same replay over a log on PostgreSQL: the sink's txn ids are
    # recorded there, and the source reads the same offsets again.
    test_a_replayed_micro_batch_is_not_appended_twice(spark, pg_db, checkpoint)
