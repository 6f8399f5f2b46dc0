"""One fixed workload of bench/core.py, to count its instructions under callgrind.

Wall-clock figures move with the machine's load; instruction counts do not.
Run a workload at two sizes and divide the difference by the extra units,
so start-up and set-up cancel out:

    valgrind --tool=callgrind --callgrind-out-file=/tmp/a python bench/core_workload.py tl_single 1000
    valgrind --tool=callgrind --callgrind-out-file=/tmp/b python bench/core_workload.py tl_single 3000
    # instructions a send = (Collected of b - Collected of a) / 2000

Workloads (N is sends, records read, or records in batches of 1,000):
raw_single, tl_single, raw_read, tl_read (fetch + commit; 20,000 records are
stored first, whatever N), raw_batch, tl_batch.
"""

from __future__ import annotations

import os
import sys
import tempfile

import tidelog
from core import BATCH, VALUE, now_ms, raw_conn, read_pages

STORED = 20_000  # records present before a read workload


def main(op: str, n: int) -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="tidelog-workload-"), "x.db")
    if op.startswith("raw_"):
        conn = raw_conn(path)
        if op == "raw_single":
            for _ in range(n):
                conn.execute("INSERT INTO t (ts, value) VALUES (?, ?)", (now_ms(), VALUE))
        elif op == "raw_batch":
            for _ in range(n // BATCH):
                ts = now_ms()
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO t (ts, value) VALUES (?, ?)", [(ts, VALUE)] * BATCH)
                conn.execute("COMMIT")
        elif op == "raw_read":
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO t (ts, value) VALUES (?, ?)", [(now_ms(), VALUE)] * STORED)
            conn.execute("COMMIT")
            read_pages(conn, "SELECT id, ts, value FROM t WHERE id > ? ORDER BY id LIMIT ?", upto=n)
        else:
            raise SystemExit(f"unknown workload {op!r}")
        return
    log = tidelog.open(path)
    log.create_topic("bench", partitions=1)
    producer = log.producer()
    if op == "tl_single":
        send = producer.send
        for _ in range(n):
            send("bench", VALUE, partition=0)
    elif op == "tl_batch":
        for _ in range(n // BATCH):
            producer.send_batch("bench", [VALUE] * BATCH, partition=0)
    elif op == "tl_read":
        for _ in range(STORED // BATCH):
            producer.send_batch("bench", [VALUE] * BATCH, partition=0)
        consumer = log.consumer("bench-group")
        got = 0
        while got < n:
            msgs = consumer.fetch("bench", 0, max_messages=BATCH)
            if not msgs:
                break
            consumer.commit(msgs[-1])
            got += len(msgs)
    else:
        raise SystemExit(f"unknown workload {op!r}")
    log.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
