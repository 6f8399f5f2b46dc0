"""What the Kafka connector tests run inside Spark: a driver with the connector's jars,
in a process of its own (tests/spark/kafka_connector.py starts it).

    python kafka_job.py run JARS JOBS     # start each job's query (JSON list); run until killed
    python kafka_job.py serve JARS        # steps from stdin, one JSON line each; an answer for each

A job is one broker's streaming query: topic `source` to topic `sink` through
format("kafka") both ways, with a checkpoint, as a pipeline on Apache Kafka
would be written. Its transform is deterministic: each record keeps its key,
headers and partition, and its value becomes "p<partition>o<offset>:<VALUE
in upper case>", so the output says which input record it came from.

`stall` ([partition, offset]) makes the task that meets that input record
sleep before writing it, with Spark SQL's own reflect() (no Python worker in
the query): the other partition's task of the micro-batch finishes and its
records reach the sink while the batch never commits. A kill then lands at
the same point of the query on every broker, and the restart's rerun of the
batch writes the same duplicates on each (test_kafka_connector.py).

Steps of `serve`: "ready"; "drain" (each job's query from its checkpoint with
Trigger.AvailableNow, to the end); "read" (a batch read, format "kafka" or
"tidelog", its rows in partition and offset order).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import tidelog.spark

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
}
STALL_MS = 600_000  # longer than any test waits: the process is killed first


def session(jars: str, cores: int) -> Any:
    spark = tidelog.spark.session(
        f"local[{cores}]", "tidelog-kafka-connector", **SPARK_CONF, **{"spark.jars": jars}
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def query(spark: Any, job: dict[str, Any]) -> Any:
    """The job's streaming query, not yet started."""
    stall = ""
    if job.get("stall"):
        partition, offset = job["stall"]
        sleep = f"reflect('java.lang.Thread', 'sleep', bigint({STALL_MS}))"
        stall = f", if(partition = {int(partition)} AND offset = {int(offset)}, substr({sleep}, 1, 0), '')"
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", job["bootstrap"])
        .option("subscribe", job["source"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(job["max_per_trigger"]))
        .option("includeHeaders", "true")
        .load()
        .selectExpr(
            "key",
            f"concat('p', partition, 'o', offset, ':', upper(CAST(value AS STRING)){stall}) AS value",
            "headers",
            "partition",
        )
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", job["bootstrap"])
        .option("topic", job["sink"])
        .option("checkpointLocation", job["checkpoint"])
    )


def drain(spark: Any, jobs: list[dict[str, Any]]) -> list[int]:
    """Each job's query from its checkpoint to the end of its source; the micro-batches each ran."""
    started = [query(spark, job).trigger(availableNow=True).start() for job in jobs]
    batches = []
    for q in started:
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        batches.append(len(q.recentProgress))
    return batches


def text(data: bytes | bytearray | None) -> str | None:
    return None if data is None else bytes(data).decode("utf-8", "backslashreplace")


def read(spark: Any, fmt: str, options: dict[str, str]) -> list[list[Any]]:
    """A batch read's rows: partition, offset, key, value, timestamp (ms), timestampType, headers."""
    rows = (
        spark.read.format(fmt)
        .options(**options)
        .load()
        .selectExpr(
            "partition", "offset", "key", "value", "unix_millis(timestamp) AS ms", "timestampType", "headers"
        )
        .orderBy("partition", "offset")
        .collect()
    )
    return [
        [r.partition, r.offset, text(r.key), text(r.value), r.ms, r.timestampType]
        + [[[h.key, text(h.value)] for h in r.headers or []]]
        for r in rows
    ]


def serve(jars: str) -> None:
    # Answers go to the pipe the test reads; everything else the process or its JVM
    # prints (fd 1 is inherited by Spark's JVM) goes to stderr, the test's log file.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    spark = session(jars, 2)
    for line in sys.stdin:
        request = json.loads(line)
        step = request.pop("step")
        try:
            if step == "ready":
                result: Any = spark.version
            elif step == "drain":
                result = drain(spark, request["jobs"])
            elif step == "read":
                result = read(spark, request["format"], request["options"])
            else:
                raise ValueError(f"no step {step!r}")
            answer = {"result": result}
        except Exception:
            answer = {"error": traceback.format_exc()[-3000:]}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    spark.stop()


def run(jars: str, jobs: list[dict[str, Any]]) -> None:
    # Two task slots a query: a stalled task holds one, and no query waits for another's.
    spark = session(jars, 2 * len(jobs))
    for job in jobs:
        query(spark, job).start()
    spark.streams.awaitAnyTermination()
    for q in spark.streams.active:
        q.stop()
    sys.exit("a query ended before the process was killed")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        run(sys.argv[2], json.loads(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit("usage: kafka_job.py run JARS JOBS_JSON | kafka_job.py serve JARS")
