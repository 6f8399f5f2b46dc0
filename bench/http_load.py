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

    python bench/http_load.py [--seconds 5] [--fill 100000]
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

from tidelog.server.http.thread import free_port

PUBLISH_BODY = json.dumps({"payload": {"orderId": 123, "amount": 45.5, "currency": "EUR"}})
BATCH = 100
BATCH_BODY = json.dumps({"records": [{"value": {"orderId": i, "amount": 45.5}} for i in range(BATCH)]})


def serve_trivial(port: int) -> None:
    """The ceiling: a Starlette app with nothing in it, on the same granian setup."""

    import uvloop
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tidelog.server.http.run import build_server

    async def trivial(request: Request) -> Response:
        return Response(b'{"ok":true}', media_type="application/json")

    async def trivial_post(request: Request) -> Response:
        await request.body()  # a POST reads its body, as a publish does
        return Response(b'{"ok":true}', media_type="application/json")

    app = Starlette(
        routes=[
            Route("/trivial", trivial, methods=["GET"]),
            Route("/trivial", trivial_post, methods=["POST"]),
        ]
    )
    server = build_server(app, "127.0.0.1", port, None, None, log_level="error")

    async def main() -> None:
        await server.serve()

    uvloop.run(main())


def start_server(db: str | None, port: int) -> subprocess.Popen:
    if db is None:
        cmd = [sys.executable, __file__, "--trivial-server", str(port)]
    else:
        cmd = [
            sys.executable,
            "-c",
            f"import tidelog.server as s; s.serve({db!r}, port={port}, log_level='error')",
        ]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/{'healthz' if db else 'trivial'}")
            return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used: robust on a shared machine."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Run:
    def __init__(self, rps: float, cpu_us: float, p50: str, p99: str):
        self.rps, self.cpu_us, self.p50, self.p99 = rps, cpu_us, p50, p99


def wrk(url: str, pid: int, connections: int, seconds: float, script: str | None = None) -> Run:
    """One wrk run on one thread: requests/s, server CPU µs a request, latency p50 and p99."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    if script:
        cmd += ["-s", script]
    before = cpu_seconds(pid)
    out = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=seconds + 60).stdout
    used = cpu_seconds(pid) - before
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        print(f"    ! {errors.group(1)} non-2xx answers from {url}")
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)
    return Run(rps, used / max(1, requests) * 1e6, p50, p99)


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
            http.get("/trivial")
            out.append((time.perf_counter() - t) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each wrk run")
    ap.add_argument("--fill", type=int, default=100_000, help="records to pull and ack")
    ap.add_argument("--trivial-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trivial_server:
        serve_trivial(args.trivial_server)
        return 0
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install -y wrk): requests/s figures need it")
        return 1
    tmp = tempfile.mkdtemp(prefix="tidelog-bench-http-")
    port, trivial_port = free_port(), free_port()
    base, trivial_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{trivial_port}"
    proc = start_server(os.path.join(tmp, "bench.db"), port)
    trivial_proc = start_server(None, trivial_port)
    try:
        with httpx.Client(base_url=base) as http:
            for name in ("pub", "v1pub", "raw", "batch", "pull", "lat"):
                http.post("/v1/topics", json={"name": name})
        publish = lua_post(tmp, "publish", PUBLISH_BODY)
        v1_single = lua_post(
            tmp, "v1", json.dumps({"records": [{"value": {"orderId": 123, "amount": 45.5}}]})
        )
        batch = lua_post(tmp, "batch", BATCH_BODY)
        s = args.seconds
        print(f"tidelog server and a trivial Starlette app, each on granian in its own process, {base}")
        print(
            "load: wrk -t1 from another process; ceiling: the trivial app in the same run (GET, and POST reading the body)"
        )
        print(
            f"{'what':42} {'figure':>9} {'GET':>8} {'ratio':>6} {'POST':>8} {'ratio':>6} "
            f"{'CPU us/req':>10}  latency p50 / p99"
        )

        def line(label: str, run: Run, get: Run, post: Run, per: int = 1) -> None:
            figure = run.rps * per
            print(
                f"{label:42} {figure:>9,.0f} {get.rps:>8,.0f} {figure / get.rps:>6.2f} {post.rps:>8,.0f} "
                f"{figure / post.rps:>6.2f} {run.cpu_us / per:>10.1f}  {run.p50} / {run.p99}"
            )

        for conns in (16, 64):
            get = wrk(f"{trivial_base}/trivial", trivial_proc.pid, conns, s)
            post = wrk(f"{trivial_base}/trivial", trivial_proc.pid, conns, s, publish)
            line(f"trivial GET, {conns} conns, req/s", get, get, post)
            line(f"trivial POST, {conns} conns, req/s", post, get, post)
            line(f"GET /healthz, {conns} conns, req/s", wrk(f"{base}/healthz", proc.pid, conns, s), get, post)
            line(
                f"publish /api, {conns} conns, req/s",
                wrk(f"{base}/api/topics/pub/publish", proc.pid, conns, s, publish),
                get,
                post,
            )
            line(
                f"produce 1 record /v1, {conns} conns, req/s",
                wrk(f"{base}/v1/topics/v1pub/records", proc.pid, conns, s, v1_single),
                get,
                post,
            )
        get = wrk(f"{trivial_base}/trivial", trivial_proc.pid, 16, s)
        post = wrk(f"{trivial_base}/trivial", trivial_proc.pid, 16, s, batch)
        batched = wrk(f"{base}/v1/topics/batch/records", proc.pid, 16, s, batch)
        line(f"batched produce, {BATCH}/request, 16 conns, rec/s", batched, get, post, BATCH)

        # pull + ack: fill a topic, then one consumer drains it.
        with httpx.Client(base_url=base, timeout=60) as http:
            chunk = [{"value": {"orderId": i}} for i in range(1000)]
            for _ in range(args.fill // 1000):
                http.post("/v1/topics/pull/records", json={"records": chunk})
        one = wrk(f"{trivial_base}/trivial", trivial_proc.pid, 1, s)
        for size in (100, 500):
            rate = pull_ack(base, "pull", f"g{size}", size, s)
            print(
                f"{f'pull + ack, batch {size}, 1 consumer, rec/s':42} {rate:>9,.0f} {one.rps:>8,.0f} "
                f"{rate / one.rps:>6.2f}   (ceiling: trivial GET req/s on 1 connection)"
            )

        # produce -> consume latency through a long-poll, light load (~100 records/s).
        base_rtt = rtt(f"{trivial_base}", 500)
        lat = latency(base, "lat", 500, 0.01)
        print(
            f"{'produce -> consume via long-poll, ms':42} p50 {pct(lat, 50):.2f}  p99 {pct(lat, 99):.2f}   "
            f"(trivial GET round trip p50 {pct(base_rtt, 50):.2f}  p99 {pct(base_rtt, 99):.2f}; {len(lat)} records)"
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
        for p in (proc, trivial_proc):
            p.terminate()
            p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
