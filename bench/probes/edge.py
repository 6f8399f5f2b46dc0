"""Probes of what the core and the routes accept: bounds, refused requests, stale acks, queue age.

    python bench/probes/edge.py --src PATH

Starts a real `tidelog serve` from the tidelog `src` tree at PATH
(`PYTHONPATH=PATH python -m tidelog serve --db FILE --port P --resp-port Q`,
default limits, so it runs on a tree from before the changes too) on
loopback, and prints one JSON object a line: {"probe": ..., "measure": ...,
"value": ..., "unit": ...}. About 10 s in all; every wait is bounded.

Probes (issue 27's findings 5 and 10-14):
- poison: a queue send with delay=1e300, a produce with a tidelog-deliver-at
  header of 2^63, an XADD with that field: the status of the write, then of
  every receive (SUBSCRIBE's first reply for the Redis front) after it;
- big integers: the status of a read at offset 2^63 and of the console's
  record page there;
- refused writes: how many of a list of refused requests (and reads) changed
  the SQLite file (every table compared before and after);
- stale ack: the answer to the receipt of an earlier delivery after the
  later one was acked;
- queue age: oldest_available_age_ms of a record nacked to the front again
  and again over 1.5 s;
- text: the status of /publish/{t}?key=%ff.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

START_S = 30  # a server that does not answer /healthz by then did not start
BIG = str(2**63)


def emit(probe: str, measure: str, value: Any, unit: str = "") -> None:
    print(json.dumps({"probe": probe, "measure": measure, "value": value, "unit": unit}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(src: str, db: Path) -> Iterator[tuple[httpx.Client, int]]:
    """A `tidelog serve` of the probed tree on `db`: (an HTTP client on it, its RESP port)."""
    port, resp_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": src}
    command = [sys.executable, "-m", "tidelog", "serve", "--db", str(db), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--resp-port", str(resp_port), "--clean-interval", "0"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + START_S
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/healthz").status_code == 200:
                        break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"the server from {src} did not start")
                time.sleep(0.1)
            yield client, resp_port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def dump(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file (a refused request must change none)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in tables}
    finally:
        conn.close()


def resp(port: int, *commands: list[str], replies: int) -> list[bytes]:
    """Send RESP commands on a fresh connection; the first lines of up to `replies` replies."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for args in commands:
            parts = [a.encode() for a in args]
            sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%b\r\n" % (len(p), p) for p in parts))
        data = b""
        deadline = time.monotonic() + 5
        with contextlib.suppress(TimeoutError, OSError):
            sock.settimeout(1)
            while data.count(b"\r\n") < replies * 3 and time.monotonic() < deadline:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    return [line for line in data.split(b"\r\n") if line[:1] in (b"+", b"-", b"*")]


def poison(client: httpx.Client, resp_port: int) -> None:
    sent = client.post("/v1/queues/p1/messages", json={"records": [{"value": 1}], "delay": 1e300})
    emit("poison", "send delay=1e300 status", sent.status_code)
    client.post("/v1/queues/p1/messages", json={"records": [{"value": 2}]})
    emit("poison", "receive after it, status", client.post("/v1/queues/p1/receive").status_code)
    header = {"value": 1, "headers": {"tidelog-deliver-at": BIG}}
    emit(
        "poison",
        "produce deliver-at=2^63 status",
        client.post("/v1/topics/p2/records", json={"records": [header]}).status_code,
    )
    client.post("/v1/queues/p2/messages", json={"records": [{"value": 2}]})
    emit("poison", "receive after the header, status", client.post("/v1/queues/p2/receive").status_code)
    added = resp(resp_port, ["XADD", "p3", "*", "value", "x", "tidelog-deliver-at", BIG], replies=1)
    emit("poison", "XADD deliver-at=2^63 refused", bool(added) and added[0].startswith(b"-"))
    resp(resp_port, ["PUBLISH", "p3", "ok"], replies=1)
    lines = resp(resp_port, ["SUBSCRIBE", "p3"], replies=2)
    emit("poison", "SUBSCRIBE after it answers an error", any(line.startswith(b"-") for line in lines))


