"""Fan-out wake-up benchmark: many waiting long-polls answered by one publish.

A real `tidelog serve` runs in its own process (SQLite file, or `--url` a
PostgreSQL store). This process opens `--waiters` HTTP/1.1 connections and
sends on each `GET /api/topics/{t}/pull?group=gN&batch=1&wait=20` (one group
a connection); once every group is registered and the long-polls have
settled, one `POST /api/topics/{t}/publish` wakes them all. Printed: p50, p99
and max of (answer time - publish time) over the waiters, for each source
tree given (`--src`, alternately, best round of `--rounds`), so a change is
measured beside its baseline in one run. Every answer must carry the record
(the bench stops otherwise). Prints figures, never passes or fails.

The client is asyncio's Protocol on plain sockets: one `data_received`
a response, a few microseconds, so what is measured is the server (httpx
spends about 2 ms of client CPU a response, which would put a second of
client queueing into the p99 of 500). `--client httpx` measures with an
httpx.AsyncClient (a pool of `--waiters` connections) instead.

    python bench/fanout.py [--waiters 500] [--rounds 3] [--src src,/work/main/src]
        [--url postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from pgschema import postgres_schema  # bench/pgschema.py, beside this script
from tidelog.server.http.thread import free_port

WAIT_S = 20


class Pull(asyncio.Protocol):
    """One long-poll on its own connection; notes when its whole answer arrived."""

    def __init__(self, request: bytes, done: asyncio.Future[tuple[float, bytes]]):
        self.request = request
        self.done = done
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.buffer += data
        head, sep, body = self.buffer.partition(b"\r\n\r\n")
        if not sep:
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(body) >= length and not self.done.done():
            self.done.set_result((now, body[:length]))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"the server closed a long-poll: {exc!r}"))


def start_server(src: str, store: str, port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    cmd = [
        sys.executable,
        "-m",
        "tidelog",
        "serve",
        "--db",
        store,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    cmd += ["--resp-port", "0", "--clean-interval", "0", "--log-level", "error"]
    proc = subprocess.Popen(cmd, env=env)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start")


PROFILE: dict[str, object] = {}  # set by --profile: the server's pid and where py-spy writes
SERVER: dict[str, int] = {}  # the running server's pid
CPU_MS: list[float] = []  # the server's CPU time over each wake-up (publish to the last answer)


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of a process so far, in ns (Linux's schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


async def settle(http: httpx.AsyncClient, groups: list[str]) -> None:
    """Until every waiter's group is registered (its first read is done), then a little more."""
    wanted = set(groups)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = (await http.get("/v1/groups")).json()["groups"]
        names = {g if isinstance(g, str) else g["name"] for g in listed}
        if wanted <= names:
            break
        await asyncio.sleep(0.1)
    else:
        raise SystemExit("the long-polls did not all arrive")
    await asyncio.sleep(1.0)
    if PROFILE:
        # py-spy on the server from now for 3 s: the wake-up, not the set-up, is sampled.
        out = f"{PROFILE['dir']}/server-{PROFILE['pid']}.txt"
        cmd = ["py-spy", "record", "-p", str(PROFILE["pid"]), "-r", "1000", "-d", "3", "-f", "raw", "-o", out]
        PROFILE["spy"] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)


async def publish(http: httpx.AsyncClient, topic: str) -> tuple[float, int]:
    """(when the publish was sent, the record's id)."""
    sent = time.perf_counter()
    r = await http.post(f"/api/topics/{topic}/publish", json={"payload": topic})
    r.raise_for_status()
    return sent, r.json()["id"]


def check(body: bytes, record: int) -> None:
    messages = orjson.loads(body)["messages"]
    if [m["id"] for m in messages] != [record]:
        raise SystemExit(f"a waiter got {messages!r}, not record {record}")


async def round_raw(port: int, waiters: int, tag: str) -> list[float]:
    loop = asyncio.get_running_loop()
    groups = [f"{tag}-g{i}" for i in range(waiters)]
    answers: list[asyncio.Future[tuple[float, bytes]]] = []
    transports = []
    for group in groups:
        request = (
            f"GET /api/topics/{tag}/pull?group={group}&batch=1&wait={WAIT_S} HTTP/1.1\r\n"
            "Host: 127.0.0.1\r\n\r\n"
        ).encode()
        done: asyncio.Future[tuple[float, bytes]] = loop.create_future()
        transport, _ = await loop.create_connection(functools.partial(Pull, request, done), "127.0.0.1", port)
        transports.append(transport)
        answers.append(done)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            await settle(http, groups)
            if any(a.done() for a in answers):
                raise SystemExit("a long-poll answered before the publish")
            before = cpu_ns(SERVER["pid"])
            sent, record = await publish(http, tag)
        results = await asyncio.gather(*answers)
        CPU_MS.append((cpu_ns(SERVER["pid"]) - before) / 1e6)
    finally:
        for t in transports:
            t.close()
    for _, body in results:
        check(body, record)
    return [(at - sent) * 1000 for at, _ in results]


