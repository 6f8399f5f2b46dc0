"""The `tidelog` command beside the Python API doing the same work, in one run.

    python bench/cli.py [--records N]

produce: an NDJSON file of N records piped into `tidelog produce` (a new
process: start-up, parsing, batches of 1000) against the Python API parsing
the same lines and calling `send_batch` per 1000 in this process.
consume: `tidelog consume` printing all N records to a pipe and committing,
against `Consumer.fetch` + `commit` in this process with no printing.
Figures are records/s, best of three on fresh files; the ratio is CLI / API.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tidelog

SCRIPT = Path(sys.executable).with_name("tidelog")
TIDELOG = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "tidelog.cli"]
CHUNK = 1000


def api_produce(db: str, data: Path) -> None:
    with tidelog.open(db) as log, data.open("rb") as f:
        producer = log.producer()
        chunk = []
        for line in f:
            chunk.append(json.loads(line))
            if len(chunk) == CHUNK:
                producer.send_batch("bench", chunk)
                chunk = []
        if chunk:
            producer.send_batch("bench", chunk)


def cli_produce(db: str, data: Path) -> None:
    with data.open("rb") as f:
        subprocess.run(
            [*TIDELOG, "--db", db, "produce", "bench", "--json"],
            stdin=f,
            stdout=subprocess.DEVNULL,
            check=True,
        )


def api_consume(db: str, n: int) -> None:
    with tidelog.open(db) as log:
        consumer = log.consumer("api")
        got = 0
        while got < n:
            msgs = consumer.fetch("bench", 0, 500)
            got += len(msgs)
            consumer.commit(msgs[-1])


def cli_consume(db: str, n: int) -> None:
    out = subprocess.run(
        [*TIDELOG, "--db", db, "consume", "bench", "--group", "cli"], stdout=subprocess.PIPE, check=True
    ).stdout
    assert out.count(b"\n") == n


def best(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    n = ap.parse_args().records
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "records.ndjson"
        data.write_text(
            "".join(json.dumps({"orderId": i, "amount": i % 997, "note": "bench"}) + "\n" for i in range(n))
        )

        def fresh(name: str) -> str:
            db = str(Path(tmp) / f"{name}-{time.perf_counter_ns()}.db")
            with tidelog.open(db) as log:
                log.create_topic("bench")
            return db

        produce_api = best(lambda: api_produce(fresh("api"), data))
        produce_cli = best(lambda: cli_produce(fresh("cli"), data))
        full = fresh("full")
        api_produce(full, data)
        # Each consume run starts its group from the beginning again.
        consume_api = best(lambda: (tidelog_reset(full, "api"), api_consume(full, n))[1])
        consume_cli = best(lambda: (tidelog_reset(full, "cli"), cli_consume(full, n))[1])

    print(f"tidelog CLI vs Python API, {n} JSON records of ~50 bytes, best of 3 (shared 2-core machine)")
    print(f"{'work':<10}{'CLI rec/s':>12}{'API rec/s':>12}{'CLI/API':>10}")
    for work, cli_s, api_s in (("produce", produce_cli, produce_api), ("consume", consume_cli, consume_api)):
        print(f"{work:<10}{n / cli_s:>12,.0f}{n / api_s:>12,.0f}{api_s / cli_s:>10.2f}")


def tidelog_reset(db: str, group: str) -> None:
    with tidelog.open(db) as log:
        log.consumer(group).seek("bench", 0, 0)


if __name__ == "__main__":
    main()
