"""Kafka listener benchmark: librdkafka through `tidelog serve` beside the Python core, one run, one store kind.

- core: `Producer.prepare` + `Log.write` in batches of 100 records, then
  `Log.read` 1000 records at a time, on a SQLite file;
- Kafka: a confluent-kafka (librdkafka) producer (batch.num.messages=100,
  lz4, acks=all) to a `tidelog serve --workers 1` on another SQLite file,
  then a consumer (assign, from the beginning, librdkafka's default fetch
  sizes: 1 MiB a partition) reading them all back, 1,000 a `consume` call.

Records are 100-byte values with a 10-byte key. The writes and then the
reads are measured `--rounds` times, taking turns (core, Kafka, and the
`--before` server's Kafka), so that each sees the same load; the medians are
compared. Each write goes to a new file; the reads read the first round's
files, from the page cache, each server the file it was sent. The server's CPU time (user
+ system, from /proc) over each Kafka phase is divided by the records to
give its CPU a record; the core's is this process's. Prints figures and
ratios, never passes or fails.

    python bench/kafka.py [--records 200000] [--rounds 3] [--before DIR]

`--before DIR` also runs a server from another source tree (a `src`
directory, e.g. `git archive main src | tar -x -C /tmp/before`, then
`--before /tmp/before/src`), producing to a file of its own and reading it back,
measured the same way in the same run.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import confluent_kafka as ck

import tidelog
from tidelog.records import NewRecord

VALUE = b"x" * 100
BATCH = 100
STALL_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def core_write(path: str, records: int) -> tuple[float, float]:
    with tidelog.open(path) as log:
        log.create_topic("bench", 1)
        producer = log.producer()
        batch = [NewRecord(VALUE, b"key-%06d" % i) for i in range(BATCH)]
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(records // BATCH):
            log.write([producer.prepare("bench", batch, partition=0)])
        return records / (time.perf_counter() - start), (time.process_time() - cpu) / records


def core_read(path: str, records: int) -> tuple[float, float]:
    with tidelog.open(path) as log:
        start, cpu = time.perf_counter(), time.process_time()
        after = read = 0
        while read < records:
            got = log.read("bench", 0, after, 1000)
            read += len(got)
            after = got[-1].offset
        return records / (time.perf_counter() - start), (time.process_time() - cpu) / records


@contextmanager
def serve(path: str, src: str | None = None) -> Iterator[tuple[str, int]]:
    """A `tidelog serve --workers 1` on `path` (from the source tree `src` when given): its bootstrap and pid."""
    port, kafka_port = free_port(), free_port()
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", path, "--workers", "1", "--port", str(port)]
    argv += ["--resp-port", "0", "--kafka-port", str(kafka_port), "--clean-interval", "0"]
    argv += ["--log-level", "warning"]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.path.abspath(src)
    server = subprocess.Popen(argv, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", kafka_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        settle(server.pid)
        yield f"127.0.0.1:{kafka_port}", server.pid
    finally:
        server.terminate()
        server.wait(30)


def settle(pid: int, timeout: float = 10.0) -> None:
    """Wait until a server started is done starting (its first console sample,
    its fronts' imports): under 5 ms of CPU in 100 ms, so that a phase
    measures the phase alone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cpu = cpu_seconds(pid)
        time.sleep(0.1)
        if cpu_seconds(pid) - cpu < 0.005:
            return


def produce(bootstrap: str, pid: int, records: int) -> tuple[float, float]:
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "batch.num.messages": BATCH,
            "compression.type": "lz4",
            "linger.ms": 5,
            "acks": "all",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.produce("bench", value=VALUE, key=b"warm-up", partition=0)
    producer.flush(30)
    cpu = cpu_seconds(pid)
    start = time.perf_counter()
    for i in range(records):
        producer.produce("bench", value=VALUE, key=b"key-%06d" % (i % BATCH), partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    return records / (time.perf_counter() - start), (cpu_seconds(pid) - cpu) / records


def fetch(bootstrap: str, pid: int, records: int) -> tuple[float, float]:
    # A first consumer takes the warm-up record with small fetches: the
    # server has answered a fetch (its code loaded) before the clock starts,
    # and the measured consumer has nothing prefetched.
    warm = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-warm-up",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 1024,
        }
    )
    warm.assign([ck.TopicPartition("bench", 0, 0)])
    while not warm.consume(1, 1.0):
        pass
    warm.close()
    settle(pid)
    # librdkafka postpones a partition's next fetch by fetch.queue.backoff.ms (a
    # second by default) once its queue holds queued.min.messages (100,000): a
    # server that answers faster than this process takes records in then waits
    # out a whole second per round (bimodal rounds: 1.4M records/s or 180k). Its
    # documentation suggests a low value where latency matters; both trees get it.
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        consumer.assign([ck.TopicPartition("bench", 0, 1)])  # past the warm-up record
        cpu = cpu_seconds(pid)
        start = time.perf_counter()
        got = 0
        stalled = time.monotonic() + STALL_S
        while got < records:
            # 1,000 a call, as the core reads: asked for 10,000, librdkafka
            # waited out the call's timeout (a second) with records queued,
            # after a warmed-up process's consumer had fetched them all.
            for msg in consumer.consume(1_000, 1.0):
                if msg.error() is None:
                    got += 1
                    stalled = time.monotonic() + STALL_S
            if time.monotonic() > stalled:
                raise RuntimeError(
                    f"the consumer got {got} of {records} records, then nothing for {STALL_S} s"
                )
        return records / (time.perf_counter() - start), (cpu_seconds(pid) - cpu) / records
    finally:
        consumer.close()


