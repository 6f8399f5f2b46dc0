"""The examples/ pipeline end to end, checked against plain Python."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import tidelog

pytestmark = pytest.mark.spark

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "spark_revenue.py")
T0 = 1_700_000_000_000


def load_example():
    spec = importlib.util.spec_from_file_location("spark_revenue", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(example, spark, db, work):
    queries = example.start(spark, db, str(work / "checkpoint"), str(work / "parquet"))
    for query in queries:
        query.awaitTermination(240)
        assert not query.isActive and query.exception() is None


def test_revenue_pipeline_matches_plain_python_across_a_restart(spark, db, tmp_path):
    example = load_example()
    orders = example.produce_orders(db, 1200, start_ms=T0, seed=1)
    run(example, spark, db, tmp_path)
    # More orders arrive; the job starts again from its checkpoints.
    orders += example.produce_orders(db, 1200, start_ms=T0 + 1200 * 200, seed=2, first_id=1201)
    run(example, spark, db, tmp_path)

    # Spark closes a window once the watermark (latest order time - 2 minutes) passes its end.
    watermark = max(o["ordered_at"] for o in orders) - 2 * 60_000
    expected = example.expected_revenue(orders, watermark)
    assert len(expected) >= 20  # enough windows to mean something

    with tidelog.open(db) as log:
        records = [m for p in log.describe("revenue").partitions for m in log.read("revenue", p.partition)]
    from_topic = {}
    for m in records:
        row = m.data if isinstance(m.data, dict) else json.loads(m.data)
        assert m.key == row["country"].encode()
        from_topic[(row["minute"], row["country"])] = (row["revenue_cents"], row["orders"])
    assert len(records) == len(from_topic), "a window was written twice"
    assert from_topic == expected

    parquet = spark.read.parquet(str(tmp_path / "parquet")).collect()
    assert len(parquet) == len(expected)
    assert {(r.minute, r.country): (r.revenue_cents, r.orders) for r in parquet} == expected


def test_ctrl_c_on_follow_stops_the_queries_without_a_traceback(db, tmp_path):
    # A process of its own, as a person runs it; SIGINT is what Ctrl-C sends.
    work = tmp_path / "work"
    proc = subprocess.Popen(
        [sys.executable, EXAMPLE, "--db", db, "--orders", "300", "--work", str(work), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        first_batch = work / "checkpoint" / "topic" / "commits" / "0"
        while time.monotonic() < deadline and not first_batch.exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        assert first_batch.exists(), "the pipeline never finished a batch"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    # What Ctrl-C used to print: a KeyboardInterrupt inside py4j calls. (PySpark's
    # accumulator server may still log an EOFError when the JVM stops: its own noise.)
    assert "KeyboardInterrupt" not in err and "Py4J" not in err and "py4j" not in err, err[-2000:]
    assert "closed windows" in out
