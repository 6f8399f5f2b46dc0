"""Peers benchmark: tidelog and its network peers side by side, one run.

Each comparison runs tidelog and the peer ALTERNATELY (the order flips each
round) with the same load generator, best of `--rounds`, and prints both
figures, their ratio and the server CPU µs a request (user + system time of
the server's process tree from /proc, so a busy shared machine does not
inflate it as wall time would).

- publish one record (POST /publish/{topic}, a 60-byte body), h2load at
  12 and 64 connections. The peer is miniqueue (its binary at $MINIQUEUE_BIN;
  it serves HTTP/2 over TLS only). tidelog is measured on HTTP/2 + TLS, h2c
  and HTTP/1.1 cleartext. Without the peer, each row is set beside the
  in-run ceiling: a trivial POST on the same Starlette + granian stack.
- consume + ack one by one (miniqueue's subscribe: `POST /subscribe/{topic}`
  over HTTP/2 + TLS, `"INIT"` then `"ACK"` after each message), 1 and 16
  connections, from an asyncio client on the h2 library, vs miniqueue;
  tidelog also over its WebSocket (`ws /subscribe/{topic}`, the websockets
  package). Each round fills a fresh topic with h2load publishes first.
  `--before SRC` adds a tidelog server importing from another checkout's src.
- XREADGROUP COUNT 1 + XACK (redis-py, one client, a loop) vs redis-server.
- XADD: redis-benchmark at 50 connections, unpipelined and -P16, against a
  redis-server this script starts on a free port (AOF, fsync every second:
  durable like SQLite WAL + synchronous=NORMAL), vs tidelog's Redis front.
  Without redis-server, tidelog's figures alone.

Needs h2load (Debian's nghttp2-client), redis-benchmark (redis-tools) and
openssl or trustme for the self-signed certificate. Never passes or fails.

    MINIQUEUE_BIN=/path/to/miniqueue python bench/peers.py [--rounds 3] [--seconds 4]
        [--only publish|consume|xadd|xreadgroup] [--workers N] [--env KEY=VALUE ...] [--before SRC]
    python bench/peers.py --ab tune_gc_after_start=False --connections 64   # one change alone
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BODY = b'{"orderId": 123, "amount": 45.5, "currency": "EUR", "n": 1}\n'


@dataclass
class Figure:
    rate: float  # requests (records) a second
    cpu_us: float  # server CPU µs a request
    failed: int = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and every descendant alive now."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def wait_port(port: int, proc: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}: {proc.args}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            time.sleep(0.3)  # granian binds before the app's lifespan ends
            return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"server did not listen on {port}: {proc.args}")


def make_cert(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    try:
        import trustme

        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        leaf.private_key_pem.write_to_path(str(key))
        leaf.cert_chain_pems[0].write_to_path(str(cert))
    except ImportError:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
            + ["-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
            check=True,
            capture_output=True,
        )
    return str(cert), str(key)


def serve_trivial(port: int, cert: str, key: str) -> None:
    """The ceiling: POST /publish/{topic} reads its body and answers, nothing
    else, on the same Starlette + granian setup as tidelog (TLS when given)."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tidelog.server.http.run import build_server

    async def publish(request: Request) -> Response:
        await request.body()
        return Response(b'{"topic":"t","partition":0,"offset":0}', 201, media_type="application/json")

    app = Starlette(routes=[Route("/publish/{topic}", publish, methods=["POST"])])
    server = build_server(app, "127.0.0.1", port, cert or None, key or None, log_level="error")
    try:
        import uvloop

        uvloop.run(server.serve())
    except ImportError:
        asyncio.run(server.serve())


