"""A short produce-then-consume demo: `python -m tidelog.demo --db tidelog.db`."""

from __future__ import annotations

import argparse

import tidelog


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", default="tidelog.db", help="store URL (default: tidelog.db)")
    args = ap.parse_args(argv)
    with tidelog.open(args.db) as log:
        log.create_topic("demo.orders", partitions=2)
        producer = log.producer(id="demo")
        for n in range(1, 6):
            sent = producer.send("demo.orders", {"orderId": n, "amount": n * 10}, key=f"user-{n % 3}")
            print(f"sent   orderId={n} -> partition {sent.partition} offset {sent.offset}")
        consumer = log.consumer("demo.processors")
        for partition in range(2):
            for msg in consumer.fetch("demo.orders", partition):
                print(f"read   partition {msg.partition} offset {msg.offset}: {msg.data}")
                consumer.commit(msg)
            print(
                f"group demo.processors committed {consumer.committed('demo.orders', partition)} "
                f"on partition {partition}"
            )
        print(f"{args.db}: {log.describe('demo.orders').records} records in demo.orders")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