def median(figures: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(f[0] for f in figures), statistics.median(f[1] for f in figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="reads of each kind, taking turns")
    parser.add_argument("--before", metavar="DIR", help="another source tree's src directory, measured alike")
    args = parser.parse_args()
    records = args.records - args.records % BATCH
    load_before = os.getloadavg()
    kinds = ["kafka"] + (["before"] if args.before else [])
    writes: dict[str, list[tuple[float, float]]] = {"core": [], **{k: [] for k in kinds}}
    reads: dict[str, list[tuple[float, float]]] = {"core": [], **{k: [] for k in kinds}}
    source = {"kafka": None, "before": args.before}
    with tempfile.TemporaryDirectory() as tmp:
        # Writes take turns too, each to a new file; the reads then read
        # the first round's files, each server the one it was sent (a tree
        # keeps what it keeps: this one the batches as produced too).
        for i in range(args.rounds):
            path = os.path.join(tmp, f"core-{i}.db")
            writes["core"].append(core_write(path, records))
            for kind in kinds:
                with serve(os.path.join(tmp, f"{kind}-{i}.db"), source[kind]) as (bootstrap, pid):
                    writes[kind].append(produce(bootstrap, pid, records))
                if i:
                    remove_db(os.path.join(tmp, f"{kind}-{i}.db"))
            if i:
                remove_db(path)
        for _ in range(args.rounds):
            reads["core"].append(core_read(os.path.join(tmp, "core-0.db"), records))
            for kind in kinds:
                with serve(os.path.join(tmp, f"{kind}-0.db"), source[kind]) as (bootstrap, pid):
                    reads[kind].append(fetch(bootstrap, pid, records))
    load_after = os.getloadavg()
    print(
        f"{records} records of {len(VALUE)} bytes with a 10-byte key, SQLite, one run, "
        f"medians of {args.rounds} rounds"
    )
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f}"
    )
    # Two ratios: by wall clock (what a client sees, the client's own CPU and
    # the loopback included) and by CPU a record (the server's against the core's).
    for work, figures, core_label in (
        ("produce", writes, f"Log.write (batches of {BATCH})"),
        ("fetch", reads, "Log.read (1000 a call)"),
    ):
        core_rate, core_cpu = median(figures["core"])
        print(f"{work}:")
        print(f"  core   {core_label:<30}{core_rate:>10,.0f} records/s  CPU {core_cpu * 1e6:.1f} us/record")
        for kind in kinds:
            rate, cpu = median(figures[kind])
            label = (
                "librdkafka"
                + (", lz4" if work == "produce" else "")
                + (", --before" if kind == "before" else "")
            )
            print(
                f"  kafka  {label:<30}{rate:>10,.0f} records/s  server CPU {cpu * 1e6:.1f} us/record  "
                f"{rate / core_rate:.2f} of the core's rate, {core_cpu / cpu:.2f} by CPU (target 0.7)"
            )
    for work, figures in (("produce", writes), ("fetch", reads)):  # every round, to show the spread
        for kind, rounds in figures.items():
            each = ", ".join(f"{rate:,.0f} ({cpu * 1e6:.1f} us)" for rate, cpu in rounds)
            print(f"  rounds, {work}, {kind}: {each}", file=sys.stderr)


def remove_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


if __name__ == "__main__":
    main()
