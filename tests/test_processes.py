"""Several processes on one SQLite file, and processes killed mid-work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tidelog

pytestmark = pytest.mark.slow

PRODUCER = textwrap.dedent(
    """
    import sys, tidelog
    path, name, count, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    log = tidelog.open(path)
    producer = log.producer(id=name)
    for i in range(count):
        # Acknowledged sends are printed only after send() returned.
        if batch > 1:
            sent = producer.send_batch("shared", [f"{name}:{i}:{j}" for j in range(batch)], key=f"{name}-{i}")
            print(sent.partition, sent.first_offset, sent.count, flush=True)
        else:
            sent = producer.send("shared", f"{name}:{i}", key=f"{name}-{i}")
            print(sent.partition, sent.offset, 1, flush=True)
    """
)


def run_producers(path: str, n: int, count: int, batch: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, path, f"p{k}", str(count), str(batch)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(n)
    ]


def acked(lines: str) -> list[tuple[int, int, int]]:
    return [tuple(map(int, line.split())) for line in lines.splitlines() if line.strip()]


def test_concurrent_processes_get_dense_unique_offsets(tmp_path):
    path = str(tmp_path / "shared.db")
    with tidelog.open(path) as log:
        log.create_topic("shared", partitions=3)
    procs = run_producers(path, 4, 150, 1) + run_producers(path, 2, 40, 5)
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "locked" not in err
        results.extend(acked(out))
    with tidelog.open(path) as log:
        total = 0
        for partition in range(3):
            msgs = log.read("shared", partition, limit=100_000)
            assert [m.offset for m in msgs] == list(range(1, len(msgs) + 1))
            total += len(msgs)
            by_offset = {m.offset: m for m in msgs}
            for part, first, count in results:
                if part == partition:
                    for offset in range(first, first + count):
                        assert offset in by_offset
        assert total == 4 * 150 + 2 * 40 * 5
        # Every acknowledged offset is unique.
        spans = [(p, o) for p, first, count in results for o in range(first, first + count)]
        assert len(spans) == len(set(spans)) == total


def test_killed_producer_loses_no_acknowledged_record_and_no_partial_batch(tmp_path):
    path = str(tmp_path / "crash.db")
    with tidelog.open(path) as log:
        log.create_topic("shared", partitions=1)
    proc = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, path, "victim", "100000", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until it has acknowledged some batches, then kill it mid-stream.
    lines = []
    deadline = time.monotonic() + 60
    while len(lines) < 30 and time.monotonic() < deadline:
        lines.append(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    rest, _ = proc.communicate(timeout=30)
    confirmed = acked("".join(lines) + rest)
    assert len(confirmed) >= 30
    with tidelog.open(path) as log:
        msgs = log.read("shared", 0, limit=100_000)
    offsets = [m.offset for m in msgs]
    assert offsets == list(range(1, len(msgs) + 1))
    # No partial batch: whole batches of 50 only, each record in its place.
    assert len(msgs) % 50 == 0
    for k in range(0, len(msgs), 50):
        batch_no = msgs[k].data.split(":")[1]
        assert [m.data for m in msgs[k : k + 50]] == [f"victim:{batch_no}:{j}" for j in range(50)]
    # Every acknowledged batch is there.
    _, last_first, last_count = confirmed[-1]
    assert len(msgs) >= last_first + last_count - 1


CONSUMER = textwrap.dedent(
    """
    import sys, time, tidelog
    log = tidelog.open(sys.argv[1])
    consumer = log.consumer("crashers")
    while True:
        msgs = consumer.fetch("work", 0, max_messages=7)
        if not msgs:
            time.sleep(0.01)
            continue
        consumer.commit(msgs[-1])
        print(msgs[-1].offset, flush=True)
        # At work for seconds (286 batches): the kill lands mid-run even when a loaded
        # machine is slow to schedule the test reading these lines.
        time.sleep(0.02)
    """
)


def test_killed_consumer_resumes_after_its_commit(tmp_path):
    path = str(tmp_path / "consumer.db")
    with tidelog.open(path) as log:
        log.producer().send_batch("work", [f"job-{i}" for i in range(1, 2001)])
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER, path], stdout=subprocess.PIPE, text=True)
    seen = [int(proc.stdout.readline()) for _ in range(20)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    with tidelog.open(path) as log:
        consumer = log.consumer("crashers")
        committed = consumer.committed("work", 0)
        # It printed only after committing, so the store holds at least that.
        assert committed >= seen[-1]
        assert committed % 7 == 0
        resumed = consumer.fetch("work", 0, max_messages=1)
        assert resumed[0].offset == committed + 1


def test_opening_a_file_does_not_wait_for_another_writer(tmp_path):
    # A Spark task streams its share in one long transaction; the next
    # task's open (schema check included) must not queue behind it, or
    # it receives nothing while the first one writes.
    import sqlite3
    import threading

    path = str(tmp_path / "log.db")
    with tidelog.open(path) as log:
        log.create_topic("orders", partitions=2)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # the write lock, held as a long write holds it
    opened: list[list[str]] = []

    def open_and_read() -> None:
        with tidelog.open(path) as log:
            opened.append([t.name for t in log.topics()])

    thread = threading.Thread(target=open_and_read, daemon=True)
    thread.start()
    thread.join(timeout=20)  # a blocked open would wait the 60 s busy timeout
    try:
        assert not thread.is_alive(), "tidelog.open waited for the other writer's lock"
        assert opened == [["orders"]]
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        thread.join()
