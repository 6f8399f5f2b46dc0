"""Redis protocol benchmark: tidelog's RESP front beside the real Redis server.

Both measured in the same run, on loopback only, with bounded request counts:

- `redis-benchmark -c 50 XADD <key> * f <100 bytes>`, unpipelined and with -P 16;
- an XREADGROUP + XACK loop from redis-py (one entry a round trip, and 100).

tidelog commits every XADD to SQLite before it replies (WAL,
synchronous=NORMAL); Redis keeps its data in memory. Prints figures and
ratios, never passes or fails.

    python bench/resp.py [--requests 50000] [--redis-port 6379]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import redis

VALUE = "x" * 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def xadd_rps(port: int, key: str, requests: int, pipeline: int) -> float:
    out = subprocess.run(
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
    ).stdout
    rows = list(csv.reader(io.StringIO(out)))
    return float(rows[-1][1])


def group_loop(port: int, key: str, entries: int, count: int) -> float:
    """Entries a second through XREADGROUP COUNT n + XACK of what came back."""
    r = redis.Redis(host="127.0.0.1", port=port)
    r.delete(key)
    pipe = r.pipeline(transaction=False)
    for _ in range(entries):
        pipe.xadd(key, {"f": VALUE})
    pipe.execute()
    r.xgroup_create(key, "bench", id="0")
    done = 0
    start = time.perf_counter()
    while done < entries:
        got = r.xreadgroup("bench", "c1", {key: ">"}, count=count)
        if not got:
            break
        ids = [e[0] for e in got[0][1]]
        r.xack(key, "bench", *ids)
        done += len(ids)
    elapsed = time.perf_counter() - start
    r.delete(key)
    r.close()
    return done / elapsed


def reachable(port: int) -> bool:
    try:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2).ping()
    except redis.RedisError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000, help="XADDs per redis-benchmark run")
    parser.add_argument("--loop", type=int, default=5_000, help="entries per XREADGROUP + XACK loop")
    parser.add_argument("--redis-port", type=int, default=6379)
    args = parser.parse_args()
    if shutil.which("redis-benchmark") is None:
        sys.exit("redis-benchmark is missing: install Debian's redis-tools")

    tmp = tempfile.mkdtemp(prefix="tidelog-resp-bench-")
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidelog.server.resp",
            "--db",
            os.path.join(tmp, "bench.db"),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        server.stdout.readline()  # "listening on ..."
        targets = {"tidelog": port}
        if reachable(args.redis_port):
            targets["redis"] = args.redis_port
        else:
            print(f"(no Redis on 127.0.0.1:{args.redis_port}: tidelog figures only)")
        key = f"tidelog-bench-{os.getpid()}"
        rows = []
        for label, run in [
            ("XADD, 50 connections, unpipelined", lambda p: xadd_rps(p, key + "-a", args.requests, 1)),
            ("XADD, 50 connections, -P 16", lambda p: xadd_rps(p, key + "-b", args.requests * 4, 16)),
            ("XREADGROUP COUNT 1 + XACK (redis-py)", lambda p: group_loop(p, key + "-c", args.loop, 1)),
            (
                "XREADGROUP COUNT 100 + XACK (redis-py)",
                lambda p: group_loop(p, key + "-d", args.loop * 10, 100),
            ),
        ]:
            figures = {name: run(p) for name, p in targets.items()}
            rows.append((label, figures))
        for name, p in targets.items():
            if name == "redis":
                redis.Redis(host="127.0.0.1", port=p).delete(key + "-a", key + "-b")
    finally:
        server.terminate()
        server.wait(10)
        server.stdout.close()
        shutil.rmtree(tmp, ignore_errors=True)

    print("figures from a shared 2-core machine; per second")
    print(f"| {'workload':40} | {'tidelog':>10} | {'redis':>10} | {'ratio':>6} |")
    print(f"| {'-' * 40} | {'-' * 9}: | {'-' * 9}: | {'-' * 5}: |")
    for label, figures in rows:
        t = figures["tidelog"]
        rd = figures.get("redis")
        ratio = f"{t / rd:.2f}" if rd else "-"
        print(f"| {label:40} | {t:10,.0f} | {(f'{rd:,.0f}' if rd else '-'):>10} | {ratio:>6} |")


if __name__ == "__main__":
    main()
