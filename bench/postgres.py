"""PostgreSQL benchmark: tidelog's PostgreSQL store beside raw psycopg doing the same work.

Prints figures, never passes or fails. Each run works in a fresh schema
(dropped afterwards) and takes turns between the baseline and tidelog every
few operations, so both see the same machine even when other work comes and
goes on it. The figures are the best run of each side; the ratio is the
median of the runs' own ratios. The baseline keeps what a single-partition
log needs: a (partition, offset) primary key, a timestamp and the value,
with offsets counted by the client.

    python bench/postgres.py [--url postgresql://...] [--runs 5] [--records 50000]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
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
SINGLE_TURN = 50  # single sends per turn
DEFAULT_URL = os.environ.get("TIDELOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

RAW_TABLE = """
CREATE TABLE t (
    pid      bigint NOT NULL,
    "offset" bigint NOT NULL,
    ts       bigint NOT NULL,
    value    bytea NOT NULL,
    PRIMARY KEY (pid, "offset")
);
CREATE TABLE committed (grp text PRIMARY KEY, "offset" bigint NOT NULL);
INSERT INTO committed VALUES ('g', 0);
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


class Clock:
    """Time spent by one side, summed over its turns."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextmanager
    def turn(self) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.seconds += time.perf_counter() - start


# each work: (raw clock, tidelog clock) for n records, taking turns ---------------


def batched_produce(url: str, n: int) -> tuple[float, float]:
    """Baseline: binary COPY of each batch in a transaction of its own."""
    raw, tl = Clock(), Clock()
    with psycopg.connect(url, autocommit=True) as conn, tidelog.open(url) as log:
        conn.execute(RAW_TABLE)
        log.create_topic("bench", partitions=1)
        producer = log.producer()
        values = [VALUE] * BATCH
        offset = 0
        for _ in range(n // BATCH):
            with raw.turn():
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
            with tl.turn():
                producer.send_batch("bench", values, partition=0)
    return raw.seconds, tl.seconds


def single_send(url: str, n: int) -> tuple[float, float]:
    """Baseline: one INSERT a record in autocommit."""
    raw, tl = Clock(), Clock()
    with psycopg.connect(url, autocommit=True) as conn, tidelog.open(url) as log:
        conn.execute(RAW_TABLE)
        log.create_topic("bench", partitions=1)
        send = log.producer().send
        insert = 'INSERT INTO t (pid, "offset", ts, value) VALUES (1, %s, %s, %s)'
        for first in range(1, n + 1, SINGLE_TURN):
            with raw.turn():
                for offset in range(first, first + SINGLE_TURN):
                    conn.execute(insert, (offset, now_ms(), VALUE))
            with tl.turn():
                for _ in range(SINGLE_TURN):
                    send("bench", VALUE, partition=0)
    return raw.seconds, tl.seconds


def fetch_commit(url: str, n: int) -> tuple[float, float]:
    """Baseline: a range SELECT of a batch (binary results), then an UPDATE of the group's offset."""
    raw, tl = Clock(), Clock()
    with psycopg.connect(url, autocommit=True) as conn, tidelog.open(url) as log:
        conn.execute(RAW_TABLE)
        with conn.cursor() as cur, cur.copy('COPY t (pid, "offset", ts, value) FROM STDIN') as copy:
            ts = now_ms()
            for offset in range(1, n + 1):
                copy.write_row((1, offset, ts, VALUE))
        log.create_topic("bench", partitions=1)
        producer = log.producer()
        for _ in range(n // BATCH):
            producer.send_batch("bench", [VALUE] * BATCH, partition=0)
        conn.execute("VACUUM ANALYZE t")
        conn.execute("VACUUM ANALYZE tidelog_records")
        consumer = log.consumer("bench-group")
        after = 0
        while True:
            with raw.turn():
                rows = conn.execute(
                    'SELECT "offset", ts, value FROM t WHERE pid = 1 AND "offset" > %s ORDER BY "offset" LIMIT %s',
                    (after, BATCH),
                    binary=True,
                ).fetchall()
                if rows:
                    after = rows[-1][0]
                    conn.execute("UPDATE committed SET \"offset\" = %s WHERE grp = 'g'", (after,))
            with tl.turn():
                msgs = consumer.fetch("bench", 0, max_messages=BATCH)
                if msgs:
                    consumer.commit(msgs[-1])
            if not rows and not msgs:
                break
        assert after == n and consumer.committed("bench", 0) == n
    return raw.seconds, tl.seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=DEFAULT_URL, help="a database where schemas may be created")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=50_000, help="records per run (batched work)")
    ap.add_argument("--single", type=int, default=5_000, help="records per run (single sends)")
    args = ap.parse_args(argv)
    works: list[tuple[str, Callable[[str, int], tuple[float, float]], int, float | None]] = [
        ("batched produce (1,000/batch)", batched_produce, args.records, 0.7),
        ("single send (autocommit)", single_send, args.single, None),
        ("fetch + commit (1,000/batch)", fetch_commit, args.records, 0.7),
    ]
    with psycopg.connect(args.url) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    print(
        f"tidelog PostgreSQL benchmark: PostgreSQL {server} (synchronous_commit={sync}), "
        f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}), Python {sys.version.split()[0]}, "
        f"{args.runs} runs in fresh schemas, 100-byte values; best run of each side, median ratio"
    )
    print("| work | raw psycopg (records/s) | tidelog (records/s) | ratio | target |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, work, n, target in works:
        raw_rates, tl_rates = [], []
        for _ in range(args.runs):
            with fresh_schema(args.url) as url:
                raw_s, tl_s = work(url, n)
            raw_rates.append(n / raw_s)
            tl_rates.append(n / tl_s)
        ratio = statistics.median(t / r for r, t in zip(raw_rates, tl_rates))
        goal = f">= {target}" if target else "-"
        print(
            f"| {label} | {max(raw_rates):,.0f} | {max(tl_rates):,.0f} | {ratio:.2f} | {goal} |", flush=True
        )
    print("queue receive + ack beside pgmq: python bench/postgres_queues.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
