"""The push worker as a real process (`python -m tidelog.cli worker`), killed and stopped.

One scenario, run for each engine: SIGKILL the worker and every process
it started while a POST is in flight, restart it, and send SIGTERM while the POST that
completes the delivery is in flight. The restarted worker must begin each
partition right after the group's committed offset at the kill; the
SIGTERM must let that last POST finish, commit it, and exit 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tidelog
from endpoint import Endpoint, check_deliveries

TOPIC = "orders"
GROUP = "pusher"


def write_config(path: Path, endpoint: str, engine: str, work_dir: Path, batch_size: int) -> Path:
    path.write_text(
        f'engine = "{engine}"\n'
        f'work_dir = "{work_dir}"\n'
        "[spark]\n"
        'master = "local[2]"\n'
        'conf = { "spark.driver.memory" = "1g", "spark.sql.shuffle.partitions" = "2" }\n'
        f"[topics.{TOPIC}.groups.{GROUP}]\n"
        f'endpoint = "{endpoint}"\n'
        f"batch_size = {batch_size}\n"
        'interval = "200ms"\n'
        'timeout = "30s"\n'
        'headers = { Authorization = "Bearer test-token" }\n'
    )
    return path


def start(db: str, config: Path, log_path: Path) -> subprocess.Popen:
    with open(log_path, "a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tidelog.cli", "worker", "--config", str(config), "--db", db],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a SIGKILL reaches Spark's JVM too
        )


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    return tree


def kill_all(proc: subprocess.Popen) -> None:
    """SIGKILL the worker and everything it started, as a dying container would.

    Its process group is not enough for Spark: PySpark's Python worker
    daemon moves its workers to a group of their own, and they would go on
    posting (and committing) for a moment after the JVM is gone.
    """
    tree = process_tree(proc.pid)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") and not _zombie(p) for p in tree):
        time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def committed(db: str, partitions: int) -> dict[int, int]:
    with tidelog.open(db) as log:
        consumer = log.consumer(GROUP)
        return {p: consumer.committed(TOPIC, p) for p in range(partitions)}


def wait(endpoint: Endpoint, predicate: Any, timeout_s: float, log_path: Path) -> None:
    try:
        endpoint.wait_for(predicate, timeout_s)
    except TimeoutError as e:
        got = [(r.number, r.action, r.partition, r.offsets[0], r.offsets[-1]) for r in endpoint.snapshot()]
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-60:])
        raise AssertionError(f"{e}\nreceived: {got}\nworker log:\n{tail}") from None


def json_events(log_path: Path) -> list[dict]:
    out = []
    for line in log_path.read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def kill_restart_terminate(engine: str, tmp_path: Path, timeout_s: float) -> None:
    db = str(tmp_path / "worker.db")
    partitions, per_partition, batch_size = 3, 120, 20
    with tidelog.open(db) as log:
        log.create_topic(TOPIC, partitions=partitions)
        producer = log.producer()
        for p in range(partitions):
            producer.send_batch(TOPIC, [{"p": p, "i": i} for i in range(per_partition)], partition=p)
    expected = {p: per_partition for p in range(partitions)}
    phase: dict = {"restarted": None}  # after the restart: (requests before it, committed at the kill)

    def script(number: int, body: dict, received: list) -> str:
        if phase["restarted"] is None:
            return "slow" if number == 4 else "ok"
        # After the restart: hold the POST that completes the delivery.
        before, at_kill = phase["restarted"]
        have = {(p, o) for p, last in at_kill.items() for o in range(1, last + 1)}
        have |= {(r.partition, o) for r in received[before:] if r.accepted for o in r.offsets}
        have |= {(body["partition"], m["offset"]) for m in body["messages"]}
        return "slow" if len(have) == partitions * per_partition else "ok"

    log_path = tmp_path / f"worker-{engine}.log"
    config = write_config(tmp_path / "worker.toml", "", engine, tmp_path / "work", batch_size)
    with Endpoint(script=script, slow_s=3.0, db=db, group=GROUP) as endpoint:
        write_config(config, endpoint.url, engine, tmp_path / "work", batch_size)
        proc = start(db, config, log_path)
        try:
            wait(endpoint, lambda rs: len(rs) >= 4, timeout_s, log_path)  # the 4th POST is in flight
        finally:
            kill_all(proc)
        at_kill = committed(db, partitions)
        killed = endpoint.snapshot()
        in_flight = killed[3]
        assert in_flight.offsets[-1] > at_kill[in_flight.partition], "the POST in flight was committed"

        phase["restarted"] = (len(killed), at_kill)
        proc = start(db, config, log_path)
        try:
            wait(endpoint, lambda rs: any(r.action == "slow" for r in rs[len(killed) :]), timeout_s, log_path)
            os.kill(proc.pid, signal.SIGTERM)  # the worker alone, as a supervisor would
            assert proc.wait(timeout_s) == 0, log_path.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                kill_all(proc)
        received = endpoint.snapshot()

    # Resumed after the last commit: each unfinished partition's first POST after the restart.
    for p in range(partitions):
        after = [r for r in received[len(killed) :] if r.partition == p]
        if at_kill[p] < per_partition:
            assert after[0].offsets[0] == at_kill[p] + 1, (p, after[0].offsets[0], at_kill[p])
        else:
            assert after == [], p
    # The POST cut by the kill is delivered again, whole.
    again = [r for r in received[len(killed) :] if r.partition == in_flight.partition]
    assert again[0].raw == in_flight.raw
    check_deliveries(received, expected)
    # SIGTERM let the last POST finish and committed it: nothing is left over.
    assert committed(db, partitions) == expected
    assert all(r.headers.get("authorization") == "Bearer test-token" for r in received)
    events = json_events(log_path)
    assert {"event": "shutdown requested", "signal": "SIGTERM"}.items() <= next(
        e for e in events if e.get("event") == "shutdown requested"
    ).items()
