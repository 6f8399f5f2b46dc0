"""Core benchmark: tidelog on SQLite beside raw sqlite3 doing the same work.

Prints figures, never passes or fails. Each figure is the best of several
runs, each on a fresh file, with the same pragmas (WAL, synchronous=NORMAL).

    python bench/core.py [--runs 5] [--records 50000]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable

import tidelog

VALUE = os.urandom(100)
BATCH = 1000


def fresh_path(tmp: str, name: str) -> str:
    path = os.path.join(tmp, f"{name}-{time.perf_counter_ns()}.db")
    return path


def raw_conn(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    # The least a single-partition log needs: a dense id and a timestamp.
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, value BLOB NOT NULL)")
    return conn


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# baselines -------------------------------------------------------------------


def raw_batches(path: str, n: int, insert: Callable[[sqlite3.Connection, int, list[bytes]], None]) -> float:
    """n records in transactions of BATCH, each batch put in by `insert`."""
    conn = raw_conn(path)
    values = [VALUE] * BATCH
    start = time.perf_counter()
    for _ in range(n // BATCH):
        conn.execute("BEGIN")
        insert(conn, now_ms(), values)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def raw_batch(path: str, n: int) -> float:
    def insert(conn: sqlite3.Connection, ts: int, values: list[bytes]) -> None:
        conn.executemany("INSERT INTO t (ts, value) VALUES (?, ?)", [(ts, v) for v in values])

    return raw_batches(path, n, insert)


ROWS = 100  # what the SQLite store puts in one INSERT (store/sqlite/base.py)
RAW_ROWS = "INSERT INTO t (ts, value) VALUES " + ", ".join(f"(?1, ?{k + 2})" for k in range(ROWS))


def raw_batch_rows(path: str, n: int) -> float:
    """raw_batch with the store's own technique: ROWS rows a statement."""

    def insert(conn: sqlite3.Connection, ts: int, values: list[bytes]) -> None:
        for i in range(0, len(values), ROWS):
            conn.execute(RAW_ROWS, (ts, *values[i : i + ROWS]))

    return raw_batches(path, n, insert)


def raw_single(path: str, n: int) -> float:
    conn = raw_conn(path)
    start = time.perf_counter()
    for _ in range(n):
        conn.execute("INSERT INTO t (ts, value) VALUES (?, ?)", (now_ms(), VALUE))
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def fill(conn: sqlite3.Connection, n: int) -> None:
    """`n` records in one transaction, for the read baselines."""
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t (ts, value) VALUES (?, ?)", [(now_ms(), VALUE)] * n)
    conn.execute("COMMIT")


def read_pages(
    conn: sqlite3.Connection, select: str, upto: int | None = None, each: Callable[[int], None] | None = None
) -> None:
    """Read table t with `select` (its parameters: after, limit) a BATCH at
    a time, until it ends or `upto` ids are read; `each(after)` after a page."""
    after = 0
    while upto is None or after < upto:
        rows = conn.execute(select, (after, BATCH)).fetchall()
        if not rows:
            break
        after = rows[-1][0]
        if each is not None:
            each(after)


def raw_read(path: str, n: int) -> float:
    conn = raw_conn(path)
    fill(conn, n)
    start = time.perf_counter()
    read_pages(conn, "SELECT id, ts, value FROM t WHERE id > ? ORDER BY id LIMIT ?")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def raw_read_commit(path: str, n: int) -> float:
    """raw_read doing the rest of what a fetch + commit does: read a record's
    optional meta column (key, headers) and store the group's offset after
    each batch."""
    conn = raw_conn(path)
    conn.execute("ALTER TABLE t ADD COLUMN meta BLOB")
    conn.execute(
        "CREATE TABLE offsets (grp TEXT NOT NULL, pid INTEGER NOT NULL, committed INTEGER NOT NULL, "
        "PRIMARY KEY (grp, pid)) WITHOUT ROWID"
    )
    fill(conn, n)

    def commit(after: int) -> None:
        conn.execute(
            "INSERT INTO offsets VALUES ('g', 1, ?) ON CONFLICT(grp, pid) DO UPDATE SET committed = excluded.committed",
            (after,),
        )

    start = time.perf_counter()
    read_pages(conn, "SELECT id, ts, value, meta FROM t WHERE id > ? ORDER BY id LIMIT ?", each=commit)
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


# tidelog -----------------------------------------------------------------------


def tl_batch(path: str, n: int) -> float:
    log = tidelog.open(path)
    log.create_topic("bench", partitions=1)
    producer = log.producer()
    values = [VALUE] * BATCH
    start = time.perf_counter()
    for _ in range(n // BATCH):
        producer.send_batch("bench", values, partition=0)
    elapsed = time.perf_counter() - start
    log.close()
    return n / elapsed


def tl_single(path: str, n: int) -> float:
    log = tidelog.open(path)
    log.create_topic("bench", partitions=1)
    producer = log.producer()
    send = producer.send
    start = time.perf_counter()
    for _ in range(n):
        send("bench", VALUE, partition=0)
    elapsed = time.perf_counter() - start
    log.close()
    return n / elapsed


def tl_fetch_commit(path: str, n: int) -> float:
    log = tidelog.open(path)
    log.create_topic("bench", partitions=1)
    producer = log.producer()
    for _ in range(n // BATCH):
        producer.send_batch("bench", [VALUE] * BATCH, partition=0)
    consumer = log.consumer("bench-group")
    start = time.perf_counter()
    while True:
        msgs = consumer.fetch("bench", 0, max_messages=BATCH)
        if not msgs:
            break
        consumer.commit(msgs[-1])
    elapsed = time.perf_counter() - start
    assert consumer.committed("bench", 0) == n
    log.close()
    return n / elapsed


def best(fn: Callable[[str, int], float], tmp: str, n: int, runs: int) -> float:
    return max(fn(fresh_path(tmp, fn.__name__), n) for _ in range(runs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=50_000, help="records per run (batched work)")
    ap.add_argument("--single", type=int, default=20_000, help="records per run (single sends)")
    args = ap.parse_args(argv)
    rows = [
        ("batched produce (1,000/batch)", raw_batch, tl_batch, args.records, 0.9),
        # The same against raw code that also puts 100 rows in an INSERT, as the store does.
        ("batched produce vs raw 100 rows an INSERT", raw_batch_rows, tl_batch, args.records, None),
        ("single send (autocommit)", raw_single, tl_single, args.single, 0.8),
        ("fetch + commit (1,000/batch)", raw_read, tl_fetch_commit, args.records, 0.8),
        # The same tidelog work against a baseline that also reads meta and commits.
        ("fetch + commit vs raw + meta + commit", raw_read_commit, tl_fetch_commit, args.records, None),
    ]
    print(
        f"tidelog core benchmark: SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
        f"best of {args.runs} runs on fresh files, 100-byte values"
    )
    print("| work | raw sqlite3 (records/s) | tidelog (records/s) | ratio | target |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        for label, raw, tl, n, target in rows:
            # Interleave the two so both see the same machine conditions.
            raw_best = tl_best = 0.0
            for _ in range(args.runs):
                raw_best = max(raw_best, raw(fresh_path(tmp, "raw"), n))
                tl_best = max(tl_best, tl(fresh_path(tmp, "tl"), n))
            ratio = tl_best / raw_best
            goal = "-" if target is None else f">= {target}"
            print(f"| {label} | {raw_best:,.0f} | {tl_best:,.0f} | {ratio:.2f} | {goal} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
