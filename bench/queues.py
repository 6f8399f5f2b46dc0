"""Queue benchmark: send + receive + ack, beside a raw sqlite3 work-queue loop.

The baseline does the least the same guarantees need, one record at a time,
three commits: insert; lease with UPDATE ... RETURNING; delete. Same pragmas
(WAL, synchronous=NORMAL). Prints figures, never passes or fails.

    python bench/queues.py [--runs 3] [--records 5000]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import threading
import time

import tidelog

VALUE = os.urandom(100)


def fresh(tmp: str, name: str) -> str:
    return os.path.join(tmp, f"{name}-{time.perf_counter_ns()}.db")


def raw_loop(path: str, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        "CREATE TABLE q (id INTEGER PRIMARY KEY, value BLOB NOT NULL, leased_until INTEGER NOT NULL DEFAULT 0,"
        " receipt TEXT)"
    )
    start = time.perf_counter()
    for _ in range(n):
        conn.execute("INSERT INTO q (value) VALUES (?)", (VALUE,))
        now = time.time_ns() // 1_000_000
        row = conn.execute(
            "UPDATE q SET leased_until = ?, receipt = ? WHERE id = "
            "(SELECT id FROM q WHERE leased_until <= ? ORDER BY id LIMIT 1) RETURNING id, value",
            (now + 30_000, os.urandom(8).hex(), now),
        ).fetchone()
        conn.execute("DELETE FROM q WHERE id = ?", (row[0],))
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def tl_loop(path: str, n: int) -> float:
    log = tidelog.open(path)
    q = log.queue("bench")
    start = time.perf_counter()
    for _ in range(n):
        q.send(VALUE)
        (d,) = q.receive()
        q.ack(d)
    elapsed = time.perf_counter() - start
    log.close()
    return n / elapsed


def tl_batched(path: str, n: int, batch: int = 100) -> float:
    log = tidelog.open(path)
    q = log.queue("bench")
    for i in range(0, n, 1000):
        q.send_batch([VALUE] * min(1000, n - i))
    start = time.perf_counter()
    done = 0
    while done < n:
        got = q.receive(max_messages=batch)
        for d in got:
            q.ack(d)
        done += len(got)
    elapsed = time.perf_counter() - start
    log.close()
    return n / elapsed


def tl_threads(path: str, n: int, workers: int = 4, batch: int = 100) -> float:
    log = tidelog.open(path)
    q = log.queue("bench")
    for i in range(0, n, 1000):
        q.send_batch([VALUE] * min(1000, n - i))
    counts = [0] * workers

    def work(k: int) -> None:
        mine = log.queue("bench")
        while True:
            got = mine.receive(max_messages=batch)
            if not got:
                return
            for d in got:
                mine.ack(d)
            counts[k] += len(got)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert sum(counts) == n, counts
    log.close()
    return n / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=5000)
    args = ap.parse_args(argv)
    n = args.records
    print(
        f"tidelog queue benchmark: SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, best of {args.runs}"
    )
    print("| work | records/s | ratio to raw loop | target |")
    print("| --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="tidelog-qbench-") as tmp:
        raw = tl = 0.0
        for _ in range(args.runs):
            raw = max(raw, raw_loop(fresh(tmp, "raw"), n))
            tl = max(tl, tl_loop(fresh(tmp, "tl"), n))
        print(f"| raw sqlite3: insert; UPDATE ... RETURNING lease; delete | {raw:,.0f} | 1.00 | |")
        print(f"| tidelog: send + receive + ack, one at a time | {tl:,.0f} | {tl / raw:.2f} | >= 0.7 |")
        batched = max(tl_batched(fresh(tmp, "b"), n * 4) for _ in range(args.runs))
        print(f"| tidelog: receive(100) + ack each, one thread | {batched:,.0f} | {batched / raw:.2f} | |")
        threaded = max(tl_threads(fresh(tmp, "t"), n * 4) for _ in range(args.runs))
        print(f"| tidelog: receive(100) + ack each, 4 threads | {threaded:,.0f} | {threaded / raw:.2f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
