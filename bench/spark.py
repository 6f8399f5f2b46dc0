"""Spark benchmark: format "tidelog" beside plain Python doing the same work.

Prints figures, never passes or fails. Reads N records of 100 bytes from a
4-partition SQLite topic into Spark on local[2] (a noop sink, so every
column reaches the JVM), after one warm-up, next to a plain-Python read of
the same records with `Log.read`; then writes N records through the sink
next to a plain-Python `Log.write` of the same records.

    python bench/spark.py [--records 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable

import tidelog
import tidelog.spark

VALUE = os.urandom(100)
PARTITIONS = 4
CHUNK = 10_000


def best_pair(runs: int, plain: Callable[[], int], spark: Callable[[], int], n: int) -> tuple[float, float]:
    """Best seconds of each over `runs` rounds, alternating the two so that
    both see the same load on a shared machine."""
    plain_s, spark_s = [], []
    for _ in range(runs):
        for fn, times in ((plain, plain_s), (spark, spark_s)):
            start = time.perf_counter()
            seen = fn()
            times.append(time.perf_counter() - start)
            assert seen == n, f"saw {seen} records, not {n}"
    return min(plain_s), min(spark_s)


def fill(url: str, topic: str, n: int) -> None:
    with tidelog.open(url) as log:
        log.create_topic(topic, partitions=PARTITIONS)
        producer = log.producer()
        per = n // PARTITIONS
        for p in range(PARTITIONS):
            for lo in range(0, per, CHUNK):
                producer.send_batch(topic, [VALUE] * min(CHUNK, per - lo), partition=p)


def python_read(url: str, topic: str) -> int:
    seen = 0
    with tidelog.open(url) as log:
        for p in range(PARTITIONS):
            after = 0
            while page := log.read(topic, p, after=after, limit=100_000):
                seen += len(page)
                after = page[-1].offset
    return seen


def python_write(url: str, topic: str, n: int) -> int:
    with tidelog.open(url) as log:
        log.create_topic(topic, partitions=PARTITIONS)
        producer = log.producer()
        for lo in range(0, n, CHUNK):
            producer.send_batch(topic, [VALUE] * min(CHUNK, n - lo))
        return log.describe(topic).records


def spark_read(spark, url: str, topic: str) -> int:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    seen = Observation("seen")
    df = spark.read.format("tidelog").option("url", url).option("subscribe", topic).load()
    # Every column reaches the JVM; the observation counts rows on the way.
    df.observe(seen, F.count(F.lit(1)).alias("rows")).write.format("noop").mode("overwrite").save()
    return seen.get["rows"]


def python_count(url: str, topic: str) -> int:
    with tidelog.open(url) as log:
        return log.describe(topic).records


def spark_write(spark, source, url: str, topic: str) -> int:
    with tidelog.open(url) as log:
        log.create_topic(topic, partitions=PARTITIONS)
    source.write.format("tidelog").option("url", url).option("topic", topic).mode("append").save()
    return python_count(url, topic)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    n = args.records
    tmp = tempfile.mkdtemp(prefix="tidelog-bench-spark-")
    try:
        url = os.path.join(tmp, "bench.db")
        fill(url, "in", n)
        spark = tidelog.spark.session(
            "local[2]",
            "tidelog-bench",
            **{
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "2",
            },
        )
        spark.sparkContext.setLogLevel("ERROR")

        spark_read(spark, url, "in")  # warm-up: Python workers start, the JIT warms
        py_read_s, sp_read_s = best_pair(
            args.runs, lambda: python_read(url, "in"), lambda: spark_read(spark, url, "in"), n
        )

        # The sink's input: the same 100-byte values, made in Spark.
        source = spark.range(0, n, numPartitions=2).selectExpr(f"unhex('{VALUE.hex()}') AS value")
        spark_write(spark, source, url, "warm-up")
        runs = iter(range(1_000_000))
        py_write_s, sp_write_s = best_pair(
            args.runs,
            lambda: python_write(url, f"py-out-{next(runs)}", n),
            lambda: spark_write(spark, source, url, f"sp-out-{next(runs)}"),
            n,
        )
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"records: {n:,} of {len(VALUE)} bytes, {PARTITIONS} partitions, local[2], best of {args.runs}")
    print(f"| {'work':<38} | {'records/s':>11} | {'vs plain Python':>15} |")
    print(f"| {'-' * 38} | {'-' * 11}: | {'-' * 15}: |")
    rows = [
        ("read, plain Python (Log.read)", n / py_read_s, None),
        ("read into Spark (noop sink)", n / sp_read_s, py_read_s / sp_read_s),
        ("write, plain Python (Log.write)", n / py_write_s, None),
        ("write through the Spark sink", n / sp_write_s, py_write_s / sp_write_s),
    ]
    for name, rate, ratio in rows:
        print(f"| {name:<38} | {rate:>11,.0f} | {'' if ratio is None else f'{ratio:.2f}':>15} |")


if __name__ == "__main__":
    main()
