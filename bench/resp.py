"""Redis protocol benchmark: tidelog's RESP front beside the real Redis server.

Measured in the same run, on loopback only, with bounded request counts:

- `redis-benchmark -c 50 XADD <key> * f <100 bytes>`, unpipelined and with -P 16;
- an XREADGROUP + XACK loop from redis-py (one entry a round trip, and 100);
- an XREAD COUNT 10 loop from redis-py through a stream, by id.

tidelog commits every XADD to SQLite before it replies (WAL,
synchronous=NORMAL); Redis keeps its data in memory. Each server's CPU time
(user + system, from /proc) over each run is divided by the entries it
handled: on a machine shared with other work that figure holds where the
rates move with the load. The servers take turns `--rounds` times (tidelog,
the `--before` tree's tidelog, Redis), and the medians are compared. Prints
figures and ratios, never passes or fails.

    python bench/resp.py [--requests 50000] [--rounds 3] [--before DIR] [--redis-port 6379]

`--before DIR` also runs a server from another source tree (a `src`
directory, e.g. `git archive main src | tar -x -C /tmp/before`, then
`--before /tmp/before/src`), measured alike in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from peers import free_port, tree_cpu  # bench/ is the script's directory

VALUE = "x" * 100


def xadd(port: int, key: str, requests: int, pipeline: int) -> int:
    """XADDs from redis-benchmark's 50 connections; returns how many."""
    subprocess.run(
        [
            "redis-benchmark",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-c",
            "50",
            "-n",
            str(requests),
            "-P",
            str(pipeline),
            "--csv",
            "XADD",
            key,
            "*",
            "f",
            VALUE,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return requests


def group_loop(port: int, key: str, entries: int, count: int, measure: Callable[[], Iterator[None]]) -> int:
    """XREADGROUP COUNT n + XACK of what came back, over `entries` added
    beforehand (outside the measurement); returns the entries read."""
    r = redis.Redis(host="127.0.0.1", port=port)
    r.delete(key)
    pipe = r.pipeline(transaction=False)
    for _ in range(entries):
        pipe.xadd(key, {"f": VALUE})
    pipe.execute()
    r.xgroup_create(key, "bench", id="0")
    done = 0
    with measure():
        while done < entries:
            got = r.xreadgroup("bench", "c1", {key: ">"}, count=count)
            if not got:
                break
            ids = [e[0] for e in got[0][1]]
            r.xack(key, "bench", *ids)
            done += len(ids)
    r.delete(key)
    r.close()
    return done


def xread_loop(port: int, key: str, entries: int, measure: Callable[[], Iterator[None]]) -> int:
    """XREAD COUNT 10 after the last id read, through `entries` added
    beforehand; returns the entries read."""
    r = redis.Redis(host="127.0.0.1", port=port)
    r.delete(key)
    pipe = r.pipeline(transaction=False)
    for _ in range(entries):
        pipe.xadd(key, {"f": VALUE})
    pipe.execute()
    done, last = 0, "0"
    with measure():
        while done < entries:
            got = r.xread({key: last}, count=10)
            if not got:
                break
            last = got[0][1][-1][0]
            done += len(got[0][1])
    r.delete(key)
    r.close()
    return done


def reachable(port: int) -> bool:
    try:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2).ping()
    except redis.RedisError:
        return False


@contextmanager
def tidelog_server(tmp: str, name: str, src: str | None) -> Iterator[tuple[int, int]]:
    """A RESP server on a new SQLite file (from `src` when given): (port, pid)."""
    port = free_port()
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.path.abspath(src)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidelog.server.resp",
            "--db",
            os.path.join(tmp, f"{name}.db"),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening on ..."
        yield port, server.pid
    finally:
        server.terminate()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()


class Meter:
    """Wall time and one process's CPU time over the `with` blocks it measures."""

    def __init__(self, pid: int):
        self.pid = pid
        self.wall = self.cpu = 0.0

    @contextmanager
    def __call__(self) -> Iterator[None]:
        cpu, start = tree_cpu(self.pid), time.perf_counter()
        yield
        self.wall += time.perf_counter() - start
        self.cpu += tree_cpu(self.pid) - cpu


WORKLOADS = [
    ("XADD, 50 connections, unpipelined", "a"),
    ("XADD, 50 connections, -P 16", "b"),
    ("XREADGROUP COUNT 1 + XACK (redis-py)", "c"),
    ("XREADGROUP COUNT 100 + XACK (redis-py)", "d"),
    ("XREAD COUNT 10 (redis-py)", "e"),
]


def run_workload(kind: str, port: int, pid: int, key: str, args: argparse.Namespace) -> tuple[float, float]:
    """(entries a second, server CPU µs an entry) of one workload on one server."""
    meter = Meter(pid)
    if kind == "a":
        with meter():
            n = xadd(port, key, args.requests, 1)
    elif kind == "b":
        with meter():
            n = xadd(port, key, args.requests * 4, 16)
    elif kind == "c":
        n = group_loop(port, key, args.loop, 1, meter)
    elif kind == "d":
        n = group_loop(port, key, args.loop * 10, 100, meter)
    else:
        n = xread_loop(port, key, args.loop * 4, meter)
    if kind in "ab":
        redis.Redis(host="127.0.0.1", port=port).delete(key)
    return n / meter.wall, meter.cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000, help="XADDs per redis-benchmark run")
    parser.add_argument("--loop", type=int, default=5_000, help="entries per XREADGROUP + XACK loop")
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of each workload on each server, taking turns"
    )
    parser.add_argument("--before", metavar="DIR", help="another source tree's src directory, measured alike")
    parser.add_argument("--redis-port", type=int, default=6379)
    args = parser.parse_args()
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark is missing: install Debian's redis-tools")

    targets: list[tuple[str, str | None]] = [("tidelog", None)]
    if args.before:
        targets.append(("before", args.before))
    redis_pid = None
    if reachable(args.redis_port):
        info = redis.Redis(host="127.0.0.1", port=args.redis_port).info("server")
        redis_pid = int(info["process_id"])
    else:
        print(f"(no Redis on 127.0.0.1:{args.redis_port}: tidelog figures only)")
    names = [name for name, _ in targets] + (["redis"] if redis_pid else [])
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    load_before = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="tidelog-resp-bench-")
    key = f"tidelog-bench-{os.getpid()}"
    try:
        for _ in range(args.rounds):
            for _, kind in WORKLOADS:
                for name, src in targets:
                    with tidelog_server(tmp, f"{name}-{kind}", src) as (port, pid):
                        got = run_workload(kind, port, pid, f"{key}-{kind}", args)
                    figures.setdefault((name, kind), []).append(got)
                if redis_pid is not None:
                    got = run_workload(kind, args.redis_port, redis_pid, f"{key}-{kind}", args)
                    figures.setdefault(("redis", kind), []).append(got)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()

    print(
        f"per second, and the server's CPU µs an entry; medians of {args.rounds} round(s) taking turns; "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (2 cores, shared)"
    )
    head = " | ".join(f"{n:>17}" for n in names)
    print(f"| {'workload':40} | {head} | ratio | ratio by CPU |")
    print(f"| {'-' * 40} | " + " | ".join("-" * 16 + ":" for _ in names) + " | ----: | -----------: |")
    for label, kind in WORKLOADS:
        cells, medians = [], {}
        for name in names:
            rate = statistics.median(f[0] for f in figures[(name, kind)])
            cpu = statistics.median(f[1] for f in figures[(name, kind)])
            medians[name] = (rate, cpu)
            cells.append(f"{rate:>9,.0f} {cpu:5.1f}µs")
        t, rd = medians["tidelog"], medians.get("redis")
        ratio = f"{t[0] / rd[0]:.2f}" if rd else "-"
        by_cpu = f"{rd[1] / t[1]:.2f}" if rd and t[1] else "-"
        print(f"| {label:40} | {' | '.join(cells)} | {ratio:>5} | {by_cpu:>12} |")
    for (name, kind), runs in sorted(figures.items()):
        rounds = ", ".join(f"{rate:,.0f} ({cpu:.1f} µs)" for rate, cpu in runs)
        print(f"  rounds, {name} {kind}: {rounds}", file=sys.stderr)


if __name__ == "__main__":
    main()