async def round_httpx(port: int, waiters: int, tag: str, shared: bool) -> list[float]:
    """With httpx: one AsyncClient a waiter, or (`shared`) one client with a pool of `waiters`."""
    groups = [f"{tag}-g{i}" for i in range(waiters)]
    base = f"http://127.0.0.1:{port}"
    limits = httpx.Limits(max_connections=waiters + 1, max_keepalive_connections=waiters + 1)
    clients = (
        [httpx.AsyncClient(base_url=base, timeout=WAIT_S + 30, limits=limits)]
        if shared
        else [httpx.AsyncClient(base_url=base, timeout=WAIT_S + 30) for _ in groups]
    )

    async def pull(http: httpx.AsyncClient, group: str) -> tuple[float, bytes]:
        params: dict[str, str | int] = {"group": group, "batch": 1, "wait": WAIT_S}
        r = await http.get(f"/api/topics/{tag}/pull", params=params)
        return time.perf_counter(), r.content

    try:
        tasks = [asyncio.create_task(pull(clients[i % len(clients)], g)) for i, g in enumerate(groups)]
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            await settle(http, groups)
            if any(t.done() for t in tasks):
                raise SystemExit("a long-poll answered before the publish")
            before = cpu_ns(SERVER["pid"])
            sent, record = await publish(http, tag)
        results = await asyncio.gather(*tasks)
        CPU_MS.append((cpu_ns(SERVER["pid"]) - before) / 1e6)
    finally:
        for c in clients:
            await c.aclose()
    for _, body in results:
        check(body, record)
    return [(at - sent) * 1000 for at, _ in results]


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


Round = tuple[list[float], float]  # answer times (ms after the publish), server CPU ms over the wake-up


def measure_all(
    sources: list[str], rounds: int, store_of: Callable[[int], str], measure: Any, args: Any
) -> dict[str, list[Round]]:
    """Each source's rounds, alternately, so noise on the shared machine falls on both."""
    runs: dict[str, list[Round]] = {s: [] for s in sources}
    for n in range(rounds):
        for i, src in enumerate(sources):
            port = free_port()
            proc = start_server(src, store_of(i), port, args.workers)
            SERVER["pid"] = proc.pid
            if args.profile:
                PROFILE.update(dir=args.profile, pid=proc.pid)
            try:
                tag = f"fanout{os.getpid()}-{n}-{i}"  # the topic, and its groups' prefix
                httpx.post(f"http://127.0.0.1:{port}/api/topics", json={"name": tag}).raise_for_status()
                answers = asyncio.run(measure(port, args.waiters, tag))
                runs[src].append((answers, CPU_MS.pop()))
            finally:
                spy = PROFILE.pop("spy", None)
                if isinstance(spy, subprocess.Popen):
                    spy.wait(10)
                proc.terminate()
                proc.wait(10)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--waiters", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", default="src", help="source trees to serve from, comma-separated")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes (the CPU column counts only a single one: 0 when several)",
    )
    parser.add_argument("--url", help="store URL (default: a new SQLite file per server)")
    parser.add_argument("--profile", metavar="DIR", help="py-spy the server over the wake-up (raw stacks)")
    parser.add_argument("--client", choices=["raw", "httpx", "httpx-pool"], default="raw")
    args = parser.parse_args()
    sources = args.src.split(",")
    measure = {
        "raw": round_raw,
        "httpx": functools.partial(round_httpx, shared=False),
        "httpx-pool": functools.partial(round_httpx, shared=True),
    }[args.client]
    load = os.getloadavg()
    if args.url:
        with postgres_schema(args.url, "fanout") as url:
            if url is None:
                raise SystemExit(f"PostgreSQL at {args.url} does not answer")
            runs = measure_all(sources, args.rounds, lambda i: url, measure, args)
    else:
        tmp = tempfile.mkdtemp(prefix="tidelog-fanout-")
        runs = measure_all(sources, args.rounds, lambda i: os.path.join(tmp, f"fanout{i}.db"), measure, args)
    print(
        f"{args.waiters} long-polls (/api pull, one group each, {args.client} client) woken by one publish; "
        f"store {'--url' if args.url else 'SQLite file'}; load average {load[0]:.2f} at start"
    )
    print(
        f"{'source':32} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU ms':>8}   "
        f"(best of {args.rounds} rounds by p99; CPU: the server's, publish to last answer)"
    )
    for src, rounds in runs.items():
        answers, cpu = min(rounds, key=lambda r: percentile(r[0], 99))
        print(
            f"{src:32} {percentile(answers, 50):>8.1f} {percentile(answers, 99):>8.1f} {max(answers):>8.1f} "
            f"{cpu:>8.1f}"
        )
        for answers, cpu in rounds:
            print(
                f"{'  round':32} {percentile(answers, 50):>8.1f} {percentile(answers, 99):>8.1f} "
                f"{max(answers):>8.1f} {cpu:>8.1f}"
            )


if __name__ == "__main__":
    main()
