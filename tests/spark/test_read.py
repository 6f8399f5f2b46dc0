"""Reading topics into Spark: batch reads and Structured Streaming."""

from __future__ import annotations

import json

import pytest

import tidelog

pytestmark = pytest.mark.spark


def fill(db, topic="t", counts=(5, 3, 2), **send):
    """counts[p] records in partition p: value b"<p>-<i>", offsets 1..counts[p]."""
    with tidelog.open(db) as log:
        log.create_topic(topic, partitions=len(counts))
        producer = log.producer()
        for p, n in enumerate(counts):
            if n:
                producer.send_batch(
                    topic, [f"{p}-{i}".encode() for i in range(1, n + 1)], partition=p, **send
                )


def read(spark, db, **options):
    reader = spark.read.format("tidelog").option("url", db)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def triples(rows):
    return sorted((r.topic, r.partition, r.offset) for r in rows)


def test_register_refuses_a_python_that_lacks_tidelog(spark, db, monkeypatch, tmp_path):
    import tidelog.spark

    bare = tmp_path / "bare-python"
    bare.write_text("#!/bin/sh\nexit 1\n")  # stands for an interpreter without tidelog
    bare.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(bare))
    with pytest.raises(tidelog.ConfigurationError, match="cannot import tidelog.spark"):
        tidelog.spark.register(spark)
    monkeypatch.delenv("PYSPARK_PYTHON")
    tidelog.spark.register(spark)  # back to this interpreter, which has it
    fill(db, counts=(1,))
    assert read(spark, db, subscribe="t").count() == 1


def test_batch_read_gives_every_record_in_kafkas_schema(spark, db):
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
    with tidelog.open(db, clock=lambda: next(clock)) as log:
        log.create_topic("orders", partitions=2)
        producer = log.producer()
        producer.send(
            "orders", b"\x00raw", key="user-1", partition=0, headers=[("trace", "a"), ("trace", b"b")]
        )
        producer.send("orders", {"n": 1}, partition=1)
        producer.send("orders", "plain text", partition=1, key=b"k")
        expected = {(m.partition, m.offset): m for p in (0, 1) for m in log.read("orders", p)}
    df = read(spark, db, subscribe="orders", includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = df.collect()
    assert len(rows) == 3
    for row in rows:
        msg = expected[(row.partition, row.offset)]
        assert row.topic == "orders"
        assert row.key == msg.key and row.value == msg.value
        # Spark gives a naive datetime in the session's (here the machine's) time zone.
        assert round(row.timestamp.timestamp() * 1000) == msg.timestamp
        assert row.timestampType == 1
        assert [(h.key, h.value) for h in row.headers or []] == msg.headers
    assert {r.value for r in rows} == {b"\x00raw", b'{"n":1}', b"plain text"}
    without = read(spark, db, subscribe="orders")
    assert "headers" not in without.columns and without.count() == 3


def test_batch_read_between_starting_and_ending_offsets(spark, db):
    fill(db, counts=(6, 4, 3))
    df = read(
        spark,
        db,
        subscribe="t",
        startingOffsets=json.dumps({"t": {"0": 3, "1": -2}}),
        endingOffsets=json.dumps({"t": {"0": 6, "1": 3}}),
    )
    got = triples(df.collect())
    # 0: offsets 3, 4, 5 (end exclusive); 1: 1, 2; 2: not named, so earliest to latest.
    assert got == [("t", 0, 3), ("t", 0, 4), ("t", 0, 5), ("t", 1, 1), ("t", 1, 2)] + [
        ("t", 2, o) for o in (1, 2, 3)
    ]


def test_min_partitions_splits_long_partitions_without_losing_a_record(spark, db):
    fill(db, counts=(90, 10))
    df = read(spark, db, subscribe="t", minPartitions="6")
    assert df.rdd.getNumPartitions() >= 6
    rows = df.collect()
    assert triples(rows) == [("t", 0, o) for o in range(1, 91)] + [("t", 1, o) for o in range(1, 11)]


def test_starting_timestamp_picks_the_first_record_at_or_after_it(spark, db):
    stamps = iter([1000, 2000, 3000, 4000, 5000, 6000])
    with tidelog.open(db, clock=lambda: next(stamps)) as log:
        log.create_topic("t", partitions=2)
        producer = log.producer()
        for i in range(6):
            producer.send("t", b"x", partition=i % 2)  # p0: 1000, 3000, 5000; p1: 2000, 4000, 6000
    df = read(spark, db, subscribe="t", startingTimestamp="3500")
    assert triples(df.collect()) == [("t", 0, 3), ("t", 1, 2), ("t", 1, 3)]


def test_pattern_and_assign_choose_the_partitions(spark, db):
    fill(db, "orders.eu", counts=(1, 1))
    fill(db, "orders.us", counts=(1,))
    fill(db, "refunds", counts=(1,))
    pattern = read(spark, db, subscribePattern=r"orders\..*")
    assert triples(pattern.collect()) == [("orders.eu", 0, 1), ("orders.eu", 1, 1), ("orders.us", 0, 1)]
    assign = read(spark, db, assign=json.dumps({"orders.eu": [1], "refunds": [0]}))
    assert triples(assign.collect()) == [("orders.eu", 1, 1), ("refunds", 0, 1)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of"),
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "exactly one of"),
        ({"subscribe": "t", "maxOffsetPerTrigger": "5"}, "unknown option"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "streaming queries only"),
        ({"subscribe": "t", "endingOffsets": '{"t": {"0": 99}}'}, "past its end"),
        ({"subscribe": "t", "minPartitions": "zero"}, "must be an integer"),
        ({"subscribe": "missing"}, "does not exist"),
        ({"subscribe": "bad name!"}, "invalid topic name"),
    ],
)
def test_bad_options_fail_with_a_message_that_names_the_problem(spark, db, options, message):
    fill(db, counts=(2,))
    with pytest.raises(Exception, match=message):
        read(spark, db, **options).collect()


