"""A mixed load on every front with fuzzers beside it: does the server lose an acked
record, and does its memory stay level?

    python bench/soak.py [--minutes 5] [--warm-up 60] [--store sqlite|postgres]

One `tidelog serve` (one process; SQLite, or PostgreSQL at TIDELOG_TEST_PG's server)
takes, at once and for the whole run:
- HTTP: batches of 20 records published to `soak-http`, a queue group receiving and
  acking them;
- Redis: XADD to `soak-redis` one at a time, a group reading them with XREADGROUP and XACK;
- Kafka: a confluent-kafka producer (acks=all, lz4) to `soak-kafka`, a consumer group
  reading with commits;
- and beside them, Kafka frames of every API mutated at random (the decoder's fuzzer),
  and duplex subscribers sending junk and hanging up.
Every record carries a unique id; an id counts as acked when its front said so (the
HTTP answer, XADD's id, librdkafka's delivery report). At the end every acked id must be
in the log. The server's anonymous memory (its heap, not SQLite's mapped pages) is read
every 5 s: its level after the warm-up, and the highest after that, are printed.
Prints figures, never passes or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka as ck
import httpx
import redis

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

import tidelog  # noqa: E402
from kafka_wire import encode_request  # noqa: E402
from tidelog.server.kafka.wire import APIS  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def anonymous(pid: int) -> int:
    """RssAnon of the server and its children (granian's worker), in bytes."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return total


class Run:
    def __init__(self, url: str, seconds: float):
        self.url, self.deadline = url, time.monotonic() + seconds
        self.http, self.resp, self.kafka = free_port(), free_port(), free_port()
        self.acked: dict[str, set[str]] = {"http": set(), "redis": set(), "kafka": set()}
        self.consumed: dict[str, int] = {"http": 0, "redis": 0, "kafka": 0}
        self.fuzzed = {"kafka_frames": 0, "duplex_junk": 0}
        self.errors: list[str] = []
        self.lock = threading.Lock()
        command = [sys.executable, "-m", "tidelog", "serve", "--db", url, "--port", str(self.http)]
        command += ["--resp-port", str(self.resp), "--kafka-port", str(self.kafka), "--workers", "1"]
        self.log_path = Path(tempfile.mkdtemp(prefix="soak-log-")) / "serve.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log)
        for _ in range(300):
            try:
                httpx.get(f"http://127.0.0.1:{self.http}/healthz", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("the server did not start")

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def note(self, what: str) -> None:
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append(what)

    def ids(self, front: str) -> iter:
        n = 0
        while True:
            n += 1
            yield f"{front}-{n}"

    # the loads ---------------------------------------------------------------------

    def http_producer(self) -> None:
        ids = self.ids("http")
        with httpx.Client(base_url=f"http://127.0.0.1:{self.http}", timeout=30) as c:
            while self.running():
                batch = [next(ids) for _ in range(20)]
                try:
                    r = c.post(
                        "/v1/topics/soak-http/records", json={"records": [{"value": i} for i in batch]}
                    )
                    if r.status_code < 300:
                        self.acked["http"].update(batch)
                except httpx.HTTPError as e:
                    self.note(f"http produce: {e}")

    def http_consumer(self) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{self.http}", timeout=30) as c:
            while self.running():
                try:
                    got = c.post("/v1/queues/soak-http/receive", json={"max_messages": 50, "wait": 1}).json()
                    receipts = [m["receipt"] for m in got.get("records", got.get("messages", []))]
                    if receipts:
                        c.post("/v1/queues/soak-http/ack", json={"receipts": receipts})
                        self.consumed["http"] += len(receipts)
                except (httpx.HTTPError, ValueError) as e:
                    self.note(f"http consume: {e}")
                    time.sleep(0.2)

    def redis_producer(self) -> None:
        ids = self.ids("redis")
        r = redis.Redis(port=self.resp, socket_timeout=30)
        while self.running():
            i = next(ids)
            try:
                if r.xadd("soak-redis", {"value": i}):
                    self.acked["redis"].add(i)
            except redis.RedisError as e:
                self.note(f"redis produce: {e}")
                time.sleep(0.2)

    def redis_consumer(self) -> None:
        r = redis.Redis(port=self.resp, socket_timeout=30)
        while self.running():
            try:
                with_group = r.xreadgroup("soak", "c1", {"soak-redis": ">"}, count=100, block=1000)
                for _, entries in with_group or []:
                    r.xack("soak-redis", "soak", *[e for e, _ in entries])
                    self.consumed["redis"] += len(entries)
            except redis.ResponseError as e:
                if "NOGROUP" in str(e):
                    try:
                        r.xgroup_create("soak-redis", "soak", id="0", mkstream=True)
                    except redis.ResponseError:
                        pass
                else:
                    self.note(f"redis consume: {e}")
            except redis.RedisError as e:
                self.note(f"redis consume: {e}")
                time.sleep(0.2)

    def kafka_producer(self) -> None:
        ids = self.ids("kafka")
        p = ck.Producer(
            {"bootstrap.servers": f"127.0.0.1:{self.kafka}", "acks": "all", "compression.type": "lz4"}
        )

        def delivered(err, msg) -> None:
            if err is None:
                self.acked["kafka"].add(msg.value().decode())

        while self.running():
            try:
                p.produce("soak-kafka", next(ids).encode(), on_delivery=delivered)
            except BufferError:
                p.poll(0.1)
                continue
            p.poll(0)
            time.sleep(0.0005)
        p.flush(30)

    def kafka_consumer(self) -> None:
        c = ck.Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{self.kafka}",
                "group.id": "soak",
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe(["soak-kafka"])
        while self.running():
            for m in c.consume(500, 1.0):
                if m.error() is None:
                    self.consumed["kafka"] += 1
        c.close()

    # the fuzzers beside ----------------------------------------------------------------

    def kafka_fuzzer(self) -> None:
        rng = random.Random(40)
        served = [(k, v) for k, (_, lo, hi) in APIS.items() for v in range(lo, hi + 1)]
        while self.running():
            key, version = rng.choice(served)
            frame = bytearray(encode_request(key, version, {}, 3))
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(12, max(13, len(frame)))
                choice = rng.random()
                if choice < 0.4 and at < len(frame):
                    frame[at] ^= 1 << rng.randrange(8)
                elif choice < 0.6 and at + 4 <= len(frame):
                    frame[at : at + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff"])
                elif choice < 0.7 and at < len(frame):  # a compact count of about 2^34
                    frame[at : at + 1] = b"\xff\xff\xff\xff\x60"
                else:
                    frame = frame[: rng.randrange(4, len(frame) + 1)]
            frame[0:4] = struct.pack(">i", len(frame) - 4)
            try:
                with socket.create_connection(("127.0.0.1", self.kafka), timeout=5) as s:
                    s.sendall(bytes(frame))
                    s.shutdown(socket.SHUT_WR)
                    while s.recv(65536):
                        pass
            except OSError:
                pass
            self.fuzzed["kafka_frames"] += 1

    def duplex_junk(self) -> None:
        rng = random.Random(41)
        while self.running():
            try:
                with socket.create_connection(("127.0.0.1", self.http), timeout=5) as s:
                    s.sendall(
                        b"POST /subscribe/soak-junk HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    )
                    junk = bytes(rng.randrange(32, 127) for _ in range(2000)).replace(b"/", b"\n")
                    s.sendall(b"%x\r\n%s\r\n" % (len(junk), junk))
            except OSError:
                pass
            self.fuzzed["duplex_junk"] += 1
            time.sleep(0.05)

    # the checks ----------------------------------------------------------------------

    def missing(self) -> dict[str, int]:
        with tidelog.open(self.url) as log:
            found: set[str] = set()
            for topic in ("soak-http", "soak-redis", "soak-kafka"):
                try:
                    parts = log.describe(topic).partitions
                except tidelog.TidelogError:
                    continue
                for p in parts:
                    after = 0
                    while rows := log.read(topic, p.partition, after, 10_000):
                        for m in rows:
                            value = m.data
                            if isinstance(value, dict):  # a Redis entry: its fields
                                value = value.get("value")
                            if isinstance(value, bytes):
                                value = value.decode(errors="replace")
                            found.add(str(value).strip('"'))
                        after = rows[-1].offset
        return {front: len(ids - found) for front, ids in self.acked.items()}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--warm-up", type=float, default=60, help="seconds before the memory level is taken")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="soak-")
    url = os.path.join(tmp, "soak.db")
    if args.store == "postgres":
        url = os.environ.get("TIDELOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
    load_before = Path("/proc/loadavg").read_text().split()[0]
    run = Run(url, args.minutes * 60)
    threads = [
        threading.Thread(target=fn, daemon=True)
        for fn in (
            run.http_producer,
            run.http_consumer,
            run.redis_producer,
            run.redis_consumer,
            run.kafka_producer,
            run.kafka_consumer,
            run.kafka_fuzzer,
            run.duplex_junk,
        )
    ]
    for t in threads:
        t.start()
    started = time.monotonic()
    samples: list[tuple[float, int]] = []
    while run.running():
        samples.append((time.monotonic() - started, anonymous(run.proc.pid)))
        time.sleep(5)
    for t in threads:
        t.join(60)
    alive = run.proc.poll() is None
    run.stop()
    level = next((a for t, a in samples if t >= args.warm_up), samples[-1][1])
    later = max(a for t, a in samples if t >= args.warm_up)
    print(
        json.dumps(
            {
                "minutes": args.minutes,
                "store": args.store,
                "load before/after": f"{load_before} / {Path('/proc/loadavg').read_text().split()[0]}",
                "server stayed up": alive,
                "acked": {k: len(v) for k, v in run.acked.items()},
                "consumed": run.consumed,
                "acked but missing": run.missing(),
                "fuzzed": run.fuzzed,
                "anonymous MB after warm-up": round(level / (1 << 20), 1),
                "anonymous MB highest after": round(later / (1 << 20), 1),
                "within 20%": later <= 1.2 * level,
                "errors seen by the loads (first 20)": run.errors,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
