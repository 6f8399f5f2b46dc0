"""The streaming query of the kill-and-restart tests; run as its own process
it keeps going until it is killed:

    python copy_query.py URL CHECKPOINT [MASTER [MAX_PER_TRIGGER [KEY=VALUE ...]]]

Copies topic "in" to topic "out", each record as its "partition:offset" id.
Prints its Spark application id first, so a test can find its executors.
"""

from __future__ import annotations

import sys

import tidelog.spark

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
}


def copy_query(spark, url: str, checkpoint: str, max_per_trigger: int = 500):
    """The query, not yet started."""
    return (
        spark.readStream.format("tidelog")
        .option("url", url)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
        .selectExpr("concat(partition, ':', offset) AS value")
        .writeStream.format("tidelog")
        .option("url", url)
        .option("topic", "out")
        .option("checkpointLocation", checkpoint)
    )


def main(
    url: str, checkpoint: str, master: str = "local[2]", max_per_trigger: str = "500", *conf: str
) -> None:
    extra = dict(c.split("=", 1) for c in conf)
    spark = tidelog.spark.session(master, "tidelog-copy", **{**SPARK_CONF, **extra})
    spark.sparkContext.setLogLevel("ERROR")
    print(f"application {spark.sparkContext.applicationId}", flush=True)
    query = copy_query(spark, url, checkpoint, int(max_per_trigger)).start()
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:])
