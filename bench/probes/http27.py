"""Probes of the HTTP transport and its push subscribers (issue 27), for the
docs' before -> after table.

Starts `tidelog serve` from a given `src` tree (PYTHONPATH=SRC) on loopback
with its default limits, runs each probe against it and prints one JSON
object a line: {"probe", "measure", "value", "unit"}. Runs on the tree from
before the change as well (a flag it lacks is left out, and said so).

    python bench/probes/http27.py --src /path/to/tidelog/src [--only NAME ...]

- metrics: 20,000 requests with made-up methods (answered 401: a token is
  set): the server's RSS before and after, the series, /metrics' size and
  the time a scrape takes.
- flood: more silent TCP connections than a worker holds: whether /healthz
  answers while they are held, and how many the server still holds after
  handshake_timeout (10 s) and a margin (its established connections on
  the port, from /proc/net/tcp).
- duplex_ahead: an ACK sent ahead on POST /subscribe over HTTP/2 while the
  subscriber waits for a record: the stream's answer.
- frozen_ws: a WebSocket subscriber that takes a record and says nothing:
  seconds until another consumer gets it (--max-hold 2 where the tree has
  the flag; null: still held when the probe gave up).
- disconnects: 80 clients hanging up mid-body: tracebacks in the server's
  log and 5xx in its metrics.

Bounded: under 60 s in all. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

TOKEN = "probe-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START_TIMEOUT_S = 30.0


def say(probe: str, measure: str, value: object, unit: str) -> None:
    print(json.dumps({"probe": probe, "measure": measure, "value": value, "unit": unit}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path
    flags: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        """The supervisor and its workers."""
        found = [self.proc.pid]
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            with open(f"/proc/{self.proc.pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
        return found

    def rss_mb(self) -> float:
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as f:
                    total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            except (OSError, StopIteration):
                pass
        return round(total / 1024, 1)


def has_flag(src: str, flag: str) -> bool:
    env = {**os.environ, "PYTHONPATH": src}
    shown = subprocess.run(
        [sys.executable, "-m", "tidelog", "serve", "--help"], env=env, capture_output=True, text=True
    )
    return flag in shown.stdout


@contextmanager
def serving(src: str, work: Path, *flags: str, token: bool = False) -> Iterator[Server]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": src}
    if token:
        env["TIDELOG_TOKEN"] = TOKEN
    else:
        env.pop("TIDELOG_TOKEN", None)
    db = work / f"probe-{port}.db"
    log = work / f"server-{port}.log"
    argv = [sys.executable, "-m", "tidelog", "serve", "--db", str(db), "--port", str(port)]
    argv += ["--resp-port", str(free_port()), *flags]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, port, log, list(flags))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                httpx.get(f"{server.url}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- the probes -----------------------------------------------------------------------------


def metrics(src: str, work: Path) -> None:
    sent = 20_000
    with serving(src, work, token=True) as server:
        httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=30)  # the series every server has
        before = server.rss_mb()
        # Several connections, so that every worker gets its share.
        per = sent // 8
        for c in range(8):
            with socket.create_connection(("127.0.0.1", server.port), timeout=60) as raw:
                for start in range(0, per, 500):
                    n = c * per + start
                    raw.sendall(
                        b"".join(
                            f"FOO{i} /x{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(n, n + 500)
                        )
                    )
                    answered = b""
                    while answered.count(b"HTTP/1.1 ") < 500:
                        chunk = raw.recv(1 << 20)
                        if not chunk:
                            break
                        answered += chunk
        took = time.perf_counter()
        scrape = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=120)
        took = time.perf_counter() - took
        after = server.rss_mb()
        series = [
            line for line in scrape.text.splitlines() if line.startswith("tidelog_http_requests_total{")
        ]
        say("metrics", "rss_before", before, "MB")
        say("metrics", "rss_after_20k_made_up_methods", after, "MB")
        say("metrics", "request_series", len(series), "series")
        say("metrics", "metrics_size", round(len(scrape.content) / 1024, 1), "KiB")
        say("metrics", "scrape", round(took * 1000), "ms")


def flood(src: str, work: Path) -> None:
    with serving(src, work) as server:
        workers = len(server.pids()) - 1 or 1
        count = 2200 * workers  # past granian's old 2048 a worker, and past max_connections (1024)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        count = min(count, hard - 200)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, count + 100), hard))
        held = []
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", server.port))
            except BlockingIOError:
                pass
            held.append(s)
        time.sleep(1.0)
        start = time.perf_counter()
        try:
            status: object = httpx.get(f"{server.url}/healthz", timeout=3).status_code
        except httpx.HTTPError as e:
            status = type(e).__name__
        say("flood", "silent_connections", count, "connections")
        say("flood", "healthz_during_flood", status, "status")
        say("flood", "healthz_wait", round((time.perf_counter() - start) * 1000), "ms")
        time.sleep(12.0)  # handshake_timeout (10 s) and the guard's tick
        say("flood", "server_connections_after_12s", established(server.port), "connections")
        for s in held:
            s.close()


def established(port: int) -> int:
    """The server's established TCP connections on `port` (accepted or
    waiting in its backlog), as the kernel lists them."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        count += sum(1 for row in rows if row[3] == "01" and int(row[1].rsplit(":", 1)[1], 16) == port)
    return count


