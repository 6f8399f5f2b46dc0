"""PostgreSQL queue benchmark: receive + ack with concurrent workers, beside pgmq.

Prints figures, never passes or fails. A backlog of records is drained by
`--workers` processes, each leasing `--batch` records a call and acking them
one by one (`Queue.receive(max_messages=batch)` then `Queue.ack` each), until
the queue is empty. The same shape runs on pgmq's own SQL functions
(`pgmq.read(queue, vt, batch)` then `pgmq.delete(queue, msg_id)` each) in a
database of its own, when the `pgmq` Python package is installed: it ships
pgmq's SQL-only install script (`pip install 'tidelog[bench]'`). The two
take turns within each run; the figures are the best run of each side, the
ratio the median of the runs' ratios. pgmq's published figure is quoted, not
measured.

    python bench/postgres_queues.py [--url postgresql://...] [--runs 3] [--records 50000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

import tidelog
from postgres import DEFAULT_URL, fresh_schema

VALUE = os.urandom(100)
PGMQ_MESSAGE = json.dumps({"v": VALUE.hex()[:100]})  # about the same size, as jsonb
VISIBILITY_S = 600  # long enough that no lease expires during a run: each record goes out once
PUBLISHED = (
    "pgmq's published figure for this shape (10 consumers reading batches of 100): "
    "about 30,000 reads/s on 16 vCPUs (Tembo, 'Over 30k messages per second on Postgres', "
    "Dec 2023) -- quoted, not measured here"
)


# workers (run in processes of their own) ------------------------------------------


def tidelog_worker(url: str, batch: int, barrier: Any, results: Any) -> None:
    with tidelog.open(url) as log:
        q = log.queue("bench", visibility_timeout=VISIBILITY_S)
        barrier.wait()
        start = time.monotonic()
        done = 0
        while got := q.receive(max_messages=batch):
            for d in got:
                q.ack(d)
            done += len(got)
        results.put((start, time.monotonic(), done))


def pgmq_worker(url: str, batch: int, barrier: Any, results: Any) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        read = conn.cursor()
        delete = conn.cursor()
        barrier.wait()
        start = time.monotonic()
        done = 0
        while True:
            rows = read.execute(
                "SELECT msg_id, message FROM pgmq.read('bench', %s, %s)", (VISIBILITY_S, batch)
            ).fetchall()
            if not rows:
                break
            for msg_id, _ in rows:
                delete.execute("SELECT pgmq.delete('bench', %s::bigint)", (msg_id,))
            done += len(rows)
        results.put((start, time.monotonic(), done))


def drain(target: Any, url: str, workers: int, batch: int) -> tuple[float, int]:
    """Run the workers against a loaded queue; (seconds from the first start to the last end, records)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, batch, barrier, results)) for _ in range(workers)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a worker failed with exit code {p.exitcode}")
    first = min(o[0] for o in outcomes)
    last = max(o[1] for o in outcomes)
    return last - first, sum(o[2] for o in outcomes)


# the two sides -----------------------------------------------------------------


def run_tidelog(url: str, n: int, workers: int, batch: int) -> float:
    with fresh_schema(url) as schema_url:
        with tidelog.open(schema_url) as log:
            log.create_topic("bench", partitions=1)
            q = log.queue("bench", visibility_timeout=VISIBILITY_S)
            for _ in range(n // 1000):
                q.send_batch([VALUE] * 1000)
        with psycopg.connect(schema_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        seconds, done = drain(tidelog_worker, schema_url, workers, batch)
        with tidelog.open(schema_url) as log:
            s = log.queue("bench").stats()
        if done != n or (s.available, s.in_flight) != (0, 0):
            raise RuntimeError(f"tidelog: {done} of {n} records delivered, {s}")
    return n / seconds


def pgmq_sql() -> str | None:
    """pgmq's SQL-only install script, from the pgmq package; None when it is not installed."""
    try:
        from pgmq.install import get_embedded_install_sql
    except ImportError:
        return None
    return get_embedded_install_sql()


def pgmq_version() -> str:
    from pgmq.install import get_embedded_sql_version

    return get_embedded_sql_version()


@contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A URL to a new database, dropped on the way out: pgmq installs into a schema named pgmq."""
    name = f"tl_bench_pgmq_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        parts = urlsplit(url)
        yield urlunsplit(parts._replace(path="/" + name))
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def run_pgmq(url: str, script: str, n: int, workers: int, batch: int) -> float:
    with fresh_database(url) as db_url:
        with psycopg.connect(db_url, autocommit=True) as conn:
            with conn.transaction():
                conn.execute(script)
            conn.execute("SELECT pgmq.create('bench')")
            for _ in range(n // 1000):
                conn.execute("SELECT pgmq.send_batch('bench', %s::jsonb[])", ([PGMQ_MESSAGE] * 1000,))
            conn.execute("VACUUM ANALYZE")
        seconds, done = drain(pgmq_worker, db_url, workers, batch)
        with psycopg.connect(db_url, autocommit=True) as conn:
            left = conn.execute("SELECT count(*) FROM pgmq.q_bench").fetchone()[0]
        if done != n or left:
            raise RuntimeError(f"pgmq: {done} of {n} records delivered, {left} left")
    return n / seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--url", default=DEFAULT_URL, help="a database where schemas and databases may be created"
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=50_000, help="backlog per run (a multiple of 1,000)")
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args(argv)
    n = args.records // 1000 * 1000
    with psycopg.connect(args.url) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    print(
        f"tidelog PostgreSQL queue benchmark: PostgreSQL {server} (synchronous_commit={sync}), "
        f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}), Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs shared by server and workers; {args.workers} worker processes, "
        f"receive {args.batch} + ack each, {n:,} records of 100 bytes a run, {args.runs} runs; "
        "best run of each side, median ratio"
    )
    script = pgmq_sql()
    tl_rates: list[float] = []
    mq_rates: list[float] = []
    for _ in range(args.runs):
        tl_rates.append(run_tidelog(args.url, n, args.workers, args.batch))
        if script is not None:
            mq_rates.append(run_pgmq(args.url, script, n, args.workers, args.batch))
    shape = f"receive + ack ({args.workers} workers, batches of {args.batch})"
    print("| work | pgmq SQL functions (records/s) | tidelog (records/s) | ratio |")
    print("| --- | ---: | ---: | ---: |")
    if script is None:
        print(f"| {shape} | not measured | {max(tl_rates):,.0f} | - |")
        print(
            "pgmq: not measured: its SQL-only install comes with the pgmq package: pip install 'tidelog[bench]'"
        )
    else:
        ratio = statistics.median(t / m for t, m in zip(tl_rates, mq_rates))
        print(f"| {shape} | {max(mq_rates):,.0f} | {max(tl_rates):,.0f} | {ratio:.2f} |")
        print(f"pgmq {pgmq_version()}, installed from its SQL-only script (the pgmq Python package)")
    print(PUBLISHED)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