def big_integers(client: httpx.Client) -> None:
    client.post("/v1/topics/b/records", json={"records": [{"value": 1}]})
    for after in (BIG, str(10**30)):
        status = client.get("/v1/topics/b/partitions/0/records", params={"after": after}).status_code
        emit("integers", f"read after={after[:6]}.. status", status)
    emit(
        "integers",
        "console record at 2^63 status",
        client.get(f"/console/topics/b/partitions/0/records/{BIG}").status_code,
    )


def refused_writes(client: httpx.Client, db: Path) -> None:
    client.post("/v1/topics", json={"name": "w"})
    client.post("/v1/topics/w/records", json={"records": [{"value": 1}, {"value": 2}]})
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/topics/missing/stream", {"params": {"group": "g1"}}),
        ("POST", "/v1/queues/w/receive", {"params": {"group": "g2", "visibility_timeout": "-1"}}),
        ("POST", "/v1/queues/w/ack", {"params": {"group": "g3"}, "json": {"receipt": "bogus"}}),
        ("POST", "/v1/groups/g4/commit", {"json": {"topic": "missing", "partition": 0, "offset": 1}}),
        ("POST", "/v1/queues/new/messages", {"json": {"records": [{"value": 1}], "delay": -1}}),
        (
            "POST",
            "/v1/queues/w/messages",
            {"params": {"group": "g5"}, "json": {"records": [{"value": 1}], "partition": 2**63}},
        ),
        ("GET", "/v1/queues/w/stats", {"params": {"group": "g6"}}),
        ("GET", "/v1/groups/g7/topics/w/records", {}),
        ("GET", "/api/topics/w/pull", {"params": {"group": "g8"}}),
    ]
    changed = []
    for method, path, kwargs in requests:
        before = dump(db)
        if path.endswith("/stream"):
            with client.stream(method, path, **kwargs) as response:
                status = response.status_code
        else:
            status = client.request(method, path, **kwargs).status_code
        if dump(db) != before:
            changed.append(f"{method} {path} ({status})")
    emit("refused writes", "refused requests and reads tried", len(requests))
    emit("refused writes", "of them changed the store", len(changed))
    for what in changed:
        emit("refused writes", "changed the store", what)


def stale_ack(client: httpx.Client) -> None:
    client.post("/v1/queues/s/messages", json={"records": [{"value": 1}]})
    first = client.post("/v1/queues/s/receive", params={"visibility_timeout": 0.3}).json()["messages"][0]
    time.sleep(0.4)
    second = client.post("/v1/queues/s/receive", params={"visibility_timeout": 30}).json()["messages"][0]
    client.post("/v1/queues/s/ack", json={"receipt": second["receipt"]})
    stale = client.post("/v1/queues/s/ack", json={"receipt": first["receipt"]})
    emit("stale ack", "earlier receipt after the later was acked, status", stale.status_code)
    batch = client.post("/v1/queues/s/ack", json={"receipts": [first["receipt"]]}).json()
    emit("stale ack", "in a batch, failed", len(batch.get("failed", [])))


def queue_age(client: httpx.Client) -> None:
    client.post("/v1/queues/age/messages", json={"records": [{"value": "poison"}]})
    for _ in range(3):
        (d,) = client.post("/v1/queues/age/receive").json()["messages"]
        time.sleep(0.5)
        client.post("/v1/queues/age/nack", json={"receipt": d["receipt"]})
    stats = client.get("/v1/queues/age/stats").json()
    emit(
        "queue age", "oldest_available_age_ms after a 1.5 s nack loop", stats["oldest_available_age_ms"], "ms"
    )


def text(client: httpx.Client) -> None:
    status = client.post("/publish/k?key=%ff", content=b"x").status_code
    emit("text", "/publish?key=%ff status", status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", required=True, help="a tidelog src directory to serve from")
    args = parser.parse_args()
    src = str(Path(args.src).resolve())
    with tempfile.TemporaryDirectory(prefix="tidelog-edge-") as where:
        db = Path(where) / "edge.db"
        with served(src, db) as (client, resp_port):
            poison(client, resp_port)
            big_integers(client)
            refused_writes(client, db)
            stale_ack(client)
            queue_age(client)
            text(client)


if __name__ == "__main__":
    main()