def duplex_ahead(src: str, work: Path) -> None:
    import h2.config
    import h2.connection
    import h2.events

    with serving(src, work) as server:
        httpx.post(f"{server.url}/v1/topics", json={"name": "jobs"}).raise_for_status()
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":path", "/subscribe/jobs"),
            (":scheme", "http"),
            (":authority", "x"),
        ]
        conn.send_headers(sid, headers)
        conn.send_data(sid, b'"INIT"\n')
        sock.sendall(conn.data_to_send())
        time.sleep(0.3)
        conn.send_data(sid, b'"ACK"\n')  # ahead: nothing is out yet
        sock.sendall(conn.data_to_send())
        time.sleep(0.3)
        httpx.post(f"{server.url}/publish/jobs", content=b"a")
        status, body, ended = None, b"", False
        try:
            while b"\n" not in body and not ended:
                for event in conn.receive_data(sock.recv(65536)):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = int(dict(event.headers)[b":status"])
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length, sid)
                    elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                        ended = True
                sock.sendall(conn.data_to_send())
        except OSError:
            pass
        sock.close()
        first = body.split(b"\n", 1)[0]
        answer = "message" if b'"msg"' in first else ("error" if first else "nothing")
        say("duplex_ahead", "status", status, "http status")
        say("duplex_ahead", "first_answer", answer, "kind")


def frozen_ws(src: str, work: Path) -> None:
    import websockets

    flags = ["--max-hold", "2"] if has_flag(src, "--max-hold") else []
    give_up = 15.0
    with serving(src, work, *flags) as server:
        httpx.post(f"{server.url}/publish/jobs", content=b"held").raise_for_status()
        url = server.url.replace("http://", "ws://") + "/subscribe/jobs"

        async def run() -> float | None:
            async with websockets.connect(url) as frozen:
                await frozen.send("INIT")
                await asyncio.wait_for(frozen.recv(), 10)
                start = time.perf_counter()
                while time.perf_counter() - start < give_up:
                    stats = httpx.get(f"{server.url}/v1/queues/jobs/stats", timeout=5).json()
                    if stats["available"]:
                        async with websockets.connect(url) as other:
                            await other.send("INIT")
                            got = json.loads(await asyncio.wait_for(other.recv(), 10))
                            if base64.b64decode(got["msg"]) == b"held":
                                return time.perf_counter() - start
                    await asyncio.sleep(0.1)
            return None

        released = asyncio.run(run())
        say("frozen_ws", "setting", " ".join(flags) or "default (no --max-hold flag)", "flags")
        say("frozen_ws", "released_after", None if released is None else round(released, 2), "s")


def disconnects(src: str, work: Path) -> None:
    paths = ["/publish/t", "/v1/topics", "/v1/topics/t/records", "/api/topics"]
    with serving(src, work, "--workers", "1") as server:
        hung_up = 0
        for _ in range(20):
            for path in paths:
                with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
                    s.sendall(
                        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: 4096\r\n\r\n{".encode()
                    )
                    time.sleep(0.005)
                hung_up += 1
        time.sleep(0.5)
        scrape = httpx.get(f"{server.url}/metrics", timeout=10).text
        errors = sum(
            float(line.split()[-1])
            for line in scrape.splitlines()
            if line.startswith("tidelog_http_requests_total{") and re.search(r'status="5\d\d"', line)
        )
    log = server.log.read_text(errors="replace")
    say("disconnects", "hung_up", hung_up, "requests")
    say("disconnects", "tracebacks_in_log", log.count("Traceback"), "tracebacks")
    say("disconnects", "5xx_in_metrics", int(errors), "requests")


PROBES: dict[str, Callable[[str, Path], None]] = {
    "metrics": metrics,
    "flood": flood,
    "duplex_ahead": duplex_ahead,
    "frozen_ws": frozen_ws,
    "disconnects": disconnects,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, help="a tidelog src directory to serve from")
    parser.add_argument("--only", nargs="*", choices=sorted(PROBES), help="run only these probes")
    args = parser.parse_args()
    src = str(Path(args.src).resolve())
    with tempfile.TemporaryDirectory(prefix="probe-http27-") as tmp:
        for name, probe in PROBES.items():
            if args.only and name not in args.only:
                continue
            try:
                probe(src, Path(tmp))
            except Exception as e:  # noqa: BLE001 - one probe failing is a figure too
                say(name, "error", f"{type(e).__name__}: {e}"[:300], "error")


if __name__ == "__main__":
    main()
