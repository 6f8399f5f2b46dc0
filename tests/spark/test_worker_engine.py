"""The push worker's Spark engine: the same delivery contract as the local engine.

In-process on the shared SparkSession: a 500, a hang past the timeout and
a cut connection fail a micro-batch, which Spark runs again from the same
offsets; the batches the endpoint accepts are byte for byte the ones
the local engine posts for the same data. Then a real worker process with
the Spark engine is killed, restarted and stopped (tests/worker_process.py).
"""

from __future__ import annotations

import shutil
import threading
from typing import Any

import pytest

import tidelog
import tidelog.worker
from conftest import need_service  # tests/conftest.py
from endpoint import Endpoint, check_deliveries
from worker_process import kill_restart_terminate

from .conftest import spark_available

pytestmark = pytest.mark.spark

TOPIC = "orders"
EXPECTED = {0: 70, 1: 45, 2: 20}


def fill(db: str) -> None:
    """JSON, text and bytes (not UTF-8) values, keys and headers."""
    with tidelog.open(db) as log:
        log.create_topic(TOPIC, partitions=len(EXPECTED))
        producer = log.producer()
        for p, n in EXPECTED.items():
            batch = []
            for i in range(1, n + 1):
                if i % 7 == 0:
                    batch.append(tidelog.NewRecord(bytes([0xFF, p, i]), key=b"\xfe", headers={"b": b"\x80"}))
                elif i % 5 == 0:
                    batch.append(tidelog.NewRecord(f"text {p}/{i}", key=f"k{i}"))
                else:
                    batch.append({"p": p, "i": i, "s": "é"})
            producer.send_batch(TOPIC, batch, partition=p)


# The first POST of these batches fails once: a 500 in the middle of partition 0,
# a hang on partition 1's short last batch, a cut connection on partition 2's only batch.
FAIL_ONCE = {(0, 21): 500, (1, 41): "hang", (2, 1): "drop"}


def script(number: int, body: dict, received: list) -> Any:
    batch = (body["partition"], body["messages"][0]["offset"])
    tried = any((r.partition, r.offsets[0]) == batch for r in received)
    return "ok" if tried else FAIL_ONCE.get(batch, "ok")


def deliver(engine: str, db: str, work_dir: str, spark: Any) -> tuple[list, Any]:
    """Run one engine over `db` until every record was accepted; what arrived, and the metrics."""
    got: list = []
    with Endpoint(script=script, hang_s=3.0, db=db, group="g") as endpoint:
        cfg = {
            "engine": engine,
            "work_dir": work_dir,
            "topics": {
                TOPIC: {
                    "groups": {
                        "g": {
                            "endpoint": endpoint.url,
                            "batch_size": 20,
                            "interval": "200ms",
                            "timeout": "1s",
                        }
                    }
                }
            },
        }
        stop = threading.Event()
        errors: list[BaseException] = []

        def main() -> None:
            try:
                tidelog.worker.run(db, cfg, stop=stop, spark=spark, on_metrics=got.append)
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=main)
        thread.start()
        try:
            received = endpoint.wait_for(lambda rs: accepted(rs) == sum(EXPECTED.values()) or errors, 180)
        finally:
            stop.set()
            thread.join(120)
        assert not thread.is_alive() and not errors, errors
    return received, got[0]


def accepted(received: list) -> int:
    return len({(r.partition, o) for r in received if r.accepted for o in r.offsets})


def test_spark_engine_retries_failed_micro_batches_and_posts_what_the_local_engine_posts(spark, tmp_path):
    db = str(tmp_path / "spark.db")
    fill(db)
    twin = str(tmp_path / "local.db")
    shutil.copyfile(db, twin)  # the same records, timestamps included

    on_spark, metrics = deliver("spark", db, str(tmp_path / "work"), spark)
    on_local, _ = deliver("local", twin, str(tmp_path / "work"), None)

    check_deliveries(on_spark, EXPECTED)
    check_deliveries(on_local, EXPECTED)
    for p in EXPECTED:
        spark_batches = [r.raw for r in on_spark if r.accepted and r.partition == p]
        local_batches = [r.raw for r in on_local if r.accepted and r.partition == p]
        assert spark_batches == local_batches, p
    with tidelog.open(db) as log:
        consumer = log.consumer("g")
        assert {p: consumer.committed(TOPIC, p) for p in EXPECTED} == EXPECTED

    failures = {
        cause: sum(
            metrics.value("tidelog_worker_failures_total", group="g", topic=TOPIC, partition=p, cause=cause)
            for p in EXPECTED
        )
        for cause in ("http_500", "timeout", "connection")
    }
    assert failures == {"http_500": 1, "timeout": 1, "connection": 1}
    for p in EXPECTED:
        labels = {"group": "g", "topic": TOPIC, "partition": p}
        assert metrics.value("tidelog_worker_records_delivered_total", **labels) == EXPECTED[p]
        assert metrics.value("tidelog_worker_batches_delivered_total", **labels) == len(
            [r for r in on_spark if r.accepted and r.partition == p]
        )
    assert not (tmp_path / "work" / "checkpoints" / "g" / TOPIC / "0-1-2").exists()  # one run's, removed


@pytest.mark.slow
def test_spark_worker_process_killed_restarted_and_terminated_loses_nothing(tmp_path):
    missing = spark_available()
    if missing:
        need_service("Spark", missing)
    kill_restart_terminate("spark", tmp_path, timeout_s=420)  # a loaded machine starts a JVM slowly
