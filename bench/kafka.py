"""Kafka listener benchmark: librdkafka through `tidelog serve` beside the Python core, one run, one store kind.

- core: `Producer.prepare` + `Log.write` in batches of 100 records, then
  `Log.read` 1000 records at a time, on a SQLite file;
- Kafka: a confluent-kafka (librdkafka) producer (batch.num.messages=100,
  lz4, acks=all) to a `tidelog serve --workers 1` on another SQLite file,
  then a consumer (assign, from the beginning) reading them all back.

Records are 100-byte values with a 10-byte key. The server's CPU time
(user + system, from /proc) over each Kafka phase is divided by the records
to give its CPU a record. Prints figures and ratios, never passes or fails.

    python bench/kafka.py [--records 200000]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import confluent_kafka as ck

import tidelog
from tidelog.records import NewRecord

VALUE = b"x" * 100
BATCH = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def core(path: str, records: int) -> tuple[float, float, float, float]:
    with tidelog.open(path) as log:
        log.create_topic("bench", 1)
        producer = log.producer()
        batch = [NewRecord(VALUE, b"key-%06d" % i) for i in range(BATCH)]
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(records // BATCH):
            log.write([producer.prepare("bench", batch, partition=0)])
        write_rate = records / (time.perf_counter() - start)
        write_cpu = (time.process_time() - cpu) / records
        start, cpu = time.perf_counter(), time.process_time()
        after = read = 0
        while read < records:
            got = log.read("bench", 0, after, 1000)
            read += len(got)
            after = got[-1].offset
        read_rate = records / (time.perf_counter() - start)
        read_cpu = (time.process_time() - cpu) / records
    return write_rate, read_rate, write_cpu, read_cpu


def kafka(path: str, records: int) -> tuple[float, float, float, float]:
    port, kafka_port = free_port(), free_port()
    argv = [sys.executable, "-m", "tidelog.cli", "serve", "--db", path, "--workers", "1", "--port", str(port)]
    argv += [
        "--resp-port",
        "0",
        "--kafka-port",
        str(kafka_port),
        "--clean-interval",
        "0",
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(argv, env={**os.environ, "TIDELOG_KAFKA_PORT": str(kafka_port)})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", kafka_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        bootstrap = f"127.0.0.1:{kafka_port}"
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
        cpu = cpu_seconds(server.pid)
        start = time.perf_counter()
        for i in range(records):
            producer.produce("bench", value=VALUE, key=b"key-%06d" % (i % BATCH), partition=0)
            if i % 10_000 == 0:
                producer.poll(0)
        producer.flush(120)
        produce_rate = records / (time.perf_counter() - start)
        produce_cpu = (cpu_seconds(server.pid) - cpu) / records
        consumer = ck.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
        )
        consumer.assign([ck.TopicPartition("bench", 0, 1)])  # past the warm-up record
        cpu = cpu_seconds(server.pid)
        start = time.perf_counter()
        got = 0
        while got < records:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    got += 1
        fetch_rate = records / (time.perf_counter() - start)
        fetch_cpu = (cpu_seconds(server.pid) - cpu) / records
        consumer.close()
        return produce_rate, fetch_rate, produce_cpu, fetch_cpu
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    records = args.records - args.records % BATCH
    with tempfile.TemporaryDirectory() as tmp:
        write_rate, read_rate, write_cpu, read_cpu = core(os.path.join(tmp, "core.db"), records)
        produce_rate, fetch_rate, produce_cpu, fetch_cpu = kafka(os.path.join(tmp, "kafka.db"), records)
    print(f"{records} records of {len(VALUE)} bytes with a 10-byte key, SQLite, one run")
    print(
        f"core   Log.write (batches of {BATCH}) {write_rate:>10,.0f} records/s  CPU {write_cpu * 1e6:.1f} us/record"
    )
    print(
        f"core   Log.read (1000 a call)      {read_rate:>10,.0f} records/s  CPU {read_cpu * 1e6:.1f} us/record"
    )
    # Two ratios: by wall clock (what a client sees, the client's own CPU and
    # the loopback included) and by CPU a record (the server's against the core's).
    print(
        f"kafka  produce (librdkafka, lz4)    {produce_rate:>10,.0f} records/s  server CPU "
        f"{produce_cpu * 1e6:.1f} us/record  {produce_rate / write_rate:.2f} of the core's rate, "
        f"{write_cpu / produce_cpu:.2f} by CPU"
    )
    print(
        f"kafka  fetch (librdkafka)          {fetch_rate:>10,.0f} records/s  server CPU "
        f"{fetch_cpu * 1e6:.1f} us/record  {fetch_rate / read_rate:.2f} of the core's rate, "
        f"{read_cpu / fetch_cpu:.2f} by CPU"
    )


if __name__ == "__main__":
    main()