class Servers:
    """Every server of the run, started once, stopped at the end."""

    def __init__(self, tmp: Path, workers: int | None, env: dict[str, str]):
        self.tmp, self.workers, self.env = tmp, workers, env
        self.procs: list[subprocess.Popen] = []
        self.cert, self.key = make_cert(tmp)

    def _start(self, cmd: list[str], port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}
        )
        self.procs.append(proc)
        wait_port(port, proc)
        return proc

    def tidelog(self, tls: bool, src: str | None = None) -> tuple[subprocess.Popen, int, int]:
        port, resp = free_port(), free_port()
        db = self.tmp / f"tidelog-{port}.db"
        cmd = [sys.executable, "-m", "tidelog", "serve", "--db", f"sqlite:///{db}", "--port", str(port)]
        cmd += ["--resp-port", str(resp), "--log-level", "warning"]
        if self.workers is not None:
            cmd += ["--workers", str(self.workers)]
        if tls:
            cmd += ["--tls-cert", self.cert, "--tls-key", self.key]
        env = self.env if src is None else {**self.env, "PYTHONPATH": src}
        # Several servers at once: none on the Kafka listener's default 9092 (older trees ignore it).
        env = {"TIDELOG_KAFKA_PORT": "0", **env}
        proc = self._start(cmd, port, env)
        wait_port(resp, proc)
        return proc, port, resp

    def tidelog_with(self, options: dict[str, object]) -> tuple[subprocess.Popen, int]:
        """tidelog's server started through `serve(**options)` (an A/B run), cleartext."""
        port = free_port()
        db = self.tmp / f"tidelog-{port}.db"
        call = f"serve({f'sqlite:///{db}'!r}, port={port}, resp_port=0, log_level='error', **{options!r})"
        cmd = [sys.executable, "-c", f"from tidelog.server import serve; {call}"]
        return self._start(cmd, port, self.env), port

    def trivial(self, tls: bool) -> tuple[subprocess.Popen, int]:
        port = free_port()
        cert, key = (self.cert, self.key) if tls else ("", "")
        cmd = [sys.executable, __file__, "--trivial-server", str(port), cert, key]
        return self._start(cmd, port, self.env), port

    def miniqueue(self, binary: str) -> tuple[subprocess.Popen, int]:
        port = free_port()
        cmd = [binary, "-cert", self.cert, "-key", self.key, "-db", str(self.tmp / f"mq-{port}")]
        cmd += ["-port", str(port), "-level", "disabled"]
        return self._start(cmd, port), port

    def redis(self) -> tuple[subprocess.Popen, int]:
        port = free_port()
        data = self.tmp / f"redis-{port}"
        data.mkdir()
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
        cmd += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
        return self._start(cmd, port), port

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def h2load(url: str, pid: int, connections: int, seconds: float, body: str, h1: bool) -> Figure:
    """One h2load run of POSTs for `seconds`, one client thread (no warm-up: the
    server's CPU counter would run through it while h2load leaves it out)."""
    cmd = ["h2load", "-c", str(connections), "-m", "1", "-D", str(round(seconds))]
    cmd += ["-d", body, "-H", "content-type: application/json"]
    if h1:
        cmd.append("--h1")
    before = tree_cpu(pid)
    out = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=seconds + 60).stdout
    used = tree_cpu(pid) - before
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
    codes = re.search(r"status codes: (\d+) 2xx", out)
    if not rate or not done or not codes:
        raise SystemExit(f"h2load said:\n{out}")
    ok = int(codes.group(1))
    failed = int(done.group(1)) - ok
    return Figure(float(rate.group(1)) * ok / max(1, int(done.group(1))), used / max(1, ok) * 1e6, failed)


def xadd(port: int, pid: int, connections: int, pipeline: int, count: int) -> Figure:
    cmd = ["redis-benchmark", "-p", str(port), "-c", str(connections), "-P", str(pipeline), "-n", str(count)]
    cmd += ["-q", "XADD", "bench", "*", "f", "v"]
    before = tree_cpu(pid)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    used = tree_cpu(pid) - before
    found = re.findall(r"([\d.]+) requests per second", out)
    if not found:
        raise SystemExit(f"redis-benchmark said:\n{out}")
    return Figure(float(found[-1]), used / count * 1e6)


# --- consume + ack one by one --------------------------------------------------------


@dataclass
class Tally:
    want: int
    acked: int = 0
    full_at: float | None = None  # perf_counter() when the last record wanted was acked

    def ack(self) -> None:
        self.acked += 1
        if self.acked == self.want:
            self.full_at = time.perf_counter()


