"""Produce -> consume latency at a steady rate (issue 15: p99 under 5 ms at 1,000 records/s).

A producer sends one record at a time, paced to `--rate` records a second
(each send at its slot on the clock; a late one goes at once), for
`--seconds`; a consumer waits in its poll loop and notes when each record
arrives. Latency is arrival minus the moment the send began (so it holds
the producer's commit), and minus the moment it returned (the wake-up
alone; a record may arrive before its send returns), on CLOCK_MONOTONIC, which every process on the
machine shares. Printed: p50, p99 and max for each path:

- core, thread: `Producer.send` in one thread, a group consumer's `poll`
  in another thread of the same process (same Log: woken by its notifier)
- core, process: the consumer in another process on the same store (woken
  through the store: SQLite's data-version tick, PostgreSQL's NOTIFY)
- served: POST /v1/topics/{t}/records over one keep-alive connection, a
  long-poll GET /v1/topics/{t}/partitions/0/records?after=N&wait=10 from
  another process, against `tidelog serve` in a third

Prints figures, never passes or fails.

    python bench/latency.py [--rate 1000] [--seconds 5] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

import tidelog
from pgschema import postgres_schema  # bench/pgschema.py, beside this script
from tidelog.server.http.thread import free_port

TOPIC = "latency"
PAD = os.urandom(92)  # 100-byte values: an 8-byte sequence number, then padding


def value(n: int) -> bytes:
    return struct.pack(">q", n) + PAD


def number(v: bytes) -> int:
    return int(struct.unpack(">q", v[:8])[0])


Sends = list[tuple[float, float]]  # when each send began and when it returned


def paced(rate: float, count: int, send: Callable[[int], object]) -> Sends:
    """Call `send(n)` for n in 0..count-1, the n-th at start + n/rate."""
    started = [(0.0, 0.0)] * count
    start = time.monotonic() + 0.05
    for n in range(count):
        slot = start + n / rate
        wait = slot - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        began = time.monotonic()
        send(n)
        started[n] = (began, time.monotonic())
    return started


def core_consume(url: str | tidelog.Log, count: int, group: str, ready: Any, out: Any) -> None:
    """A group consumer's poll loop until `count` records arrived; sends [(n, arrival)].
    Given a URL it opens a Log of its own (another process); given a Log, it shares it."""
    log = tidelog.open(url) if isinstance(url, str) else url
    consumer = log.consumer(group, [TOPIC])
    seen: list[tuple[int, float]] = []
    consumer.poll(timeout=0)  # join the group (take the partition) before the producer starts
    ready.set()
    deadline = time.monotonic() + 120
    while len(seen) < count and time.monotonic() < deadline:
        msgs = consumer.poll(timeout=1.0)
        now = time.monotonic()
        seen += [(number(m.value), now) for m in msgs]
        if msgs:
            consumer.commit()
    consumer.close()
    if isinstance(url, str):
        log.close()
    out.put(seen)


def http_consume(base: str, count: int, ready: Any, out: Any) -> None:
    seen: list[tuple[int, float]] = []
    after = 0
    with httpx.Client(base_url=base, timeout=30) as http:
        ready.set()
        deadline = time.monotonic() + 120
        while len(seen) < count and time.monotonic() < deadline:
            r = http.get(
                f"/v1/topics/{TOPIC}-served/partitions/0/records", params={"after": after, "wait": 10}
            )
            now = time.monotonic()
            for rec in r.json()["records"]:
                seen.append((int(rec["key"]), now))
                after = rec["offset"]
    out.put(seen)


def latencies(started: Sends, seen: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """Arrival minus when each send began, and minus when it returned (ms)."""
    got = dict(seen)
    if len(got) != len(started):
        raise SystemExit(f"the consumer saw {len(got)} of {len(started)} records ({len(seen)} answers)")
    return (
        [(got[n] - started[n][0]) * 1000 for n in range(len(started))],
        [(got[n] - started[n][1]) * 1000 for n in range(len(started))],
    )


def core_thread(url: str, rate: float, count: int) -> tuple[list[float], list[float]]:
    log = tidelog.open(url)
    ready, out = threading.Event(), _Box()
    consumer = threading.Thread(target=core_consume, args=(log, count, "thread", ready, out))
    consumer.start()
    ready.wait(30)
    producer = log.producer()
    started = paced(rate, count, lambda n: producer.send(TOPIC, value(n), partition=0))
    consumer.join(130)
    log.close()
    return latencies(started, out.value)


def baseline_thread(url: str, rate: float, count: int) -> tuple[list[float], list[float]]:
    """The floor on this machine now: a queue.SimpleQueue between two threads, same pacing."""
    handoff: queue.SimpleQueue[int] = queue.SimpleQueue()
    seen: list[tuple[int, float]] = []

    def consume() -> None:
        while len(seen) < count:
            n = handoff.get()
            seen.append((n, time.monotonic()))

    consumer = threading.Thread(target=consume)
    consumer.start()
    started = paced(rate, count, handoff.put)
    consumer.join(130)
    return latencies(started, seen)


def pipe_consume(count: int, conn: Any, ready: Any, out: Any) -> None:
    seen: list[tuple[int, float]] = []
    ready.set()
    while len(seen) < count:
        n = conn.recv()
        seen.append((n, time.monotonic()))
    out.put(seen)


def baseline_process(url: str, rate: float, count: int) -> tuple[list[float], list[float]]:
    """The floor between processes: a multiprocessing Pipe, same pacing."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    ready, out = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=pipe_consume, args=(count, receiver, ready, out))
    consumer.start()
    ready.wait(30)
    started = paced(rate, count, sender.send)
    seen = out.get(timeout=130)
    consumer.join(10)
    return latencies(started, seen)


