"""Queue groups across processes: lease exclusivity and a soak with kills."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.store_feature("queues"),
    # The subject is worker processes on the sync API; the parent only sets up and counts.
    pytest.mark.sync_api_only("worker processes use the sync API"),
]

WORKER = textwrap.dedent(
    """
    import sys, time, tidelog
    url, hold = sys.argv[1], float(sys.argv[2])
    log = tidelog.open(url)
    q = log.queue("soak", visibility_timeout=1, max_deliveries=50)
    idle = 0
    while idle < int(sys.argv[3]):
        got = q.receive(max_messages=5, wait=0.2)
        if not got:
            idle += 1
            continue
        idle = 0
        for d in got:
            print("got", d.partition, d.offset, d.delivery_count, flush=True)
            time.sleep(hold)
            q.ack(d)
            print("ack", d.partition, d.offset, flush=True)
    """
)

PRODUCER = textwrap.dedent(
    """
    import sys, tidelog
    log = tidelog.open(sys.argv[1])
    q = log.queue("soak")
    for i in range(int(sys.argv[2])):
        sent = q.send({"n": i}, partition=i % 2)
        print(sent.partition, sent.offset, flush=True)
    """
)


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_processes_never_share_a_lease(store):
    with store.open() as log:
        log.create_topic("soak", partitions=2)
        q = log.queue("soak", visibility_timeout=1, max_deliveries=50)
        for p in (0, 1):
            q.send_batch([{"n": i} for i in range(150)], partition=p)
    workers = [spawn(WORKER, store.url, "0", "3") for _ in range(3)]
    got: list[tuple[int, int]] = []
    for w in workers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        got += [
            (int(p), int(o))
            for kind, p, o, *_ in (line.split() for line in out.splitlines())
            if kind == "got"
        ]
    # Acked within the visibility timeout, so each record went out once.
    assert sorted(got) == [(p, o) for p in (0, 1) for o in range(1, 151)]


def test_soak_with_killed_workers_loses_nothing(store):
    rng = random.Random(7)
    with store.open() as log:
        log.create_topic("soak", partitions=2)
        log.queue("soak", visibility_timeout=1, max_deliveries=50)
    producer = spawn(PRODUCER, store.url, "600")
    workers = [spawn(WORKER, store.url, "0.002", "10") for _ in range(3)]
    outputs: list[str] = []
    kills = 0
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.5, 1.0))
        victim = workers.pop(rng.randrange(len(workers)))
        os.kill(victim.pid, signal.SIGKILL)
        out, _ = victim.communicate(timeout=30)
        outputs.append(out)
        kills += 1
        workers.append(spawn(WORKER, store.url, "0.002", "10"))
    sent_out, err = producer.communicate(timeout=120)
    assert producer.returncode == 0, err
    # Let the survivors drain everything, leases of the killed included.
    for w in workers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        outputs.append(out)
    sent = {tuple(map(int, line.split())) for line in sent_out.splitlines()}
    assert len(sent) == 600
    received = set()
    for out in outputs:
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0] == "got":
                received.add((int(parts[1]), int(parts[2])))
    assert kills >= 5
    with store.open() as log:
        stats = log.queue("soak").stats()
        dead = {
            (int(dict(m.headers)["tidelog-origin-partition"]), int(dict(m.headers)["tidelog-origin-offset"]))
            for m in (
                log.read("soak.dlq", 0, limit=10_000) if "soak.dlq" in {t.name for t in log.topics()} else []
            )
        }
    # Nothing is left in the group, and every record was delivered or dead-lettered.
    assert (stats.available, stats.in_flight, stats.delayed) == (0, 0, 0)
    assert sent <= received | dead
