"""Chaos: receivers of a queue group ordered by key, in real processes,
killed (SIGKILL) and replaced while they work. Each receiver appends what it
completed to a topic before it acks, so the completion log shows the order
each key's records were finished in: it must never go back within a key."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.store_feature("queues"), pytest.mark.slow]

KEYS = 12
RECORDS = 300
VISIBILITY = 1.0
KILLS = 4
DEADLINE_S = 120  # a bound for a hung run, not a timing assertion

RECEIVER = textwrap.dedent(
    f"""
    import json, os, sys, time, tidelog
    url, stop, ordering = sys.argv[1], sys.argv[2], sys.argv[3]
    log = tidelog.open(url)
    q = log.queue("orders", ordering=ordering)
    done = log.producer()
    while not os.path.exists(stop):
        for d in q.receive(max_messages=4, wait=0.2, visibility_timeout={VISIBILITY}):
            time.sleep(0.04)  # the work: a kill finds leases held
            # Completed: say so durably, then ack (a kill in between completes it twice).
            done.send("done", json.dumps([d.key.decode(), d.data["seq"]]).encode())
            q.ack(d)
    log.close()
    """
)


ORDERING = os.environ.get("TIDELOG_CHAOS_ORDERING", "key")  # "none" shows the check can fail


def test_killed_receivers_never_break_per_key_order(store, tmp_path):
    log = store.open()
    try:
        log.create_topic("orders", partitions=3)
        log.create_topic("done", partitions=1)
        q = log.queue("orders", ordering=ORDERING, visibility_timeout=VISIBILITY)
        rng = random.Random(16)
        seqs = {f"k{i}": 0 for i in range(KEYS)}
        for _ in range(RECORDS):
            key = rng.choice(sorted(seqs))
            seqs[key] += 1
            q.send({"seq": seqs[key]}, key=key)
        stop = tmp_path / "stop"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

        def start() -> subprocess.Popen:
            started.append(time.monotonic())
            return subprocess.Popen([sys.executable, "-c", RECEIVER, store.url, str(stop), ORDERING], env=env)

        started: list[float] = []
        receivers = [start() for _ in range(3)]
        kills = 0
        began = time.monotonic()
        try:
            while True:
                s = q.stats()
                if s.available + s.in_flight + s.delayed == 0:
                    break
                assert time.monotonic() - began < DEADLINE_S, f"work did not finish: {s}"
                time.sleep(0.2)
                # Kill one that has been working a while (past its start-up).
                ready = [i for i, r in enumerate(receivers) if time.monotonic() - started[i] > 1.5]
                if kills < KILLS and ready:
                    i = rng.choice(ready)
                    victim = receivers.pop(i)
                    started.pop(i)
                    victim.send_signal(signal.SIGKILL)
                    victim.wait()
                    receivers.append(start())
                    kills += 1
        finally:
            stop.touch()
            for r in receivers:
                try:
                    r.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    r.kill()
                    r.wait()
        completed: dict[str, list[int]] = {}
        for m in log.read("done", 0, after=0, limit=100_000):
            key, seq = json.loads(m.value)
            completed.setdefault(key, []).append(seq)
        assert kills == KILLS
        for key, total in seqs.items():
            order = completed.get(key, [])
            # Never back within a key (a record completed twice repeats in place).
            assert order == sorted(order), f"{key}: {order}"
            assert sorted(set(order)) == list(range(1, total + 1)), f"{key}: {order}"
    finally:
        log.close()