# streaming -----------------------------------------------------------------------


def run_available_now(spark, db, checkpoint, name, **options):
    """Run a query with Trigger.AvailableNow into a memory table; return its progress."""
    reader = spark.readStream.format("tidelog").option("url", db)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert not query.isActive, "the AvailableNow query did not finish"
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"]]


def test_stream_admits_max_offsets_per_trigger_in_proportion_to_backlog(spark, db, checkpoint):
    fill(db, counts=(60, 30, 10))
    progress = run_available_now(
        spark,
        db,
        checkpoint,
        "admission",
        subscribe="t",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="20",
    )
    assert [p["numInputRows"] for p in progress] == [20] * 5
    first_end = json.loads(progress[0]["sources"][0]["endOffset"])
    assert first_end == {"t": {"0": 13, "1": 7, "2": 3}}  # 12 + 6 + 2 of 60 : 30 : 10
    rows = spark.table("admission").collect()
    assert triples(rows) == sorted(("t", p, o) for p, n in enumerate((60, 30, 10)) for o in range(1, n + 1))


def copy_available_now(spark, db, checkpoint, **options):
    """Stream a topic's record ids into topic "copy" (a sink that can restart), AvailableNow."""
    reader = spark.readStream.format("tidelog").option("url", db)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .selectExpr("concat(topic, ':', partition, ':', offset) AS value")
        .writeStream.format("tidelog")
        .option("url", db)
        .option("topic", "copy")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert not query.isActive and query.exception() is None
    with tidelog.open(db) as log:
        return sorted(m.data for m in log.read("copy", 0, limit=10_000))


def test_available_now_stops_at_what_was_there_when_it_started(spark, db, checkpoint):
    # The query copies topic t into t itself: every micro-batch appends records
    # that a query without a fixed target would go on to read.
    fill(db, counts=(6, 4))
    query = (
        spark.readStream.format("tidelog")
        .option("url", db)
        .option("subscribe", "t")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "3")
        .load()
        .selectExpr("CAST(concat('copy-', partition, ':', offset) AS BINARY) AS value", "partition")
        .writeStream.format("tidelog")
        .option("url", db)
        .option("topic", "t")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert not query.isActive and query.exception() is None
    assert sum(p["numInputRows"] for p in query.recentProgress) == 10
    with tidelog.open(db) as log:
        values = sorted(m.value for p in (0, 1) for m in log.read("t", p))
    copies = [v for v in values if v.startswith(b"copy-")]
    assert copies == sorted(f"copy-{p}:{o}".encode() for p, n in ((0, 6), (1, 4)) for o in range(1, n + 1))


def test_stream_restarts_where_its_checkpoint_ended_and_reads_new_partitions(spark, db, checkpoint):
    fill(db, counts=(3, 2))
    first = copy_available_now(spark, db, checkpoint, subscribe="t", startingOffsets="earliest")
    assert first == ["t:0:1", "t:0:2", "t:0:3", "t:1:1", "t:1:2"]
    with tidelog.open(db) as log:
        producer = log.producer()
        producer.send_batch("t", [b"late-0"], partition=0)
        log.add_partitions("t", 3)
        producer.send_batch("t", [b"new-1", b"new-2"], partition=2)
    both = copy_available_now(spark, db, checkpoint, subscribe="t", startingOffsets="earliest")
    assert both == sorted(first + ["t:0:4", "t:2:1", "t:2:2"])


def test_a_stream_whose_records_vanished_fails_unless_told_to_go_on(spark, db, checkpoint):
    fill(db, counts=(5,))
    copy_available_now(spark, db, checkpoint, subscribe="t", startingOffsets="earliest")
    with tidelog.open(db) as log:
        log.delete_topic("t")  # the query's position (offset 6) no longer exists
    fill(db, counts=(2,))
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        copy_available_now(spark, db, checkpoint, subscribe="t")
    # Told to go on, the query runs; the partition resumes once it passes offset 6 again.
    with tidelog.open(db) as log:
        log.producer().send_batch("t", [b"x"] * 5, partition=0)
    copied = copy_available_now(spark, db, checkpoint, subscribe="t", failOnDataLoss="false")
    assert copied == ["t:0:1", "t:0:2", "t:0:3", "t:0:4", "t:0:5", "t:0:6", "t:0:7"]


def test_stream_starts_at_the_latest_records_by_default(spark, db, checkpoint):
    fill(db, counts=(4,))
    progress = run_available_now(spark, db, checkpoint, "from_latest", subscribe="t")
    assert progress == []
    assert spark.table("from_latest").count() == 0


def test_stream_commits_its_progress_to_a_group(spark, db, checkpoint):
    fill(db, counts=(7, 5))
    run_available_now(
        spark,
        db,
        checkpoint,
        "grouped",
        subscribe="t",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="4",
        group="revenue-job",
    )
    with tidelog.open(db) as log:
        lag = {(g.partition): (g.committed, g.lag) for g in log.describe_group("revenue-job")}
    assert lag == {0: (7, 0), 1: (5, 0)}