async def h2_subscriber(port: int, topic: str, tally: Tally, tls: bool) -> None:
    """One miniqueue-style subscriber: POST /subscribe/{topic} over HTTP/2,
    `"INIT"`, then `"ACK"` after each message, until the tally is full."""
    import asyncio
    import ssl

    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import DataReceived, StreamEnded, StreamReset

    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    conn = H2Connection(H2Configuration(client_side=True))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    headers = [(":method", "POST"), (":path", f"/subscribe/{topic}"), (":authority", "127.0.0.1")]
    headers += [(":scheme", "https" if tls else "http"), ("content-type", "application/json")]
    conn.send_headers(sid, headers)
    conn.send_data(sid, b'"INIT"\n')
    writer.write(conn.data_to_send())
    buffer = b""
    try:
        while tally.acked < tally.want:
            try:
                data = await asyncio.wait_for(reader.read(65536), 3)
            except TimeoutError:
                return  # nothing more to consume
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, DataReceived):
                    buffer += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, (StreamEnded, StreamReset)):
                    return
            while b"\n" in buffer and tally.acked < tally.want:
                line, buffer = buffer.split(b"\n", 1)
                if b'"error"' in line:
                    raise SystemExit(f"the server answered {line[:200]!r}")
                conn.send_data(sid, b'"ACK"\n')
                tally.ack()
            writer.write(conn.data_to_send())
    finally:
        writer.close()


async def ws_subscriber(port: int, topic: str, tally: Tally) -> None:
    """The same over tidelog's WebSocket."""
    import asyncio

    import websockets

    async with websockets.connect(f"ws://127.0.0.1:{port}/subscribe/{topic}", max_queue=None) as ws:
        await ws.send("INIT")
        while tally.acked < tally.want:
            try:
                await asyncio.wait_for(ws.recv(), 3)
            except TimeoutError:
                return
            await ws.send("ACK")
            tally.ack()


def fill(base: str, topic: str, records: int, body: str) -> None:
    """`records` publishes of one record to `topic` with h2load (HTTP/2, TLS or h2c)."""
    url = f"{base}/publish/{topic}"
    out = subprocess.run(
        ["h2load", "-n", str(records), "-c", "8", "-m", "8", "-d", body, url],
        capture_output=True,
        timeout=600,
    ).stdout.decode()
    if f"{records} succeeded" not in out:
        raise SystemExit(f"filling {topic} failed:\n{out}")


