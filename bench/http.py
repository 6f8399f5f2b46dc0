"""HTTP benchmark: the tidelog server under load from another process.

Starts `tidelog.server.serve()` in a subprocess on a fresh SQLite file on a
loopback port, then measures, each beside the trivial endpoint (GET
/healthz, same app, same middleware, same granian server) measured in the
same run as the ceiling:

- single-record publish requests/s at 16 and 64 connections (wrk)
- batched publish records/s (wrk, 100 records a request)
- pull + ack records/s (a Python client: GET /api/.../pull, POST /api/.../ack)
- produce-to-consume latency p50/p99 through a long-poll, at light load

Prints figures and ratios; never passes or fails. Needs wrk
(`apt-get install -y wrk`) for the requests/s figures.

    python bench/http.py [--seconds 5] [--fill 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from tidelog.server.thread import free_port

PUBLISH_BODY = json.dumps({"payload": {"orderId": 123, "amount": 45.5, "currency": "EUR"}})
BATCH = 100
BATCH_BODY = json.dumps({"records": [{"value": {"orderId": i, "amount": 45.5}} for i in range(BATCH)]})


def start_server(db: str, port: int) -> subprocess.Popen:
    code = f"import tidelog.server as s; s.serve({db!r}, port={port}, log_level='error')"
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz")
            return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start")


def wrk(url: str, connections: int, seconds: float, script: str | None = None) -> tuple[float, str, str]:
    """(requests/s, latency p50, latency p99) from one wrk run on one thread."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script:
        cmd += ["-s", script]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=seconds + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        print(f"    ! {errors.group(1)} non-2xx answers from {url}")
    p50 = re.search(r"50%\s+(\S+)", out).group(1)
    p99 = re.search(r"99%\s+(\S+)", out).group(1)
    return rps, p50, p99


def lua_post(tmp: str, name: str, body: str) -> str:
    path = os.path.join(tmp, f"{name}.lua")
    with open(path, "w") as f:
        f.write(
            'wrk.method = "POST"\n'
            f"wrk.body = {json.dumps(body)}\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
        )
    return path


def pull_ack(base: str, topic: str, group: str, batch: int, seconds: float) -> float:
    """Records pulled and acked a second by one consumer, sequentially."""
    done = 0
    with httpx.Client(base_url=base) as http:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            msgs = http.get(f"/api/topics/{topic}/pull", params={"group": group, "batch": batch}).json()[
                "messages"
            ]
            if not msgs:
                break
            http.post(f"/api/topics/{topic}/ack", json={"group": group, "lastAckedId": msgs[-1]["id"]})
            done += len(msgs)
        elapsed = time.perf_counter() - start
    return done / elapsed


def latency(base: str, topic: str, count: int, gap_s: float) -> list[float]:
    """Produce one record every `gap_s`; a long-poll consumer notes when each arrives (ms)."""
    sent_at: dict[int, float] = {}
    seen: dict[int, float] = {}

    def consume() -> None:
        after = 0
        with httpx.Client(base_url=base, timeout=30) as http:
            while len(seen) < count:
                got = http.get(
                    f"/v1/topics/{topic}/partitions/0/records", params={"after": after, "wait": 10}
                ).json()["records"]
                now = time.perf_counter()
                for r in got:
                    seen[r["value"]["n"]] = now
                    after = r["offset"]

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.2)
    with httpx.Client(base_url=base) as http:
        for n in range(count):
            sent_at[n] = time.perf_counter()
            http.post(f"/v1/topics/{topic}/records", json={"records": [{"value": {"n": n}}]})
            time.sleep(gap_s)
    consumer.join(60)
    return [(seen[n] - sent_at[n]) * 1000 for n in range(count) if n in seen]


