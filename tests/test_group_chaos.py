"""Chaos: stream group members in real processes, killed and replaced at random."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tidelog

pytestmark = pytest.mark.slow

SESSION = 1.5
HEARTBEAT = 0.3

CONSUMER = textwrap.dedent(
    f"""
    import os, sys, time, tidelog
    url, name, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    log = tidelog.open(url)

    def say(*words):
        # One write a line: print() writes its parts apart, and the heartbeat
        # thread's on_assign / on_revoke may print beside the main loop.
        line = " ".join([f"{{time.time():.6f}}", name, *map(str, words)]) + "\\n"
        sys.stdout.write(line)
        sys.stdout.flush()

    consumer = None

    def assigned(tps):
        for t, p in tps:
            say("acquire", p)

    def revoked(tps):
        consumer.commit()
        for t, p in tps:
            say("release", p)

    consumer = log.consumer("chaos", topics=["work"], session_timeout={SESSION}, heartbeat_interval={HEARTBEAT},
                            assignor="sticky", member_id=name, on_assign=assigned, on_revoke=revoked)
    while not os.path.exists(stop):
        for msg in consumer.poll(timeout=0.2, max_messages=20):
            say("proc", msg.partition, msg.offset)
        try:
            consumer.commit()
        except tidelog.GroupError:
            pass  # lost a partition in the meantime: its records will be processed again
    consumer.close()
    say("closed")
    """
)


def spawn(url: str, name: str, stop: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CONSUMER, url, name, stop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "chaos.db")
        return
    from pgschema import postgres_schema

    with postgres_schema() as pg_url:
        yield pg_url


def test_chaos_members_killed_and_replaced(tmp_path, url):
    stop = str(tmp_path / "stop")
    rng = random.Random(11)
    with tidelog.open(url) as log:
        log.create_topic("work", partitions=8)
    # Sample committed offsets from outside while the chaos runs.
    samples: list[dict] = []
    sampling = threading.Event()

    def sample() -> None:
        with tidelog.open(url) as log:
            while not sampling.is_set():
                samples.append({(o.topic, o.partition): o.committed for o in log.group_offsets("chaos")})
                time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    producer_done = threading.Event()

    def produce() -> None:
        with tidelog.open(url) as log:
            producer = log.producer()
            for i in range(800):
                producer.send("work", {"n": i}, partition=i % 8)
                time.sleep(0.008)
        producer_done.set()

    threading.Thread(target=produce).start()
    procs: dict[str, subprocess.Popen] = {f"c{i}": spawn(url, f"c{i}", stop) for i in range(4)}
    outputs: dict[str, str] = {}
    kills: dict[str, float] = {}
    serial = 4
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(1.0, 1.8))
        name = rng.choice(sorted(procs))
        victim = procs.pop(name)
        os.kill(victim.pid, signal.SIGKILL)
        kills[name] = time.time()
        outputs[name] = victim.communicate(timeout=30)[0]
        procs[f"c{serial}"] = spawn(url, f"c{serial}", stop)
        serial += 1
    producer_done.wait(60)
    time.sleep(SESSION + HEARTBEAT + 1.5)  # let the last victim's partitions find a new owner
    # Let the survivors catch up, then stop them cleanly.
    with tidelog.open(url) as log:
        end = time.monotonic() + 60
        while time.monotonic() < end and any(x.lag for x in log.describe_group("chaos", ["work"])):
            time.sleep(0.2)
    open(stop, "w").close()
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outputs[name] = out
    sampling.set()
    sampler.join()

    events = [line.split() for out in outputs.values() for line in out.splitlines() if line.strip()]
    # 1. every produced record was processed at least once
    processed = {(int(e[3]), int(e[4])) for e in events if e[2] == "proc"}
    assert processed == {(p, o) for p in range(8) for o in range(1, 101)}
    # 2. committed offsets never went backwards
    for before, after in zip(samples, samples[1:]):
        for tp, committed in before.items():
            assert after.get(tp, 0) >= committed, (tp, committed, after.get(tp))
    # 3. no two live members held one partition at the same moment
    holds: dict[int, list[tuple[float, float, str]]] = {}
    open_holds: dict[tuple[str, int], float] = {}
    for e in sorted(events, key=lambda e: float(e[0])):
        at, name, kind = float(e[0]), e[1], e[2]
        if kind == "acquire":
            open_holds[(name, int(e[3]))] = at
        elif kind == "release":
            start = open_holds.pop((name, int(e[3])))
            holds.setdefault(int(e[3]), []).append((start, at, name))
    for (name, partition), start in open_holds.items():
        end = kills.get(name, time.time())
        holds.setdefault(partition, []).append((start, end, name))
    for partition, spans in holds.items():
        spans.sort()
        for (_, e1, n1), (s2, _, n2) in zip(spans, spans[1:]):
            assert s2 >= e1, f"partition {partition}: {n1} held it until {e1}, {n2} from {s2}"
    # 4. a killed member's partitions were owned again within session + heartbeat (+ scheduling slack)
    for name, killed_at in kills.items():
        orphaned = [p for (n, p), _ in open_holds.items() if n == name]
        for partition in orphaned:
            later = [s for s, _, n in holds[partition] if n != name and s >= killed_at]
            assert later, (
                f"partition {partition} of {name} (killed {killed_at}) was never taken over: {holds[partition]}"
            )
            assert min(later) - killed_at <= SESSION + HEARTBEAT + 3.0
    assert len(kills) >= 4
