"""Push worker benchmark: records delivered per second, each engine.

    python bench/worker.py [--records 100000] [--engines local,spark]

A local endpoint (Starlette on granian, in its own process) answers every
POST with 200 at once. Each engine delivers the same topic, 4 partitions
of JSON records of about 100 bytes, in batches of 100. The rate is taken
in steady state: from the first commit to the last (so neither the JVM's
start nor a query's first planning counts), with the time to the first
commit printed beside it. The baseline, measured in the same run, is a
plain httpx client posting the same bodies (built beforehand) to the same
endpoint on 4 concurrent connections, one batch after another, with no log
underneath: what the endpoint and HTTP alone allow. Prints figures, never
passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import httpx

import tidelog
import tidelog.worker
from tidelog.worker import delivery

PARTITIONS = 4
BATCH = 100

ENDPOINT = textwrap.dedent(
    """
    import asyncio, sys
    from granian.constants import HTTPModes, Interfaces
    from granian.server.embed import Server
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def post(request):
        await request.body()
        return Response("ok")

    app = Starlette(routes=[Route("/in", post, methods=["POST"])])
    server = Server(app, address="127.0.0.1", port=int(sys.argv[1]), interface=Interfaces.ASGI,
                    http=HTTPModes.http1, websockets=False, log_enabled=False)
    asyncio.run(server.serve())
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_endpoint() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", ENDPOINT, str(port)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}/in"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the endpoint did not start")


def fill(path: str, records: int) -> None:
    with tidelog.open(path) as log:
        log.create_topic("bench", partitions=PARTITIONS)
        producer = log.producer()
        per = records // PARTITIONS
        for p in range(PARTITIONS):
            for i in range(0, per, 1000):
                values = [{"order": i + j, "customer": f"c-{(i + j) % 977}", "amount": 12.5, "items": [1, 2, 3]}
                          for j in range(min(1000, per - i))]  # fmt: skip
                producer.send_batch("bench", values, partition=p)


def baseline(path: str, url: str) -> float:
    """The same bodies, posted by plain httpx on 4 connections: records per second."""
    bodies: dict[int, list[bytes]] = {}
    records = 0
    with tidelog.open(path) as log:
        for p in range(PARTITIONS):
            after, out = 0, []
            while batch := log.read("bench", p, after=after, limit=BATCH):
                out.append(delivery.body("bench", p, delivery.messages_json(batch)))
                after = batch[-1].offset
                records += len(batch)
            bodies[p] = out

    async def run() -> float:
        async with httpx.AsyncClient(headers={"content-type": "application/json"}) as client:

            async def one(p: int) -> None:
                for body in bodies[p]:
                    response = await client.post(url, content=body)
                    assert response.status_code == 200

            start = time.perf_counter()
            await asyncio.gather(*(one(p) for p in range(PARTITIONS)))
            return time.perf_counter() - start

    return records / asyncio.run(run())


def committed(log: tidelog.Log) -> int:
    return sum(row.committed for row in log.describe_group("bench-group", ["bench"]))


def engine_rate(engine: str, path: str, url: str, work_dir: str, spark: object) -> tuple[float, float]:
    """(records per second from first to last commit, seconds to the first commit)."""
    with tidelog.open(path) as log:
        records = log.describe("bench").records
    cfg = {
        "engine": engine,
        "work_dir": work_dir,
        "topics": {
            "bench": {"groups": {"bench-group": {"endpoint": url, "batch_size": BATCH, "interval": "100ms"}}}
        },
    }
    stop = threading.Event()
    thread = threading.Thread(
        target=tidelog.worker.run, args=(path, cfg), kwargs={"stop": stop, "spark": spark}
    )
    with tidelog.open(path) as log:
        start = time.perf_counter()
        thread.start()
        first_at = first_count = None
        while True:
            done = committed(log)
            now = time.perf_counter()
            if first_at is None and done:
                first_at, first_count = now, done
            if done >= records:
                break
            time.sleep(0.01)
        stop.set()
        thread.join()
    assert first_at is not None and first_count is not None
    steady = (records - first_count) / max(now - first_at, 1e-9)
    return steady, first_at - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--engines", default="local,spark")
    args = parser.parse_args()
    engines = args.engines.split(",")
    endpoint, url = start_endpoint()
    spark = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            template = os.path.join(tmp, "template.db")
            fill(template, args.records)
            rows = [("baseline (httpx, no log)", baseline(template, url), None)]
            if "spark" in engines:
                import tidelog.spark

                spark = tidelog.spark.session(
                    "local[2]",
                    "bench-worker",
                    **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
                )
                spark.sparkContext.setLogLevel("FATAL")
            for engine in engines:
                path = os.path.join(tmp, f"{engine}.db")
                with open(template, "rb") as src, open(path, "wb") as dst:
                    dst.write(src.read())
                rate, first = engine_rate(
                    engine, path, url, os.path.join(tmp, "work"), spark if engine == "spark" else None
                )
                rows.append((f"{engine} engine", rate, first))
    finally:
        endpoint.kill()
        endpoint.wait()
        if spark is not None:
            spark.stop()
    base = rows[0][1]
    print(
        f"push worker, {args.records} JSON records of ~100 bytes, {PARTITIONS} partitions, batch_size {BATCH}, "
        "endpoint answers 200 at once (shared 2-core machine)"
    )
    print(f"{'delivery':<26}{'rec/s':>10}{'vs baseline':>13}{'first commit':>15}")
    for name, rate, first in rows:
        first_text = "-" if first is None else f"{first:.1f}s"
        print(f"{name:<26}{rate:>10,.0f}{rate / base:>13.2f}{first_text:>15}")


if __name__ == "__main__":
    main()