def consume(pid: int, port: int, topic: str, records: int, connections: int, how: str) -> Figure:
    """Acked records a second over `connections` subscribers (`how`: h2-tls, h2c or ws)."""
    import asyncio

    tally = Tally(records)

    async def run() -> float:
        if how == "ws":
            subs = [ws_subscriber(port, topic, tally) for _ in range(connections)]
        else:
            subs = [h2_subscriber(port, topic, tally, how == "h2-tls") for _ in range(connections)]
        start = time.perf_counter()
        # Timed to the last record's ack: the other subscribers then wait
        # for a record that will not come (their read's 3 s timeout), which
        # is not consuming; they are cancelled instead.
        tasks = [asyncio.ensure_future(s) for s in subs]
        pending = set(tasks)
        while pending and tally.full_at is None:
            done, pending = await asyncio.wait(pending, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a subscriber's error ends the run
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return (tally.full_at or time.perf_counter()) - start

    before = tree_cpu(pid)
    elapsed = asyncio.run(run())
    used = tree_cpu(pid) - before
    if tally.acked < records:
        raise SystemExit(f"only {tally.acked} of {records} records came ({how}, {topic})")
    return Figure(tally.acked / elapsed, used / tally.acked * 1e6)


def consume_rows(servers: Servers, args: argparse.Namespace, body: str) -> None:
    binary = os.environ.get("MINIQUEUE_BIN")
    sides: dict[str, tuple[subprocess.Popen, int, str]] = {}  # name -> its server, port, protocol
    if binary:
        proc, port = servers.miniqueue(binary)
        sides["miniqueue"] = (proc, port, "h2-tls")
    for name, src in [("tidelog", None), ("before", args.before)]:
        if name == "tidelog" or src:
            proc, port, _ = servers.tidelog(tls=True, src=src)
            sides[name] = (proc, port, "h2-tls")
            proc, port, _ = servers.tidelog(tls=False, src=src)
            sides[f"{name} ws"] = (proc, port, "ws")
    fills = {name: 0 for name in sides}
    for connections in (1, 16):
        records = args.records

        def run(name: str, connections: int = connections, records: int = records) -> Figure:
            proc, port, how = sides[name]
            fills[name] += 1
            topic = f"c{connections}x{fills[name]}"
            fill(f"{'https' if how == 'h2-tls' else 'http'}://127.0.0.1:{port}", topic, records, body)
            return consume(proc.pid, port, topic, records, connections, how)

        print(f"  consume + ack one by one, {connections} connection(s), {records} records", flush=True)
        best = alternate(args.rounds, {name: lambda n=name: run(n) for name in sides})
        for name in sides:
            if name == "miniqueue":
                continue
            peer = "miniqueue" if binary else None
            how = sides[name][2]
            label = f"consume + ack, {connections} conn, {name} ({how})"
            if peer:
                row(label, peer, best, ours=name)
            else:
                t = best[name]
                print(f"| {label} | (no MINIQUEUE_BIN) | {t.rate:,.0f}/s ({t.cpu_us:.0f} µs) | |")


def alternate(rounds: int, sides: dict[str, Callable[[], Figure]]) -> dict[str, Figure]:
    """Best of `rounds` for each side, the sides taking turns (ABBA order)."""
    best: dict[str, Figure] = {}
    names = list(sides)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fig = sides[name]()
            print(
                f"    round {r + 1} {name}: {fig.rate:,.0f}/s, {fig.cpu_us:.0f} µs CPU"
                + (f", {fig.failed} failed" if fig.failed else ""),
                flush=True,
            )
            if name not in best or fig.rate > best[name].rate:
                best[name] = fig
    return best


def row(work: str, peer: str, best: dict[str, Figure], ours: str = "tidelog") -> None:
    p, t = best[peer], best[ours]
    print(
        f"| {work} | {peer}: {p.rate:,.0f}/s ({p.cpu_us:.0f} µs) | {ours}: {t.rate:,.0f}/s "
        f"({t.cpu_us:.0f} µs) | {t.rate / p.rate:.2f} |",
        flush=True,
    )


def publish_rows(servers: Servers, args: argparse.Namespace, body: str) -> None:
    binary = os.environ.get("MINIQUEUE_BIN")
    tls_proc, tls_port, _ = servers.tidelog(tls=True)
    plain_proc, plain_port, _ = servers.tidelog(tls=False)
    before: dict[bool, tuple[subprocess.Popen, int]] = {}  # tls -> the --before tree's server
    if args.before:
        for tls in (True, False):
            proc, port, _ = servers.tidelog(tls=tls, src=args.before)
            before[tls] = (proc, port)
    if binary:
        peer_proc, peer_port = servers.miniqueue(binary)
        peer_name = "miniqueue"
    else:
        peer_proc, peer_port = servers.trivial(tls=True)
        peer_name = "ceiling"
        ceil_plain, ceil_port = servers.trivial(tls=False)
    path = "/publish/bench"
    modes = [
        ("HTTP/2 + TLS", f"https://127.0.0.1:{tls_port}{path}", tls_proc, False),
        ("h2c", f"http://127.0.0.1:{plain_port}{path}", plain_proc, False),
        ("HTTP/1.1 cleartext", f"http://127.0.0.1:{plain_port}{path}", plain_proc, True),
    ]
    for connections in args.connections:
        for label, url, proc, h1 in modes:
            if args.modes and label not in args.modes:
                continue
            peer_url = f"https://127.0.0.1:{peer_port}{path}"
            peer_pid, peer_h1 = peer_proc.pid, False
            if not binary and label != "HTTP/2 + TLS":  # the ceiling on the same protocol
                peer_url = f"http://127.0.0.1:{ceil_port}{path}"
                peer_pid, peer_h1 = ceil_plain.pid, h1
            print(f"  publish -c{connections}, tidelog on {label}", flush=True)
            sides = {
                peer_name: lambda u=peer_url, p=peer_pid, h=peer_h1, c=connections: h2load(
                    u, p, c, args.seconds, body, h
                ),
                "tidelog": lambda u=url, p=proc.pid, h=h1, c=connections: h2load(
                    u, p, c, args.seconds, body, h
                ),
            }
            if before:
                b_proc, b_port = before[label == "HTTP/2 + TLS"]
                b_url = url.replace(f":{tls_port}/", f":{b_port}/").replace(f":{plain_port}/", f":{b_port}/")
                sides["before"] = lambda u=b_url, p=b_proc.pid, h=h1, c=connections: h2load(
                    u, p, c, args.seconds, body, h
                )
            best = alternate(args.rounds, sides)
            row(f"publish, h2load -c{connections}, tidelog {label}", peer_name, best)
            if before:
                row(f"publish, h2load -c{connections}, {label}: --before vs this tree", "before", best)


def xadd_rows(servers: Servers, args: argparse.Namespace) -> None:
    ours_proc, _, resp_port = servers.tidelog(tls=False)
    have_redis = shutil.which("redis-server") is not None
    sides_ports = {"tidelog": (resp_port, ours_proc.pid)}
    if have_redis:
        redis_proc, redis_port = servers.redis()
        sides_ports = {"redis": (redis_port, redis_proc.pid), **sides_ports}
    for pipeline in (1, 16):
        # Each side gets about `seconds` of work, sized from its last run.
        counts = {name: 20_000 * pipeline for name in sides_ports}

        def run(name: str, pipeline: int = pipeline, counts: dict[str, int] = counts) -> Figure:
            port, pid = sides_ports[name]
            fig = xadd(port, pid, 50, pipeline, counts[name])
            counts[name] = max(10_000, int(fig.rate * args.seconds))
            return fig

        print(f"  XADD, redis-benchmark -c50 -P{pipeline}", flush=True)
        best = alternate(args.rounds, {name: lambda n=name: run(n) for name in sides_ports})
        if have_redis:
            row(f"XADD -c50 -P{pipeline}", "redis", best)
        else:
            t = best["tidelog"]
            print(f"| XADD -c50 -P{pipeline} | (no redis-server) | {t.rate:,.0f}/s ({t.cpu_us:.0f} µs) | |")


def group_loop(port: int, pid: int, key: str, entries: int, count: int) -> Figure:
    """Entries a second through XREADGROUP COUNT n + XACK of what came back
    (redis-py, one connection, unpipelined: each command waits for its reply)."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    pipe = r.pipeline(transaction=False)
    for _ in range(entries):
        pipe.xadd(key, {"f": "x" * 100})
    pipe.execute()
    r.xgroup_create(key, "bench", id="0")
    done = 0
    before = tree_cpu(pid)
    start = time.perf_counter()
    while done < entries:
        got = r.xreadgroup("bench", "c1", {key: ">"}, count=count)
        if not got:
            break
        ids = [e[0] for e in got[0][1]]
        r.xack(key, "bench", *ids)
        done += len(ids)
    elapsed = time.perf_counter() - start
    used = tree_cpu(pid) - before
    r.delete(key)
    r.close()
    return Figure(done / elapsed, used / max(1, done) * 1e6)


def xreadgroup_rows(servers: Servers, args: argparse.Namespace) -> None:
    sides: dict[str, tuple[int, int]] = {}  # name -> port, pid
    if shutil.which("redis-server"):
        proc, port = servers.redis()
        sides["redis"] = (port, proc.pid)
    proc, _, resp = servers.tidelog(tls=False)
    sides["tidelog"] = (resp, proc.pid)
    if args.before:
        proc, _, resp = servers.tidelog(tls=False, src=args.before)
        sides["before"] = (resp, proc.pid)
    runs = {name: 0 for name in sides}
    for count, entries in ((1, args.records), (100, args.records * 10)):

        def run(name: str, count: int = count, entries: int = entries) -> Figure:
            port, pid = sides[name]
            runs[name] += 1
            return group_loop(port, pid, f"g{count}x{runs[name]}", entries, count)

        print(f"  XREADGROUP COUNT {count} + XACK, redis-py loop, {entries} entries", flush=True)
        best = alternate(args.rounds, {name: lambda n=name: run(n) for name in sides})
        for name in sides:
            if name == "redis":
                continue
            label = f"XREADGROUP COUNT {count} + XACK, {name}"
            if "redis" in sides:
                row(label, "redis", best, ours=name)
            else:
                t = best[name]
                print(f"| {label} | (no redis-server) | {t.rate:,.0f}/s ({t.cpu_us:.0f} µs) | |")


def ab_rows(servers: Servers, args: argparse.Namespace, body: str) -> None:
    """tidelog against itself: `serve()`'s defaults (A) vs the options given (B)."""
    options = {k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in args.ab)}
    a_proc, a_port = servers.tidelog_with({})
    b_proc, b_port = servers.tidelog_with(options)
    label = ", ".join(args.ab)
    for connections in args.connections:
        for h1 in (True, False):
            proto = "HTTP/1.1" if h1 else "h2c"
            print(f"  publish -c{connections} {proto}: defaults vs {label}", flush=True)
            best = alternate(
                args.rounds,
                {
                    label: lambda c=connections, h=h1: h2load(
                        f"http://127.0.0.1:{b_port}/publish/bench", b_proc.pid, c, args.seconds, body, h
                    ),
                    "defaults": lambda c=connections, h=h1: h2load(
                        f"http://127.0.0.1:{a_port}/publish/bench", a_proc.pid, c, args.seconds, body, h
                    ),
                },
            )
            row(f"publish, h2load -c{connections}, {proto}", label, best, ours="defaults")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="runs of each side (best taken)")
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each h2load run")
    ap.add_argument(
        "--only", choices=["publish", "consume", "xadd", "xreadgroup"], help="one comparison only"
    )
    ap.add_argument("--records", type=int, default=5000, help="records a consume round")
    ap.add_argument(
        "--before",
        metavar="SRC",
        help="also tidelog importing from SRC (publish, consume and xreadgroup rows)",
    )
    ap.add_argument("--connections", type=int, nargs="+", default=[12, 64], help="h2load connections")
    ap.add_argument(
        "--modes", nargs="+", choices=["HTTP/2 + TLS", "h2c", "HTTP/1.1 cleartext"], help="tidelog protocols"
    )
    ap.add_argument("--workers", type=int, help="tidelog serve --workers N (default: the server's own)")
    ap.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="environment of tidelog's servers"
    )
    ap.add_argument(
        "--ab",
        nargs="+",
        metavar="OPTION=VALUE",
        help="instead: tidelog's defaults vs serve(OPTION=VALUE ...), publish only",
    )
    ap.add_argument("--trivial-server", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trivial_server:
        port, cert, key = args.trivial_server
        serve_trivial(int(port), cert, key)
        return 0
    if not shutil.which("h2load") and args.only not in ("xadd", "xreadgroup"):
        raise SystemExit("needs h2load: apt-get install nghttp2-client")
    env = dict(kv.split("=", 1) for kv in args.env)
    # Stopped with SIGTERM, still stop the servers (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"cores: {os.cpu_count()}; load {os.getloadavg()[0]:.2f} (a shared machine: figures are noisy)")
    print(
        "| work | peer (server CPU a request) | tidelog | ratio |\n| --- | ---: | ---: | ---: |", flush=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        body = Path(tmp) / "body.json"
        body.write_bytes(BODY)
        servers = Servers(Path(tmp), args.workers, env)
        try:
            if args.ab:
                ab_rows(servers, args, str(body))
            elif args.only in (None, "publish"):
                publish_rows(servers, args, str(body))
            if args.only in (None, "consume") and not args.ab:
                consume_rows(servers, args, str(body))
            if args.only in (None, "xadd") and not args.ab:
                xadd_rows(servers, args)
            if args.only in (None, "xreadgroup") and not args.ab:
                xreadgroup_rows(servers, args)
        finally:
            servers.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
