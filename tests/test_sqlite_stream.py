"""A streamed append on a SQLite file while another connection holds the write lock.

`Log.write_stream` on a file stages its batches in a temporary table while
another writer holds SQLite's lock, and copies them in once it gets the
lock (store/sqlite/streaming.py). The other writer here is a plain sqlite3
connection in BEGIN IMMEDIATE, as a second Spark task's first write is.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

import tidelog


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "log.db")


@pytest.fixture
def log(path):
    log = tidelog.open(path)
    log.create_topic("s", partitions=2)
    log.producer().send("s", b"before", partition=1)  # offsets must continue after it
    yield log
    log.close()


class Holder:
    """Another connection holding the write lock until `release()`."""

    def __init__(self, path: str):
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")
        self.held = True

    def release(self) -> None:
        if self.held:
            self.conn.execute("COMMIT")
            self.held = False

    def close(self) -> None:
        self.release()
        self.conn.close()


def batches(log: tidelog.Log, n: int, *, drawn: list[int], at: dict | None = None):
    producer = log.producer()
    for i in range(n):
        if at and i in at:
            at[i]()
        drawn.append(i)
        values = [f"{i}:{j}" for j in range(150)]  # a multi-row INSERT and some rows one by one
        keyed = [tidelog.NewRecord(v, key=f"k{i}") if j % 2 else v for j, v in enumerate(values)]
        yield producer.prepare("s", keyed if i % 2 else values, partition=i % 2)


def expected(n: int) -> dict[int, list[tuple[str, bytes | None]]]:
    out: dict[int, list[tuple[str, bytes | None]]] = {0: [], 1: []}
    for i in range(n):
        for j in range(150):
            out[i % 2].append((f"{i}:{j}", f"k{i}".encode() if i % 2 and j % 2 else None))
    return out


def stored(log: tidelog.Log) -> dict[int, list[tuple[str, bytes | None]]]:
    out = {}
    for p in (0, 1):
        msgs = log.read("s", p, limit=10_000)
        assert [m.offset for m in msgs] == list(range(1, len(msgs) + 1))
        out[p] = [(m.data, m.key) for m in msgs if m.value != b"before"]
    return out


def test_a_stream_draws_every_batch_while_another_writer_holds_the_lock(log, path):
    holder = Holder(path)
    drawn: list[int] = []
    done = threading.Event()

    def release_when_all_drawn():
        # Only a stream that stages draws its last batch before it has the lock.
        if done.wait(timeout=30):
            holder.release()

    releaser = threading.Thread(target=release_when_all_drawn, daemon=True)
    releaser.start()

    def signalled():
        yield from batches(log, 5, drawn=drawn)
        done.set()

    try:
        sent = log.write_stream(signalled(), txn="spark:q:1:0")
    finally:
        done.set()
        releaser.join()
        holder.close()
    assert drawn == [0, 1, 2, 3, 4]
    assert [(s.partition, s.first_offset, s.count) for s in sent] == [
        (0, 1, 150),
        (1, 2, 150),
        (0, 151, 150),
        (1, 152, 150),
        (0, 301, 150),
    ]
    assert stored(log) == expected(5)
    # The txn was recorded with the copy: running it again writes nothing.
    assert log.write_stream(batches(log, 5, drawn=[]), txn="spark:q:1:0") == sent
    assert stored(log) == expected(5)


def test_the_lock_freed_mid_stream_copies_the_staged_batches_and_appends_the_rest(log, path):
    holder = Holder(path)
    drawn: list[int] = []
    try:
        sent = log.write_stream(batches(log, 6, drawn=drawn, at={3: holder.release}), txn="spark:q:2:0")
    finally:
        holder.close()
    assert [(s.partition, s.first_offset) for s in sent] == [
        (0, 1),
        (1, 2),
        (0, 151),
        (1, 152),
        (0, 301),
        (1, 302),
    ]
    assert stored(log) == expected(6)


def test_a_bad_batch_while_staging_writes_nothing(log, path):
    before = stored(log)
    producer = log.producer()

    def bad():
        yield producer.prepare("s", ["ok"] * 120, partition=0)
        yield producer.prepare("s", ["ok"] * 119 + ["\ud800"], partition=1)  # a lone surrogate

    holder = Holder(path)
    try:
        with pytest.raises(tidelog.InvalidValue):
            log.write_stream(bad(), txn="spark:q:3:0")
        with pytest.raises(tidelog.InvalidRequest, match="one topic"):
            log.write_stream(iter([producer.prepare("s", [b"1"]), producer.prepare("u", [b"2"])]), txn="q:4")
    finally:
        holder.close()
    assert stored(log) == before
    sent = log.write_stream(iter([producer.prepare("s", [b"x"], partition=0)]), txn="spark:q:3:0")
    assert [(s.partition, s.first_offset) for s in sent] == [(0, 1)]  # the failed txn was not recorded


def test_the_same_txn_written_meanwhile_by_another_is_a_replay(log, path):
    # Spark may run a task twice at once (speculation): the one that gets
    # the lock second, having staged everything, must write nothing.
    other = tidelog.open(path)
    producer = other.producer()
    first_in = threading.Event()
    finish = threading.Event()
    result: list = []

    def slow():
        yield producer.prepare("s", [b"a", b"b"], partition=0)
        first_in.set()  # the other stream holds the lock now
        finish.wait(timeout=30)
        yield producer.prepare("s", [b"c"], partition=1)

    writer = threading.Thread(target=lambda: result.append(other.write_stream(slow(), txn="spark:q:9:0")))
    writer.start()
    try:
        assert first_in.wait(timeout=30)
        drawn: list[int] = []

        def ours():
            yield from batches(log, 2, drawn=drawn)
            finish.set()  # everything staged: let the other commit

        sent = log.write_stream(ours(), txn="spark:q:9:0")
    finally:
        finish.set()
        writer.join()
        other.close()
    assert sent == result[0]
    assert [(s.partition, s.first_offset, s.count) for s in sent] == [(0, 1, 2), (1, 2, 1)]
    assert [m.value for m in log.read("s", 0)] == [b"a", b"b"]
    assert [m.value for m in log.read("s", 1)] == [b"before", b"c"]


def test_a_closed_log_refuses_a_stream(path):
    log = tidelog.open(path)
    log.create_topic("s", partitions=1)
    batch = log.producer().prepare("s", [b"x"])
    log.close()
    with pytest.raises(tidelog.StoreError, match="closed"):
        log.write_stream(iter([batch]), txn="spark:q:7:0")
    with tidelog.open(path) as again:
        assert again.describe("s").records == 0


def test_a_stream_on_an_in_memory_log_appends_and_replays():
    # :memory: has one connection and no other writer: the same stream,
    # never staging, on the store's own connection.
    with tidelog.open(":memory:") as log:
        log.create_topic("s", partitions=2)
        log.producer().send("s", b"before", partition=1)
        sent = log.write_stream(batches(log, 3, drawn=[]), txn="spark:q:8:0")
        assert [(s.partition, s.first_offset) for s in sent] == [(0, 1), (1, 2), (0, 151)]
        assert stored(log) == expected(3)
        drawn: list[int] = []
        assert log.write_stream(batches(log, 3, drawn=drawn), txn="spark:q:8:0") == sent
        assert drawn == [] and stored(log) == expected(3)
