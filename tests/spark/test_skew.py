"""Many partitions, skewed: 64 partitions whose largest holds 100 times the
records of its smallest. maxOffsetsPerTrigger still bounds every
micro-batch, every partition gets a share of the first one (no partition
waits for the large ones to drain), and each record is read once."""

from __future__ import annotations

from collections import Counter

import pytest

import tidelog

pytestmark = pytest.mark.spark

PARTITIONS = 64
SMALLEST, LARGEST = 5, 500
MAX_PER_TRIGGER = 1500
TIMEOUT_S = 300


def sizes() -> list[int]:
    """From SMALLEST to LARGEST records, growing geometrically by partition."""
    return [round(SMALLEST * (LARGEST / SMALLEST) ** (p / (PARTITIONS - 1))) for p in range(PARTITIONS)]


def test_64_skewed_partitions_are_read_in_bounded_micro_batches_and_none_starves(spark, db, checkpoint):
    counts = sizes()
    assert (min(counts), max(counts)) == (SMALLEST, LARGEST)
    with tidelog.open(db) as log:
        log.create_topic("skewed", partitions=PARTITIONS)
        producer = log.producer()
        for p, n in enumerate(counts):
            producer.send_batch("skewed", [b"x"] * n, partition=p)

    batches: list[tuple[int, list]] = []

    def collect(df, batch_id: int) -> None:  # runs on the driver, in this process
        batches.append(
            (batch_id, [(r.partition, r.offset) for r in df.select("partition", "offset").collect()])
        )

    query = (
        spark.readStream.format("tidelog")
        .option("url", db)
        .option("subscribe", "skewed")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_PER_TRIGGER))
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(TIMEOUT_S)
    assert not query.isActive and query.exception() is None

    sizes_read = [len(rows) for _, rows in batches]
    total = sum(counts)
    print(f"{total} records in {len(batches)} micro-batches, the largest {max(sizes_read)}")
    assert max(sizes_read) <= MAX_PER_TRIGGER
    assert len(batches) >= -(-total // MAX_PER_TRIGGER)  # the bound did cut the backlog
    # No partition starves: each has records in the first micro-batch.
    assert {p for p, _ in batches[0][1]} == set(range(PARTITIONS))
    seen = Counter(pair for _, rows in batches for pair in rows)
    expected = {(p, o) for p, n in enumerate(counts) for o in range(1, n + 1)}
    assert set(seen) == expected and max(seen.values()) == 1
