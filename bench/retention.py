"""Retention benchmark: clean 1,000,000 records while a producer sends.

    python bench/retention.py [--records 1000000] [--chunk 2000] [--url postgresql://...]

With --url postgresql://... the log lives in a fresh schema of that database
(dropped afterwards) and the sizes are those of its tables with indexes.

A topic is filled with 100-byte records, the clock moves past retention_ms,
and `clean()` removes them while another thread sends one record at a time
into a second topic. Prints records removed per second, the producer's
longest pause (its slowest send) during cleaning beside its slowest send
before cleaning, and the file size before and after. Never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import tidelog

VALUE = os.urandom(100)


@contextmanager
def store_url(url: str | None) -> Iterator[str]:
    """A new SQLite file, or a fresh schema of the PostgreSQL database at `url`."""
    if url is None:
        with tempfile.TemporaryDirectory(prefix="tidelog-rbench-") as tmp:
            yield os.path.join(tmp, "retention.db")
        return
    from postgres import fresh_schema  # bench/postgres.py

    with fresh_schema(url) as schema_url:
        yield schema_url


def size(log: tidelog.Log) -> int:
    store = log.store
    if getattr(store, "dialect", "") == "sqlite":
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return store.file_bytes()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--url", help="postgresql://... to measure the PostgreSQL store instead of SQLite")
    args = ap.parse_args(argv)
    now = [time.time_ns() // 1_000_000]
    with store_url(args.url) as path:
        log = tidelog.open(path, clock=lambda: now[0])
        log.create_topic("old", partitions=4, retention_ms="1h")
        log.create_topic("live", partitions=1)
        producer = log.producer()
        per = args.records // 4
        for p in range(4):
            for i in range(0, per, 5000):
                producer.send_batch("old", [VALUE] * min(5000, per - i), partition=p)
        before = size(log)

        stop = threading.Event()
        pauses: list[float] = []

        def send() -> None:
            live = log.producer()
            while not stop.is_set():
                t = time.perf_counter()
                live.send("live", VALUE)
                pauses.append(time.perf_counter() - t)

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(1.0)
        quiet = max(pauses)
        quiet_sends = len(pauses)
        pauses.clear()
        now[0] += 3_600_001
        start = time.perf_counter()
        (report,) = log.clean("old", chunk=args.chunk)
        elapsed = time.perf_counter() - start
        stop.set()
        sender.join()
        after = size(log)
        log.close()
    print(
        f"| cleaning {report.removed:,} records of 100 bytes, chunk {args.chunk}, {log.store.dialect} | figure |"
    )
    print("| --- | ---: |")
    print(f"| records removed per second | {report.removed / elapsed:,.0f} |")
    print(f"| producer's longest send while cleaning | {max(pauses) * 1000:.1f} ms |")
    print(
        f"| producer's longest send in the second before (same thread, no cleaning) | {quiet * 1000:.1f} ms |"
    )
    print(
        f"| producer sends during cleaning | {len(pauses):,} ({len(pauses) / elapsed:,.0f}/s; {quiet_sends:,}/s before) |"
    )
    print(f"| size on disk before / after | {before / 1e6:.1f} MB / {after / 1e6:.1f} MB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
