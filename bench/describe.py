"""What the Spark planner's call costs: `Log.offsets` beside `Log.describe`.

    python bench/describe.py [--records 1000000] [--partitions 4]

describe counts each partition's records and bytes (a scan on SQLite);
offsets reads each partition's first and last offset only (two index seeks).
The planner calls one of them every trigger. Prints the time of each, the
baseline (describe) first, in the same run on the same file. Never passes or
fails.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import tidelog


def timed(fn, rounds: int) -> float:
    fn()  # warm the page cache
    started = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - started) / rounds * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, tidelog.open(os.path.join(tmp, "d.db")) as log:
        log.create_topic("t", partitions=args.partitions)
        producer = log.producer()
        per = args.records // args.partitions
        for p in range(args.partitions):
            for start in range(0, per, 100_000):
                producer.send_batch("t", [b"x" * 100] * min(100_000, per - start), partition=p)
        describe = timed(lambda: log.describe("t"), args.rounds)
        offsets = timed(lambda: log.offsets("t"), args.rounds)
        print(f"SQLite, {args.records:,} records in {args.partitions} partitions:")
        print(f"  describe (baseline) {describe:10.3f} ms a call")
        print(f"  offsets             {offsets:10.3f} ms a call  ({describe / offsets:,.0f}x faster)")


if __name__ == "__main__":
    main()
