"""WebSocket subscribe benchmark: acked records a second over /subscribe/{topic}.

The server runs in its own process (granian, uvloop), the clients in this
one: `--conns` WebSocket connections (the `websockets` package, asyncio),
each sending INIT and then answering every pushed message with ACK. The
topic is filled first with batched produce requests. Beside it, in the same
run, the same loop in-process through the Python API (`Queue.receive` +
`ack`, one record at a time, one thread): the baseline of what the store
does without the network. Prints figures, never passes or fails.

    python bench/ws.py [--records 20000] [--conns 1,4,16] [--before /path/to/other/src]

`--before SRC` also runs a server importing tidelog from SRC (another
checkout's `src`), alternating with this one, to compare a change.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import subprocess
import sys
import tempfile
import time

import httpx
import websockets

import tidelog  # noqa: E402
from tidelog.server.http.thread import free_port  # noqa: E402

VALUE = os.urandom(100)


# The ceiling: a trivial Starlette WebSocket on the same granian setup that
# answers INIT and every ACK with a canned message of the same shape.
TRIVIAL = """
import uvloop
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from tidelog.server.http.run import build_server

MSG = '{"msg":"%s","dackCount":0,"partition":0,"offset":1,"deliveryCount":1}'

async def subscribe(ws):
    await ws.accept()
    while True:
        frame = await ws.receive()
        if frame["type"] == "websocket.disconnect":
            return
        await ws.send_text(MSG)

app = Starlette(routes=[WebSocketRoute("/subscribe/{topic}", subscribe)])
uvloop.run(build_server(app, "127.0.0.1", PORT, None, None, log_level="error").serve())
"""


def start_server(path: str, port: int, src: str | None = None) -> subprocess.Popen:
    if path == "trivial":
        value = base64.b64encode(VALUE).decode()
        code = TRIVIAL.replace("PORT", str(port)).replace("%s", value)
    else:
        code = (
            f"import tidelog.server as s; s.serve({path!r}, port={port}, clean_interval=0, log_level='error')"
        )
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start")


def fill(url: str, topic: str, n: int) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        http.post("/v1/topics", json={"name": topic})
        record = {"value": base64.b64encode(VALUE).decode(), "format": "bytes"}
        for start in range(0, n, 5000):
            count = min(5000, n - start)
            r = http.post(f"/v1/topics/{topic}/records", json={"records": [record] * count})
            r.raise_for_status()


async def consume(url: str, topic: str, n: int, conns: int) -> float:
    acked = 0
    done = asyncio.Event()

    async def one() -> None:
        nonlocal acked
        async with websockets.connect(f"{url}/subscribe/{topic}", max_queue=None) as ws:
            await ws.send("INIT")
            while not done.is_set():
                try:
                    await asyncio.wait_for(ws.recv(), 2)
                except TimeoutError:
                    return
                await ws.send("ACK")
                acked += 1
                if acked >= n:
                    done.set()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conns)))
    return acked / (time.perf_counter() - start)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(proc: subprocess.Popen, url: str, topic: str, n: int, conns: int) -> tuple[float, float]:
    """(acked records/s, server CPU microseconds a record)."""
    before = cpu_seconds(proc.pid)
    rate = asyncio.run(consume(url, topic, n, conns))
    return rate, (cpu_seconds(proc.pid) - before) / n * 1e6


def in_process(path: str, n: int) -> float:
    log = tidelog.open(path)
    q = log.queue("inproc")
    q.send_batch([VALUE] * n)
    start = time.perf_counter()
    for _ in range(n):
        (d,) = q.receive()
        q.ack(d)
    rate = n / (time.perf_counter() - start)
    log.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--conns", default="1,4,16")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", help="also a server importing tidelog from this src directory")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="tidelog-ws-")
    port, trivial_port = free_port(), free_port()
    proc = start_server(os.path.join(tmp, "ws.db"), port)
    trivial = start_server("trivial", trivial_port)
    url, trivial_url = f"ws://127.0.0.1:{port}", f"ws://127.0.0.1:{trivial_port}"
    before = before_url = None
    if args.before:
        before_port = free_port()
        before = start_server(os.path.join(tmp, "before.db"), before_port, args.before)
        before_url = f"ws://127.0.0.1:{before_port}"
    try:
        base = max(in_process(os.path.join(tmp, f"inproc{i}.db"), args.records) for i in range(args.runs))
        print(
            f"WebSocket subscribe: {args.records} records of 100 bytes, ACK each, best of {args.runs} "
            "(server and clients in two processes on a shared 2-core machine)"
        )
        print(f"{'what':44} {'acked/s':>9} {'ceiling/s':>10} {'ratio':>6} {'CPU us/rec':>11} {'ceiling':>8}")
        print(f"{'in-process Queue.receive() + ack, 1 thread':44} {base:>9,.0f}")
        for conns in [int(c) for c in args.conns.split(",")]:
            best = ceiling = old = 0.0
            cpu = ceiling_cpu = old_cpu = float("inf")
            for run in range(args.runs):
                topic = f"ws{conns}-{run}"
                if before is not None and before_url is not None:
                    fill(before_url.replace("ws", "http"), topic, args.records)
                    rate, used = measured(before, before_url, topic, args.records, conns)
                    old, old_cpu = max(old, rate), min(old_cpu, used)
                fill(url.replace("ws", "http"), topic, args.records)
                rate, used = measured(proc, url, topic, args.records, conns)
                best, cpu = max(best, rate), min(cpu, used)
                rate, used = measured(trivial, trivial_url, topic, args.records, conns)
                ceiling, ceiling_cpu = max(ceiling, rate), min(ceiling_cpu, used)
            if before is not None:
                label = f"  before ({args.before}), {conns} conn"
                print(f"{label:44} {old:>9,.0f} {ceiling:>10,.0f} {old / ceiling:>6.2f} {old_cpu:>11.1f}")
            label = f"INIT/ACK over {conns} connection{'s' if conns > 1 else ''}"
            print(
                f"{label:44} {best:>9,.0f} {ceiling:>10,.0f} {best / ceiling:>6.2f} {cpu:>11.1f} {ceiling_cpu:>8.1f}"
            )
        print("ceiling: a trivial Starlette WebSocket on granian answering each ACK with a canned message;")
        print("CPU us/rec: the server process's CPU time per acked record (best run)")
        print("target >= 10,000 acked records/s; miniqueue publishes 4,298/s")
    finally:
        for p in (proc, trivial, before):
            if p is None:
                continue
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    main()