def core_process(url: str, rate: float, count: int) -> tuple[list[float], list[float]]:
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=core_consume, args=(url, count, "process", ready, out))
    consumer.start()
    ready.wait(30)
    log = tidelog.open(url)
    producer = log.producer()
    started = paced(rate, count, lambda n: producer.send(TOPIC, value(n), partition=0))
    seen = out.get(timeout=130)
    consumer.join(10)
    log.close()
    return latencies(started, seen)


def served(url: str, rate: float, count: int) -> tuple[list[float], list[float]]:
    port = free_port()
    cmd = [sys.executable, "-m", "tidelog", "serve", "--db", url, "--port", str(port)]
    cmd += ["--resp-port", "0", "--clean-interval", "0", "--log-level", "error"]
    server = subprocess.Popen(cmd)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.05)
        topic = f"{TOPIC}-served"
        httpx.post(f"{base}/v1/topics", json={"name": topic, "partitions": 1})
        ctx = multiprocessing.get_context("spawn")
        ready, out = ctx.Event(), ctx.Queue()
        consumer = ctx.Process(target=http_consume, args=(base, count, ready, out))
        consumer.start()
        ready.wait(30)
        time.sleep(0.3)  # the first long-poll is waiting
        with httpx.Client(base_url=base) as http:

            def send(n: int) -> None:
                body = {"records": [{"key": str(n), "value": PAD.hex()}]}
                http.post(f"/v1/topics/{topic}/records", json=body).raise_for_status()

            started = paced(rate, count, send)
        seen = out.get(timeout=130)
        consumer.join(10)
        return latencies(started, seen)
    finally:
        server.terminate()
        server.wait(10)


class _Box:
    """A one-value queue for the thread consumer (the process one uses multiprocessing's)."""

    value: Any = None

    def put(self, v: Any) -> None:
        self.value = v


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=1000.0, help="records a second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--url", help="a PostgreSQL URL (default: a new SQLite file)")
    parser.add_argument("--paths", default="floor-thread,thread,floor-process,process,served")
    args = parser.parse_args()
    count = int(args.rate * args.seconds)
    paths = {
        "floor-thread": baseline_thread,
        "thread": core_thread,
        "floor-process": baseline_process,
        "process": core_process,
        "served": served,
    }
    load = os.getloadavg()
    print(
        f"produce -> consume latency, {args.rate:,.0f} records/s for {args.seconds:g} s ({count} records), "
        f"store {'PostgreSQL' if args.url else 'SQLite file'}; load average {load[0]:.2f} at start"
    )
    print(f"{'':54} {'from send began':>23}   {'from send returned':>18}")
    print(f"{'path':54} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}   {'p50 ms':>8} {'p99 ms':>8}")
    for name in args.paths.split(","):
        if args.url:
            with postgres_schema(args.url, "latency") as url:
                if url is None:
                    raise SystemExit(f"PostgreSQL at {args.url} does not answer")
                lat, after = run(paths[name], url, args.rate, count)
        else:
            with tempfile.TemporaryDirectory(prefix="tidelog-latency-") as tmp:
                lat, after = run(paths[name], os.path.join(tmp, "latency.db"), args.rate, count)
        label = {
            "floor-thread": "floor: queue.SimpleQueue put -> get, two threads",
            "floor-process": "floor: multiprocessing Pipe send -> recv, two processes",
            "thread": "core: send -> poll, consumer thread (same Log)",
            "process": "core: send -> poll, consumer process (via store)",
            "served": "served: POST records -> long-poll GET, 3 processes",
        }[name]
        print(
            f"{label:54} {pct(lat, 50):>7.2f} {pct(lat, 99):>7.2f} {max(lat):>7.2f}   "
            f"{pct(after, 50):>8.2f} {pct(after, 99):>8.2f}",
            flush=True,
        )


Latencies = tuple[list[float], list[float]]


def run(path: Callable[[str, float, int], Latencies], url: str, rate: float, count: int) -> Latencies:
    log = tidelog.open(url)
    log.create_topic(TOPIC, 1)
    log.close()
    return path(url, rate, count)


if __name__ == "__main__":
    main()
