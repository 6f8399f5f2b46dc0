"""Console benchmark: what one history sample costs, beside a /metrics scrape.

    python bench/console.py [--records 200000] [--topics 4] [--groups 4] [--runs 5]

The console's sampler reads every topic's partitions, every stream group's
lag and every queue group's counts once an interval (5 s by default); the
overview's refresh answers those figures, so open pages add nothing. A
Prometheus scrape of /metrics reads the same kinds of figures; its time on
the same log is the baseline, measured in the same run. Never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from prometheus_client import generate_latest

import tidelog
from tidelog.server.http.console.figures import overview
from tidelog.server.http.console.history import History
from tidelog.server.http.metrics import Metrics


def timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="tidelog-cbench-") as tmp,
        tidelog.open(os.path.join(tmp, "c.db")) as log,
    ):
        per_topic = args.records // args.topics
        value = os.urandom(100)
        for t in range(args.topics):
            log.create_topic(f"t{t}", partitions=4)
            producer = log.producer()
            for p in range(4):
                for start in range(0, per_topic // 4, 10_000):
                    producer.send_batch(f"t{t}", [value] * min(10_000, per_topic // 4 - start), partition=p)
        for g in range(args.groups):
            log.consumer(f"g{g}").commit(f"t{g % args.topics}", 0, 100)
            log.queue(f"t{g % args.topics}", f"q{g}")
        history = History()
        metrics = Metrics(log)
        sample = timed(lambda: overview(log, history), args.runs)
        scrape = timed(lambda: generate_latest(metrics.registry), args.runs)
        print(
            f"{args.records:,} records in {args.topics} topics x 4 partitions, {args.groups} stream + {args.groups} queue groups"
        )
        print(f"console sample (figures.overview):  {sample * 1000:8.1f} ms  median of {args.runs}")
        print(f"/metrics scrape (baseline):         {scrape * 1000:8.1f} ms  median of {args.runs}")


if __name__ == "__main__":
    main()
