"""A streaming query for the kill-and-restart test, run as its own process.

    python copy_query.py DB CHECKPOINT run|finish

Copies topic "in" to topic "out", each record as its "partition:offset" id.
`run` keeps going until killed; `finish` reads what is there (AvailableNow)
and exits.
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


def main(db: str, checkpoint: str, mode: str) -> None:
    spark = tidelog.spark.session("local[2]", "tidelog-copy", **SPARK_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    writer = (
        spark.readStream.format("tidelog")
        .option("url", db)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
        .selectExpr("concat(partition, ':', offset) AS value")
        .writeStream.format("tidelog")
        .option("url", db)
        .option("topic", "out")
        .option("checkpointLocation", checkpoint)
    )
    if mode == "finish":
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