def rtt(base: str, count: int) -> list[float]:
    out = []
    with httpx.Client(base_url=base) as http:
        for _ in range(count):
            t = time.perf_counter()
            http.get("/healthz")
            out.append((time.perf_counter() - t) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each wrk run")
    ap.add_argument("--fill", type=int, default=100_000, help="records to pull and ack")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install -y wrk): requests/s figures need it")
        return 1
    tmp = tempfile.mkdtemp(prefix="tidelog-bench-http-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(os.path.join(tmp, "bench.db"), port)
    try:
        with httpx.Client(base_url=base) as http:
            for name in ("pub", "v1pub", "batch", "pull", "lat"):
                http.post("/v1/topics", json={"name": name})
        publish = lua_post(tmp, "publish", PUBLISH_BODY)
        v1_single = lua_post(
            tmp, "v1", json.dumps({"records": [{"value": {"orderId": 123, "amount": 45.5}}]})
        )
        batch = lua_post(tmp, "batch", BATCH_BODY)
        s = args.seconds
        print(f"tidelog HTTP server (granian, one process) on {base}; load from wrk -t1 in another process")
        print(f"{'what':44} {'figure':>14} {'ceiling':>14} {'ratio':>6}  latency p50 / p99")
        rows = []
        for conns in (16, 64):
            trivial = wrk(f"{base}/healthz", conns, s)
            single = wrk(f"{base}/api/topics/pub/publish", conns, s, publish)
            v1 = wrk(f"{base}/v1/topics/v1pub/records", conns, s, v1_single)
            rows.append((f"GET /healthz (trivial), {conns} conns, req/s", trivial, trivial))
            rows.append((f"single publish /api, {conns} conns, req/s", single, trivial))
            rows.append((f"single produce /v1, {conns} conns, req/s", v1, trivial))
        trivial = wrk(f"{base}/healthz", 16, s)
        batched = wrk(f"{base}/v1/topics/batch/records", 16, s, batch)
        for label, (rps, p50, p99), (ceiling, *_) in rows:
            print(f"{label:44} {rps:>14,.0f} {ceiling:>14,.0f} {rps / ceiling:>6.2f}  {p50} / {p99}")
        records = batched[0] * BATCH
        print(
            f"{f'batched publish, {BATCH}/request, 16 conns, rec/s':44} {records:>14,.0f} {trivial[0]:>14,.0f}"
            f" {records / trivial[0]:>6.2f}  {batched[1]} / {batched[2]}"
        )

        # pull + ack: fill a topic, then one consumer drains it.
        with httpx.Client(base_url=base, timeout=60) as http:
            chunk = [{"value": {"orderId": i}} for i in range(1000)]
            for _ in range(args.fill // 1000):
                http.post("/v1/topics/pull/records", json={"records": chunk})
        ceiling_rps = wrk(f"{base}/healthz", 1, s)[0]
        for size in (100, 500):
            rate = pull_ack(base, "pull", f"g{size}", size, s)
            print(
                f"{f'pull + ack, batch {size}, 1 consumer, rec/s':44} {rate:>14,.0f} {ceiling_rps:>14,.0f}"
                f" {rate / ceiling_rps:>6.2f}  (ceiling: 1-conn trivial req/s)"
            )

        # produce -> consume latency through a long-poll, light load (~100 records/s).
        base_rtt = rtt(base, 500)
        lat = latency(base, "lat", 500, 0.01)
        figure, ceiling = f"p50 {pct(lat, 50):.2f}", f"p50 {pct(base_rtt, 50):.2f}"
        print(
            f"{'produce->consume via long-poll, ms':44} {figure:>14} {ceiling:>14}         "
            f"p99 {pct(lat, 99):.2f} ms (trivial round trip p99 {pct(base_rtt, 99):.2f} ms; {len(lat)} records)"
        )
        metrics = httpx.get(f"{base}/metrics").text
        commits = float(re.search(r"^tidelog_group_commits_total ([\d.e+]+)", metrics, re.M).group(1))
        appended = sum(
            float(v)
            for v in re.findall(r"^tidelog_records_appended_total\{[^}]*\} ([\d.e+]+)", metrics, re.M)
        )
        print(
            f"group commit: {appended:,.0f} records in {commits:,.0f} transactions ({appended / commits:.1f} a commit)"
        )
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
