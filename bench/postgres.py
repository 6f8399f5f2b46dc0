"""PostgreSQL benchmark: tidelog's PostgreSQL store beside raw psycopg doing the same work.

Prints figures, never passes or fails. Each figure is the best of several
runs, each in a fresh schema (dropped afterwards), tidelog and the baseline
interleaved so both see the same machine. The baseline keeps what a
single-partition log needs: a (partition, offset) primary key, a timestamp
and the value, with offsets counted by the client.

    python bench/postgres.py [--url postgresql://...] [--runs 5] [--records 50000]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

import tidelog

VALUE = os.urandom(100)
BATCH = 1000
DEFAULT_URL = os.environ.get("TIDELOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

RAW_TABLE = """
CREATE TABLE t (
    pid      bigint NOT NULL,
    "offset" bigint NOT NULL,
    ts       bigint NOT NULL,
    value    bytea NOT NULL,
    PRIMARY KEY (pid, "offset")
);
CREATE TABLE committed (grp text PRIMARY KEY, pid bigint NOT NULL, "offset" bigint NOT NULL);
"""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """A URL whose search_path is a new schema, dropped on the way out."""
    name = f"tl_bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        try:
            parts = urlsplit(url)
            query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
            query.append(("options", f"-csearch_path={name}"))
            yield urlunsplit(parts._replace(query=urlencode(query)))
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def raw_conn(url: str) -> psycopg.Connection:
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(RAW_TABLE)
    return conn


# baselines -------------------------------------------------------------------


def raw_batch(url: str, n: int) -> float:
    """COPY (binary) each batch in a transaction of its own."""
    with raw_conn(url) as conn:
        offset = 0
        start = time.perf_counter()
        for _ in range(n // BATCH):
            ts = now_ms()
            with (
                conn.transaction(),
                conn.cursor() as cur,
                cur.copy('COPY t (pid, "offset", ts, value) FROM STDIN (FORMAT BINARY)') as copy,
            ):
                copy.set_types(["int8", "int8", "int8", "bytea"])
                for _ in range(BATCH):
                    offset += 1
                    copy.write_row((1, offset, ts, VALUE))
        return n / (time.perf_counter() - start)


def raw_single(url: str, n: int) -> float:
    """One INSERT a record in autocommit."""
    with raw_conn(url) as conn:
        start = time.perf_counter()
        for offset in range(1, n + 1):
            conn.execute(
                'INSERT INTO t (pid, "offset", ts, value) VALUES (1, %s, %s, %s)', (offset, now_ms(), VALUE)
            )
        return n / (time.perf_counter() - start)


def raw_fetch_commit(url: str, n: int) -> float:
    """A range SELECT of a batch (binary results), then one UPDATE of the group's offset."""
    with raw_conn(url) as conn:
        with conn.cursor() as cur, cur.copy('COPY t (pid, "offset", ts, value) FROM STDIN') as copy:
            ts = now_ms()
            for offset in range(1, n + 1):
                copy.write_row((1, offset, ts, VALUE))
        conn.execute("INSERT INTO committed VALUES ('g', 1, 0)")
        conn.execute("VACUUM ANALYZE t")
        start = time.perf_counter()
        after = 0
        while True:
            rows = conn.execute(
                'SELECT "offset", ts, value FROM t WHERE pid = 1 AND "offset" > %s ORDER BY "offset" LIMIT %s',
                (after, BATCH),
                binary=True,
            ).fetchall()
            if not rows:
                break
            after = rows[-1][0]
            conn.execute("UPDATE committed SET \"offset\" = %s WHERE grp = 'g' AND pid = 1", (after,))
        return n / (time.perf_counter() - start)


# tidelog -----------------------------------------------------------------------


def tl_batch(url: str, n: int) -> float:
    with tidelog.open(url) as log:
        log.create_topic("bench", partitions=1)
        producer = log.producer()
        values = [VALUE] * BATCH
        start = time.perf_counter()
        for _ in range(n // BATCH):
            producer.send_batch("bench", values, partition=0)
        return n / (time.perf_counter() - start)


def tl_single(url: str, n: int) -> float:
    with tidelog.open(url) as log:
        log.create_topic("bench", partitions=1)
        send = log.producer().send
        start = time.perf_counter()
        for _ in range(n):
            send("bench", VALUE, partition=0)
        return n / (time.perf_counter() - start)


def tl_fetch_commit(url: str, n: int) -> float:
    with tidelog.open(url) as log:
        log.create_topic("bench", partitions=1)
        producer = log.producer()
        for _ in range(n // BATCH):
            producer.send_batch("bench", [VALUE] * BATCH, partition=0)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE tidelog_records")
        consumer = log.consumer("bench-group")
        start = time.perf_counter()
        while True:
            msgs = consumer.fetch("bench", 0, max_messages=BATCH)
            if not msgs:
                break
            consumer.commit(msgs[-1])
        elapsed = time.perf_counter() - start
        assert consumer.committed("bench", 0) == n
        return n / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=DEFAULT_URL, help="a database where schemas may be created")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=50_000, help="records per run (batched work)")
    ap.add_argument("--single", type=int, default=5_000, help="records per run (single sends)")
    args = ap.parse_args(argv)
    rows: list[tuple[str, Callable[[str, int], float], Callable[[str, int], float], int, float | None]] = [
        ("batched produce (1,000/batch)", raw_batch, tl_batch, args.records, 0.7),
        ("single send (autocommit)", raw_single, tl_single, args.single, None),
        ("fetch + commit (1,000/batch)", raw_fetch_commit, tl_fetch_commit, args.records, 0.7),
    ]
    with psycopg.connect(args.url) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    print(
        f"tidelog PostgreSQL benchmark: PostgreSQL {server} (synchronous_commit={sync}), "
        f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}), Python {sys.version.split()[0]}, "
        f"best of {args.runs} runs in fresh schemas, 100-byte values"
    )
    print("| work | raw psycopg (records/s) | tidelog (records/s) | ratio | target |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, raw, tl, n, target in rows:
        raw_best = tl_best = 0.0
        for _ in range(args.runs):
            with fresh_schema(args.url) as url:
                raw_best = max(raw_best, raw(url, n))
            with fresh_schema(args.url) as url:
                tl_best = max(tl_best, tl(url, n))
        ratio = tl_best / raw_best
        goal = f">= {target}" if target else "-"
        print(f"| {label} | {raw_best:,.0f} | {tl_best:,.0f} | {ratio:.2f} | {goal} |", flush=True)
    print("queue receive + ack beside pgmq: not measured yet (queue groups are not built)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
