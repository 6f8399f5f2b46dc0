"""The streaming query of the kill-and-restart test; run as its own process
it keeps going until it is killed:

    python copy_query.py DB CHECKPOINT

Copies topic "in" to topic "out", each record as its "partition:offset" id.
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


def copy_query(spark, db: str, checkpoint: str, max_per_trigger: int = 500):
    """The query, not yet started."""
    return (
        spark.readStream.format("tidelog")
        .option("url", db)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
        .selectExpr("concat(partition, ':', offset) AS value")
        .writeStream.format("tidelog")
        .option("url", db)
        .option("topic", "out")
        .option("checkpointLocation", checkpoint)
    )


def main(db: str, checkpoint: str) -> None:
    spark = tidelog.spark.session("local[2]", "tidelog-copy", **SPARK_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    query = copy_query(spark, db, checkpoint).start()
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:3])
