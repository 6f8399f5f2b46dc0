"""Capacity of one store: records/s for produce, fetch and queue receive+ack.

For each store (SQLite file, PostgreSQL, a `tidelog serve` over http:// on
a SQLite file), each partition count and each number of client processes,
runs every operation for a fixed time and prints the records/s of all
processes together. Prints figures, never passes or fails; the figures are
this machine's (CPU count and load average are printed beside them).

    python bench/capacity.py [--seconds 2] [--procs 1,4] [--partitions 1,4] [--stores sqlite,postgresql,http]

produce: send_batch of 100 records of 100 bytes, one transaction each.
fetch:   Log.read pages of 1,000 records, each process over every partition.
queue:   receive(max_messages=100) then ack each record, in one queue group.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import tidelog
from pgschema import postgres_schema  # bench/pgschema.py, beside this script
from tidelog.server.http.thread import free_port

VALUE = os.urandom(100)
BATCH = 100
PAGE = 1000
PG_URL = os.environ.get("TIDELOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def produce(url: str, topic: str, seconds: float, ready) -> int:
    n = 0
    with tidelog.open(url) as log:
        producer = log.producer()
        ready.wait()  # every process has opened its log: the clock starts together
        end = time.time() + seconds
        while time.time() < end:
            producer.send_batch(topic, [VALUE] * BATCH)
            n += BATCH
    return n


def fetch(url: str, topic: str, seconds: float, ready) -> int:
    n = 0
    with tidelog.open(url) as log:
        partitions = log.topic(topic).partitions
        after = dict.fromkeys(range(partitions), 0)
        ready.wait()  # every process has opened its log: the clock starts together
        end = time.time() + seconds
        while time.time() < end:
            for p in range(partitions):
                page = log.read(topic, p, after=after[p], limit=PAGE)
                if not page:
                    after[p] = 0  # read it all: from the start again
                    continue
                n += len(page)
                after[p] = page[-1].offset
    return n


def queue(url: str, topic: str, seconds: float, ready) -> int:
    n = 0
    with tidelog.open(url) as log:
        q = log.queue(topic, group="capacity", visibility_timeout=60)
        ready.wait()  # every process has opened its log: the clock starts together
        end = time.time() + seconds
        while time.time() < end:
            got = q.receive(max_messages=BATCH)
            if not got:
                break  # drained: the fill was too small for this rate
            for d in got:
                q.ack(d)
            n += len(got)
    return n


def _child(op, url: str, topic: str, seconds: float, ready, results) -> None:
    results.put(op(url, topic, seconds, ready))


def run(op, url: str, topic: str, procs: int, seconds: float) -> float:
    """records/s of `procs` processes running `op` together for `seconds`."""
    ctx = mp.get_context("spawn")
    ready, results = ctx.Barrier(procs), ctx.Queue()
    children = [
        ctx.Process(target=_child, args=(op, url, topic, seconds, ready, results)) for _ in range(procs)
    ]
    for child in children:
        child.start()
    counts = [results.get(timeout=300) for _ in children]
    for child in children:
        child.join(60)
    return sum(counts) / seconds


def fill(url: str, topic: str, partitions: int, n: int) -> None:
    with tidelog.open(url) as log:
        log.create_topic(topic, partitions=partitions)
        producer = log.producer()
        for p in range(partitions):
            for lo in range(0, n // partitions, 10_000):
                producer.send_batch(topic, [VALUE] * min(10_000, n // partitions - lo), partition=p)


@contextmanager
def store(kind: str, tmp: str) -> Iterator[str | None]:
    if kind == "sqlite":
        yield os.path.join(tmp, f"capacity-{secrets.token_hex(3)}.db")
    elif kind == "postgresql":
        with postgres_schema(PG_URL, "capacity") as url:
            yield url
    else:
        with served(os.path.join(tmp, f"served-{secrets.token_hex(3)}.db")) as url:
            yield url


@contextmanager
def served(db: str) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", db, "--port", str(port)]
    argv += ["--resp-port", "0", "--clean-interval", "0", "--log-level", "error"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("tidelog serve did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--procs", default="1,4")
    parser.add_argument("--partitions", default="1,4")
    parser.add_argument("--stores", default="sqlite,postgresql,http")
    parser.add_argument("--fill", type=int, default=200_000, help="records filled before fetch and queue")
    args = parser.parse_args()
    procs = [int(x) for x in args.procs.split(",")]
    partitions = [int(x) for x in args.partitions.split(",")]
    tmp = tempfile.mkdtemp(prefix="tidelog-capacity-")
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; {args.seconds:g} s a cell"
    )
    print("| store | partitions | processes | produce rec/s | fetch rec/s | queue receive+ack rec/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind in args.stores.split(","):
        for parts in partitions:
            with store(kind, tmp) as url:
                if url is None:
                    print(f"| {kind} | {parts} | - | skipped: no server | | |")
                    continue
                fill(url, "filled", parts, args.fill)
                with tidelog.open(url) as log:
                    log.create_topic("produced", partitions=parts)
                for n in procs:
                    produced = run(produce, url, "produced", n, args.seconds)
                    fetched = run(fetch, url, "filled", n, args.seconds)
                    received = run(queue, url, "filled", n, args.seconds)
                    print(
                        f"| {kind} | {parts} | {n} | {produced:,.0f} | {fetched:,.0f} | {received:,.0f} |",
                        flush=True,
                    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
