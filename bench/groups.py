"""Stream group benchmark: rebalance times and 4-member consume throughput.

    python bench/groups.py [--records 200000]

Rebalance after a join: from the new member's join until it holds its
share (the others release at their next poll). After a death: from the last
heartbeat of a member that stops until its partitions are held by others
(session_timeout bounds it). Throughput: 4 member processes drain an
8-partition topic, committing after every poll, beside one process reading
the same records with a manual consumer (the single-reader ceiling).
Prints figures, never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import tidelog

VALUE = os.urandom(100)

MEMBER = textwrap.dedent(
    """
    import os, sys, time, tidelog
    path, name, ready, go, stop = sys.argv[1:6]
    log = tidelog.open(path)
    c = log.consumer("bench", topics=["t"], session_timeout=5, heartbeat_interval=0.2, member_id=name)
    open(ready, "w").close()
    while not os.path.exists(go):
        c.poll(timeout=0)  # take part in the rebalance, consume nothing yet
        time.sleep(0.01)
    while not os.path.exists(stop):
        if c.poll(timeout=0.05, max_messages=1000):
            c.commit()
    c.close()
    """
)


def fill(path: str, records: int) -> None:
    with tidelog.open(path) as log:
        log.create_topic("t", partitions=8)
        producer = log.producer()
        per = records // 8
        for p in range(8):
            for i in range(0, per, 1000):
                producer.send_batch("t", [VALUE] * min(1000, per - i), partition=p)


def throughput(tmp: str, records: int) -> tuple[float, float]:
    path = os.path.join(tmp, "tp.db")
    fill(path, records)
    go, stop = os.path.join(tmp, "go"), os.path.join(tmp, "stop")
    ready = [os.path.join(tmp, f"ready{i}") for i in range(4)]
    procs = [
        subprocess.Popen([sys.executable, "-c", MEMBER, path, f"m{i}", ready[i], go, stop]) for i in range(4)
    ]
    with tidelog.open(path) as log:
        # Start the clock once all four hold their share, not at process start.
        while (
            not all(os.path.exists(r) for r in ready)
            or len([m for m in log.group("bench").members() if len(m.partitions) == 2]) < 4
        ):
            time.sleep(0.02)
        open(go, "w").close()
        start = time.perf_counter()
        while sum(x.lag for x in log.describe_group("bench", ["t"])) > 0:
            time.sleep(0.01)
        group = time.perf_counter() - start
    open(stop, "w").close()
    for p in procs:
        p.wait(timeout=120)
    with tidelog.open(path) as log:
        c = log.consumer("single")
        start = time.perf_counter()
        n = 0
        for p in range(8):
            while True:
                msgs = c.fetch("t", p, max_messages=1000)
                if not msgs:
                    break
                c.commit(msgs[-1])
                n += len(msgs)
        single = time.perf_counter() - start
    return records / group, n / single


def rebalance_times(tmp: str) -> tuple[float, float]:
    path = os.path.join(tmp, "rb.db")
    with tidelog.open(path) as log:
        log.create_topic("t", partitions=8)
    stop = threading.Event()
    members = []

    def run(c: tidelog.GroupConsumer) -> None:
        while not stop.is_set() and not c._stop.is_set():
            c.poll(timeout=0.05)

    log = tidelog.open(path)
    for i in range(3):
        c = log.consumer("rb", topics=["t"], session_timeout=2, heartbeat_interval=0.1, member_id=f"m{i}")
        members.append(c)
        threading.Thread(target=run, args=(c,), daemon=True).start()
    time.sleep(1)
    start = time.perf_counter()
    newcomer = log.consumer("rb", topics=["t"], session_timeout=2, heartbeat_interval=0.1, member_id="new")
    threading.Thread(target=run, args=(newcomer,), daemon=True).start()
    while len(newcomer.assignment()) < 2:
        time.sleep(0.005)
    join = time.perf_counter() - start
    time.sleep(0.5)
    # A member "dies": its heartbeats and polls stop, it never leaves.
    victim = members[0]
    held = set(victim.assignment())
    victim._stop.set()  # ends its heartbeat thread and its poll loop
    died = time.perf_counter()
    others = [newcomer, *members[1:]]
    while not held <= {tp for c in others for tp in c.assignment()}:
        time.sleep(0.005)
    death = time.perf_counter() - died
    stop.set()
    time.sleep(0.2)
    for c in others:
        c.close()
    log.close()
    return join, death


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tidelog-gbench-") as tmp:
        join, death = rebalance_times(tmp)
        group, single = throughput(tmp, args.records)
    print("| stream group | figure |")
    print("| --- | ---: |")
    print(f"| rebalance after a join (heartbeat 0.1 s) | {join * 1000:.0f} ms |")
    print(f"| rebalance after a member dies (session 2 s, heartbeat 0.1 s) | {death * 1000:.0f} ms |")
    print(f"| 4 member processes, 8 partitions, commit per poll | {group:,.0f} records/s |")
    print(f"| one manual consumer, same records (ceiling of one reader) | {single:,.0f} records/s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
