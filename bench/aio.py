"""tidelog.aio beside the sync API, in one run, on fresh SQLite files (or --url).

1. Throughput, 100-byte values: single sends, receive + ack one at a
   time, fetch + commit in batches of 1,000. The sync API in a loop is the
   baseline; the async API awaited one call at a time in one task (each call
   hops to the log's thread pool and back), and from 16 tasks at once (for
   fetch + commit, 16 partitions of as many records, one a task).
2. 1,000 concurrent `q.receive(wait=30)` on one event loop: the process's
   threads and RSS while they wait, how many lease attempts one sent record
   causes (each waiter looking again, or one in turn), and how long until the
   others got theirs after one batch is sent. The baseline is the sync
   way to wait as many at once: 1,000 threads blocked in `q.receive(wait=30)`.
   Each side runs in a fresh process, so neither's memory colours the other.

Prints figures, never passes or fails.

    python bench/aio.py [--records 3000] [--runs 3] [--waiters 1000] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable

import tidelog
import tidelog.aio
from tidelog.aio.runtime import DEFAULT_THREADS

VALUE = os.urandom(100)
TASKS = 16


def fresh_url(args: argparse.Namespace, tmp: str) -> str:
    if args.url:
        return args.url
    return os.path.join(tmp, f"bench-{time.perf_counter_ns()}.db")


def topic_name(kind: str) -> str:
    # On a shared --url every run needs topics of its own.
    return f"{kind}-{time.perf_counter_ns()}"


# sync --------------------------------------------------------------------------------


def sync_send(url: str, n: int) -> float:
    with tidelog.open(url) as log:
        topic, producer = topic_name("send"), log.producer()
        log.create_topic(topic)
        start = time.perf_counter()
        for _ in range(n):
            producer.send(topic, VALUE, partition=0)
        return n / (time.perf_counter() - start)


def sync_receive_ack(url: str, n: int) -> float:
    with tidelog.open(url) as log:
        q = log.queue(topic_name("queue"))
        for i in range(0, n, 1000):
            q.send_batch([VALUE] * min(1000, n - i))
        start = time.perf_counter()
        for _ in range(n):
            (d,) = q.receive()
            q.ack(d)
        return n / (time.perf_counter() - start)


def sync_fetch_commit(url: str, n: int) -> float:
    with tidelog.open(url) as log:
        topic = topic_name("fetch")
        log.create_topic(topic)
        for i in range(0, n, 1000):
            log.producer().send_batch(topic, [VALUE] * min(1000, n - i), partition=0)
        consumer = log.consumer("bench")
        start = time.perf_counter()
        done = 0
        while done < n:
            msgs = consumer.fetch(topic, 0, max_messages=1000)
            consumer.commit(msgs[-1])
            done += len(msgs)
        return n / (time.perf_counter() - start)


# async -------------------------------------------------------------------------------


async def in_tasks(tasks: int, n: int, work: Callable[[int], Awaitable[None]]) -> float:
    """Run `work(share)` in `tasks` tasks splitting n; records per second."""
    shares = [n // tasks + (1 if i < n % tasks else 0) for i in range(tasks)]
    start = time.perf_counter()
    await asyncio.gather(*(work(share) for share in shares))
    return n / (time.perf_counter() - start)


async def async_send(url: str, n: int, tasks: int) -> float:
    async with tidelog.aio.open(url) as log:
        topic, producer = topic_name("send"), log.producer()
        await log.create_topic(topic)

        async def work(share: int) -> None:
            for _ in range(share):
                await producer.send(topic, VALUE, partition=0)

        return await in_tasks(tasks, n, work)


async def async_receive_ack(url: str, n: int, tasks: int) -> float:
    async with tidelog.aio.open(url) as log:
        q = log.queue(topic_name("queue"))
        for i in range(0, n, 1000):
            await q.send_batch([VALUE] * min(1000, n - i))

        async def work(share: int) -> None:
            for _ in range(share):
                (d,) = await q.receive()
                await q.ack(d)

        return await in_tasks(tasks, n, work)


async def async_fetch_commit(url: str, n: int, tasks: int) -> float:
    async with tidelog.aio.open(url) as log:
        topic = topic_name("fetch")
        # A manual consumer reads a partition in order: each task reads a
        # partition of its own holding n records (the sync loop reads one).
        await log.create_topic(topic, partitions=tasks)
        for p in range(tasks):
            for i in range(0, n, 1000):
                await log.producer().send_batch(topic, [VALUE] * min(1000, n - i), partition=p)
        consumer = log.consumer("bench")

        async def read(p: int) -> None:
            done = 0
            while done < n:
                msgs = await consumer.fetch(topic, p, max_messages=1000)
                await consumer.commit(msgs[-1])
                done += len(msgs)

        start = time.perf_counter()
        await asyncio.gather(*(read(p) for p in range(tasks)))
        return tasks * n / (time.perf_counter() - start)


# waiters (each side in a process of its own) ------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def os_threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


class CountingClock:
    """The wall clock, counting the lease attempts that read it: the core's
    `Queue._receive_once` reads the clock once a store call (sync and async alike)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        if sys._getframe(1).f_code.co_name == "_receive_once":
            self.calls += 1
        return time.time_ns() // 1_000_000


