"""Exactly once, end to end: tidelog -> Spark -> tidelog, killed and restarted.

The query runs in its own process group; the test SIGKILLs the whole group
(driver, JVM, Python workers) while micro-batches are being written, then
restarts the query from its checkpoint (in the tests' own Spark session, a
process that never saw it) and counts every record id in the output: none
twice, none missing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

import tidelog

from .copy_query import copy_query

pytestmark = pytest.mark.spark

SCRIPT = os.path.join(os.path.dirname(__file__), "copy_query.py")
PARTITIONS = 4
PER_PARTITION = 1000
TIMEOUT_S = 240


def start(db: str, checkpoint: str, tmp_path) -> subprocess.Popen:
    # The child keeps its own copy of the file's descriptor.
    with open(tmp_path / "query.log", "a") as log_file:
        return subprocess.Popen(
            [sys.executable, SCRIPT, db, checkpoint],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so one signal reaches Spark's JVM too
        )


def out_count(db: str) -> int:
    with tidelog.open(db) as log:
        try:
            return log.describe("out").records
        except tidelog.UnknownTopic:
            return 0


def fill(db: str, count: int) -> None:
    with tidelog.open(db) as log:
        producer = log.producer()
        for p in range(PARTITIONS):
            producer.send_batch("in", [b"x"] * count, partition=p)


def test_a_query_killed_mid_run_and_restarted_writes_each_record_once(spark, db, checkpoint, tmp_path):
    with tidelog.open(db) as log:
        log.create_topic("in", partitions=PARTITIONS)
        log.create_topic("out", partitions=2)
    fill(db, PER_PARTITION)
    total = PARTITIONS * PER_PARTITION

    proc = start(db, checkpoint, tmp_path)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        # Kill once the first micro-batch is in and more are on their way.
        while out_count(db) < 500:
            if proc.poll() is not None:
                raise AssertionError(
                    f"the query exited early: {(tmp_path / 'query.log').read_text()[-3000:]}"
                )
            assert time.monotonic() < deadline, "the query wrote too little before the timeout"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    at_kill = out_count(db)
    assert 0 < at_kill < total, "the kill came too late to test anything"

    fill(db, 500)  # records that arrive while the query is down
    total += PARTITIONS * 500
    # Larger micro-batches now: a restarted query may change its limit.
    query = copy_query(spark, db, checkpoint, max_per_trigger=2000).trigger(availableNow=True).start()
    query.awaitTermination(TIMEOUT_S)
    assert not query.isActive and query.exception() is None

    with tidelog.open(db) as log:
        ids = Counter(m.data for p in (0, 1) for m in log.read("out", p, limit=100_000))
    expected = {f"{p}:{o}" for p in range(PARTITIONS) for o in range(1, PER_PARTITION + 500 + 1)}
    duplicates = {i: n for i, n in ids.items() if n > 1}
    gaps = expected - set(ids)
    assert duplicates == {} and gaps == set() and set(ids) == expected
    assert sum(ids.values()) == total
