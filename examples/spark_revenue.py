"""Revenue per country per minute: a Structured Streaming pipeline over tidelog.

    python examples/spark_revenue.py --db shop.db --orders 5000   # make orders, run, print
    python examples/spark_revenue.py --db shop.db --orders 2000   # more orders: resumes from the checkpoint

Topic `orders` holds JSON orders {"order_id", "country", "amount_cents",
"ordered_at" (ms since epoch)}. The job parses them, sums revenue per
country per one-minute window of order time, with a two-minute watermark
for orders that arrive late, and writes each closed window once to topic
`revenue` (a JSON record keyed by country) and to Parquet files. Both
outputs are exactly once: stop the job at any point and run it again with
the same checkpoint directory, and it carries on where it stopped.

Needs `pip install 'tidelog[spark]'` and Java 17 or newer.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import signal
import threading
from typing import Any

import tidelog

ORDERS = "orders"
REVENUE = "revenue"
COUNTRIES = ("DE", "FR", "NL", "PL", "SE")
WINDOW = "1 minute"
WATERMARK = "2 minutes"
ORDER_SCHEMA = "order_id LONG, country STRING, amount_cents LONG, ordered_at LONG"


def produce_orders(url: str, count: int, *, start_ms: int, seed: int = 7, first_id: int = 1) -> list[dict]:
    """Send `count` orders, about five a second of order time from `start_ms`,
    some a little out of order (never by more than the watermark allows)."""
    rng = random.Random(seed)
    orders = []
    for i in range(count):
        orders.append(
            {
                "order_id": first_id + i,
                "country": rng.choice(COUNTRIES),
                "amount_cents": rng.randrange(100, 20_000),
                "ordered_at": start_ms + i * 200 + rng.randrange(-5_000, 5_000),
            }
        )
    with tidelog.open(url) as log:
        log.create_topic(ORDERS, partitions=4)
        producer = log.producer()
        for order in orders:
            producer.send(ORDERS, order, key=order["country"])
    return orders


def revenue_stream(spark: Any, url: str, max_per_trigger: int = 2000) -> Any:
    """Closed one-minute windows: minute (epoch seconds), country, revenue_cents, orders."""
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("tidelog")
        .option("url", url)
        .option("subscribe", ORDERS)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_per_trigger)
        .load()
        .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
        .select("o.*")
        .withColumn("order_time", F.timestamp_millis("ordered_at"))
    )
    return (
        orders.withWatermark("order_time", WATERMARK)
        .groupBy(F.window("order_time", WINDOW), "country")
        .agg(F.sum("amount_cents").alias("revenue_cents"), F.count("*").alias("orders"))
        .select(
            F.col("window.start").cast("long").alias("minute"),
            "country",
            "revenue_cents",
            "orders",
        )
    )


def start(spark: Any, url: str, checkpoint: str, parquet: str, *, available_now: bool = True) -> list[Any]:
    """Start the two outputs; each has its own checkpoint and runs exactly once."""
    from pyspark.sql import functions as F

    revenue = revenue_stream(spark, url)
    to_topic = (
        revenue.select(
            F.col("country").alias("key"),
            F.to_json(F.struct("minute", "country", "revenue_cents", "orders")).alias("value"),
        )
        .writeStream.format("tidelog")
        .outputMode("append")  # a window is written once, when the watermark closes it
        .option("url", url)
        .option("topic", REVENUE)
        .option("checkpointLocation", os.path.join(checkpoint, "topic"))
    )
    to_parquet = (
        revenue.writeStream.format("parquet")
        .outputMode("append")
        .option("path", parquet)
        .option("checkpointLocation", os.path.join(checkpoint, "parquet"))
    )
    queries = []
    for writer in (to_topic, to_parquet):
        if available_now:
            writer = writer.trigger(availableNow=True)
        queries.append(writer.start())
    return queries


def expected_revenue(orders: list[dict], watermark_ms: int) -> dict[tuple[int, str], tuple[int, int]]:
    """The same numbers in plain Python: (minute, country) -> (revenue_cents, orders)
    for every window that ends at or before the watermark."""
    out: dict[tuple[int, str], tuple[int, int]] = {}
    for o in orders:
        minute_ms = o["ordered_at"] - o["ordered_at"] % 60_000
        if minute_ms + 60_000 <= watermark_ms:
            cents, n = out.get((minute_ms // 1000, o["country"]), (0, 0))
            out[(minute_ms // 1000, o["country"])] = (cents + o["amount_cents"], n + 1)
    return out


def stop_on_signals() -> threading.Event:
    """An event that Ctrl-C or SIGTERM sets, instead of raising.

    A KeyboardInterrupt raised inside a py4j call leaves the gateway mid-
    conversation (and prints its tracebacks), so a signal only sets a flag
    and the queries are stopped between short waits.
    """
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    return stopping


def wait_then_stop(queries: list[Any], stopping: threading.Event) -> None:
    """Wait until the queries end or `stopping` is set, then stop them."""
    while not stopping.is_set() and any(q.isActive for q in queries):
        for query in queries:
            query.awaitTermination(0.5)  # raises if the query failed
    for query in queries:
        query.stop()


def main() -> None:
    import tidelog.spark

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", default="shop.db", help="the tidelog file (default shop.db)")
    parser.add_argument("--orders", type=int, default=5000, help="orders to add first (default 5000)")
    parser.add_argument(
        "--work", default="revenue-job", help="checkpoints and Parquet (default revenue-job/)"
    )
    parser.add_argument("--follow", action="store_true", help="keep running until Ctrl-C")
    args = parser.parse_args()

    with tidelog.open(args.db) as log:
        known = log.describe(ORDERS).records if ORDERS in {t.name for t in log.topics()} else 0
    start_ms = 1_700_000_000_000 + known * 200
    if args.orders:
        produce_orders(args.db, args.orders, start_ms=start_ms, seed=known, first_id=known + 1)
    spark = tidelog.spark.session(
        "local[2]",
        "revenue",
        **{"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    stopping = stop_on_signals()  # after the session: SparkContext installs a SIGINT handler of its own
    parquet = os.path.join(args.work, "parquet")
    queries = start(
        spark, args.db, os.path.join(args.work, "checkpoint"), parquet, available_now=not args.follow
    )
    wait_then_stop(queries, stopping)
    with tidelog.open(args.db) as log:
        closed = sum(t.name == REVENUE for t in log.topics()) and log.describe(REVENUE).records
        print(f"topic {REVENUE}: {closed} closed windows")
    if glob.glob(os.path.join(parquet, "*.parquet")):  # none before the first window closes
        spark.read.parquet(parquet).orderBy("minute", "country").show(20, truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()