async def async_waiters(url: str, n: int) -> dict[str, float]:
    clock = CountingClock()
    async with tidelog.aio.open(url, clock=clock) as log:
        q = log.queue(topic_name("wait"), visibility_timeout=600)
        await q.receive(wait=0.01)  # the pool, the hub and the store's watch exist now
        before = (os_threads(), rss_mb())
        waiters = [asyncio.create_task(q.receive(wait=30)) for _ in range(n)]
        for _ in range(3):  # every waiter made its first read and waits on the loop
            await asyncio.sleep(0)
            await log._runtime.idle()
        during = (os_threads(), rss_mb())
        # One record: how many lease attempts does it cost?
        calls = clock.calls
        await q.send(VALUE)
        done, rest = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(0.5)
        attempts = clock.calls - calls
        start = time.perf_counter()
        await q.send_batch([VALUE] * (n - 1))
        got = await asyncio.gather(*rest)
        woke = time.perf_counter() - start
        assert sum(len(g) for g in got) == n - 1
    return {
        "threads_before": before[0],
        "rss_before": before[1],
        "threads": during[0],
        "rss": during[1],
        "attempts": attempts,
        "woke_s": woke,
    }


def sync_waiters(url: str, n: int) -> dict[str, float]:
    clock = CountingClock()
    with tidelog.open(url, clock=clock) as log:
        q = log.queue(topic_name("wait"), visibility_timeout=600)
        q.receive(wait=0.01)
        before = (os_threads(), rss_mb())
        got: list[int] = []
        waiting = threading.Semaphore(0)

        def wait() -> None:
            waiting.release()
            got.append(len(q.receive(wait=30)))

        threads = [threading.Thread(target=wait, daemon=True) for _ in range(n)]
        for t in threads:
            t.start()
        for _ in range(n):
            waiting.acquire()
        time.sleep(0.5)  # let the last ones pass their first read and block
        during = (os_threads(), rss_mb())
        calls = clock.calls
        q.send(VALUE)
        time.sleep(0.5)
        attempts = clock.calls - calls
        start = time.perf_counter()
        q.send_batch([VALUE] * (n - 1))
        for t in threads:
            t.join()
        woke = time.perf_counter() - start
        assert sum(got) == n
    return {
        "threads_before": before[0],
        "rss_before": before[1],
        "threads": during[0],
        "rss": during[1],
        "attempts": attempts,
        "woke_s": woke,
    }


def waiters_in_a_process(kind: str, url: str, n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--waiters-side", kind, "--waiters", str(n), "--url", url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


# the run --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs (throughput)")
    parser.add_argument("--url", default=None, help="a store URL (default: fresh SQLite files)")
    parser.add_argument("--waiters-side", choices=["sync", "async"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.waiters_side:
        if args.waiters_side == "async":
            figures = asyncio.run(async_waiters(args.url, args.waiters))
        else:
            figures = sync_waiters(args.url, args.waiters)
        print(json.dumps(figures))
        return

    import sqlite3

    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        store = args.url.split(":", 1)[0] if args.url else f"SQLite {sqlite3.sqlite_version}"
        print(
            f"tidelog.aio benchmark: {store}, Python {sys.version.split()[0]}, {n} records of 100 bytes, "
            f"best of {args.runs}, {DEFAULT_THREADS} pool threads a log"
        )
        print()
        print(
            f"| work | sync (rec/s) | async, 1 task (rec/s) | ratio | async, {TASKS} tasks (rec/s) | ratio |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        rows = [
            ("send, one at a time", sync_send, async_send),
            ("receive + ack, one at a time", sync_receive_ack, async_receive_ack),
            ("fetch + commit (1,000 a batch)", sync_fetch_commit, async_fetch_commit),
        ]
        for name, sync_fn, async_fn in rows:
            # Best of --runs, the three sides taking turns so that a burst of
            # load on the shared machine does not fall on one side only.
            base = one = many = 0.0
            for _ in range(args.runs):
                base = max(base, sync_fn(fresh_url(args, tmp), n))
                one = max(one, asyncio.run(async_fn(fresh_url(args, tmp), n, 1)))
                many = max(many, asyncio.run(async_fn(fresh_url(args, tmp), n, TASKS)))
            print(
                f"| {name} | {base:,.0f} | {one:,.0f} | {one / base:.2f} | {many:,.0f} | {many / base:.2f} |"
            )

        w = args.waiters
        print()
        print(
            f"| {w:,} waiting `q.receive(wait=30)` | threads before / while waiting | RSS MB before / while "
            f"| lease attempts one send causes | the other {w - 1:,} woken by one batch |"
        )
        print("| --- | ---: | ---: | ---: | ---: |")
        for label, kind in ((f"sync: {w:,} threads", "sync"), ("tidelog.aio: tasks on one loop", "async")):
            f = waiters_in_a_process(kind, fresh_url(args, tmp), w)
            print(
                f"| {label} | {f['threads_before']:.0f} / {f['threads']:.0f} | "
                f"{f['rss_before']:.1f} / {f['rss']:.1f} | {f['attempts']:,.0f} | {f['woke_s'] * 1000:,.0f} ms |"
            )


if __name__ == "__main__":
    main()
