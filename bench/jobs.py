"""Job runner benchmark: tidelog.Jobs beside huey and goqite, in one run, and
the periodic scheduler's cost at 1,000 schedules. Prints figures, never
passes or fails.

Runners (each on a fresh SQLite file, WAL, N no-op jobs enqueued first, then
timed from the runner's start until all N ran; 4 at once):

- tidelog: `tidelog.Jobs(concurrency=4)` in a child process, keeping each
  job's status and result (a start and a finish record beside the ack), and
  once more with the queue group alone (`receive(4)`, `ack_many`) as the
  floor under it.
- huey: `SqliteHuey`, its consumer with 4 worker threads (`huey_consumer
  -w 4 -k thread`, polling every 1 ms), results off, timed until its queue
  is empty. Needs `pip install huey` (the bench extra).
- goqite: its own jobs bench, `gqbench` figure (d), when built by
  /work/shared/tools/build-peers.sh into ~/.cache/tidelog-peers (its Limit 4,
  PollInterval 1 ms). Its CPU counts the prefill of its N jobs too (the
  figure's process does both).

CPU a job is the user + system time of the runner's process over the timed
part (from /proc, so other load on a shared machine does not count), in µs.

Scheduler: 1,000 schedules on a test clock (no sleeping) over SQLite: one
round where all 1,000 fall due at once, the rounds of an hour where they are
spread over the minutes (~17 a round), and a round with nothing due; beside
the same ticks written as plain `jobs.enqueue(dedup_id=...)` calls (the
floor: a tick is one such write plus its marker).

    python bench/jobs.py [--jobs 5000] [--rounds 2] [--only runners|scheduler] [--pg URL]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import tidelog
from pgschema import postgres_schema

PEERS = Path(os.environ.get("PEERS", Path.home() / ".cache" / "tidelog-peers"))
TICK_S = os.sysconf("SC_CLK_TCK")

TIDELOG_RUNNER = textwrap.dedent(
    """
    import sys, threading, time, tidelog
    path, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    log = tidelog.open(path)
    jobs = tidelog.Jobs(log, queue="bench", concurrency=4)
    done = 0
    lock = threading.Lock()

    @jobs.job("noop")
    def noop(_):
        global done
        with lock:
            done += 1
            if done == n:
                jobs.stop()

    jobs.queue.send_batch([{"job": "noop", "payload": None}] * n)
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    if mode == "runner":
        jobs.run(poll=0.05, install_signals=False)
    else:  # the queue group alone: what the runner adds its work to
        while done < n:
            got = jobs.queue.receive(max_messages=4, wait=0.05)
            for d in got:
                noop(d.data["payload"])
            jobs.queue.ack_many(got)
    print(time.perf_counter() - start, flush=True)
    """
)

HUEY_APP = textwrap.dedent(
    """
    import os
    from huey import SqliteHuey

    huey = SqliteHuey(filename=os.environ["HUEY_DB"], results=False)

    @huey.task()
    def noop():
        pass
    """
)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def tidelog_runner(tmp: Path, n: int, mode: str) -> tuple[float, float]:
    path = tmp / f"tidelog-{mode}-{time.perf_counter_ns()}.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", TIDELOG_RUNNER, str(path), str(n), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    before = cpu_s(proc.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    elapsed = float(proc.stdout.readline())
    after = cpu_s(proc.pid)
    proc.wait(60)
    return n / elapsed, (after - before) / n * 1e6


def huey_runner(tmp: Path, n: int) -> tuple[float, float] | None:
    try:
        import huey  # noqa: F401
    except ImportError:
        return None
    consumer = shutil.which("huey_consumer") or str(Path(sys.executable).with_name("huey_consumer"))
    app_dir = tmp / f"huey-{time.perf_counter_ns()}"
    app_dir.mkdir()
    (app_dir / "hueyapp.py").write_text(HUEY_APP)
    env = {**os.environ, "HUEY_DB": str(app_dir / "huey.db"), "PYTHONPATH": str(app_dir)}
    sys.path.insert(0, str(app_dir))
    try:
        os.environ["HUEY_DB"] = env["HUEY_DB"]
        import importlib

        import hueyapp  # type: ignore[import-not-found]

        hueyapp = importlib.reload(hueyapp)
        for _ in range(n):
            hueyapp.noop()
        assert hueyapp.huey.pending_count() == n
        proc = subprocess.Popen(
            [consumer, "hueyapp.huey", "-w", "4", "-k", "thread", "-d", "0.001", "-m", "0.001", "-q"],
            cwd=app_dir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        start = time.perf_counter()
        before = cpu_s(proc.pid)
        while hueyapp.huey.pending_count():
            time.sleep(0.002)
        elapsed = time.perf_counter() - start
        after = cpu_s(proc.pid)
        proc.terminate()
        proc.wait(30)
        return n / elapsed, (after - before) / n * 1e6
    finally:
        sys.path.remove(str(app_dir))
        sys.modules.pop("hueyapp", None)


def goqite_runner(tmp: Path, n: int) -> tuple[float, float] | None:
    binary = PEERS / "gqbench"
    if binary.is_dir():  # the Go module's directory, its program inside
        binary = binary / "gqbench"
    if not binary.is_file():
        return None
    proc = subprocess.Popen([str(binary), "-n", str(n), "-dir", str(tmp)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    rate = None
    before = 0.0
    for line in proc.stdout:
        if line.startswith("(c)"):
            before = cpu_s(proc.pid)  # figures (a)-(c) are done: (d) starts now
        if line.startswith("(d)"):
            rate = float(line.split()[-2])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if rate is None:
        return None
    return rate, (usage.ru_utime + usage.ru_stime - before) / n * 1e6


def runners(n: int, rounds: int) -> None:
    print(f"\nJob runners: {n} no-op jobs, 4 at once, SQLite (WAL), best of {rounds}")
    print(f"load average before: {load()}")
    best: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for r in range(rounds):
            order = ["tidelog", "queue", "huey", "goqite"]
            if r % 2:
                order.reverse()
            for name in order:
                if name == "tidelog":
                    got: tuple[float, float] | None = tidelog_runner(tmp, n, "runner")
                elif name == "queue":
                    got = tidelog_runner(tmp, n, "queue")
                elif name == "huey":
                    got = huey_runner(tmp, n)
                else:
                    got = goqite_runner(tmp, n)
                if got is not None and (name not in best or got[0] > best[name][0]):
                    best[name] = got
    labels = {
        "tidelog": "tidelog.Jobs (status and result kept)",
        "queue": "tidelog queue group alone (receive 4, ack_many)",
        "huey": "huey SqliteHuey, consumer -w 4 -k thread",
        "goqite": "goqite jobs.Runner (gqbench d; CPU incl. its prefill)",
    }
    print(f"{'runner':<56} {'jobs/s':>9} {'CPU µs/job':>11}")
    for name, label in labels.items():
        if name in best:
            rate, cpu = best[name]
            print(f"{label:<56} {rate:>9.0f} {cpu:>11.0f}")
        else:
            why = "pip install huey" if name == "huey" else f"not built ({PEERS / 'gqbench'})"
            print(f"{label:<56} {'-':>9} {'-':>11}  ({why})")
    print(f"load average after: {load()}")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000  # a whole hour

    def __call__(self) -> int:
        return self.now


def scheduler(count: int = 1000, pg: str | None = None) -> None:
    if pg is None:
        with tempfile.TemporaryDirectory() as d:
            _scheduler(count, "SQLite", lambda name: os.path.join(d, f"{name}.db"))
        return
    with postgres_schema(pg, "bench_jobs") as url:
        if url is None:
            print(f"\nPeriodic scheduler on PostgreSQL: no server at {pg}")
            return
        # One schema, a queue a part (they would share one log's tables).
        _scheduler(count, "PostgreSQL", lambda name: url, queues=True)


def _scheduler(count: int, store: str, url_of: Any, queues: bool = False) -> None:
    print(f"\nPeriodic scheduler: {count} schedules, {store}, on a test clock")
    print(f"load average before: {load()}")
    # All due at once: every schedule "0 * * * *", one round at the hour.
    clock = Clock()
    with tidelog.open(url_of("all"), clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="cron-all" if queues else "cron")
        for i in range(count):
            jobs.periodic("0 * * * *", name=f"s{i}")(lambda tick: None)
        jobs.tick()
        clock.now += 3_600_000
        cpu = time.process_time()
        wall = time.perf_counter()
        ticks = jobs.tick()
        all_cpu, all_wall = time.process_time() - cpu, time.perf_counter() - wall
        assert len(ticks) == count
        cpu = time.process_time()
        for _ in range(100):
            assert jobs.tick() == []
        idle = (time.process_time() - cpu) / 100
    # Spread: schedule i at minute i % 60; the rounds of one hour, a minute apart.
    clock = Clock()
    with tidelog.open(url_of("spread"), clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="cron-spread" if queues else "cron")
        for i in range(count):
            jobs.periodic(f"{i % 60} * * * *", name=f"s{i}")(lambda tick: None)
        jobs.tick()
        spent, enqueued = 0.0, 0
        for _ in range(60):
            clock.now += 60_000
            cpu = time.process_time()
            enqueued += len(jobs.tick())
            spent += time.process_time() - cpu
        assert enqueued == count
    # The floor: the same number of writes as plain enqueues with a dedup id.
    with tidelog.open(url_of("floor")) as log:
        jobs = tidelog.Jobs(log, queue="cron-floor" if queues else "cron")
        cpu = time.process_time()
        for i in range(count):
            jobs.enqueue(f"s{i}", {"tick": 0}, dedup_id=f"tick:s{i}:0")
        floor = time.process_time() - cpu
    print(f"{'':<58} {'CPU ms':>9} {'µs a tick':>10}")
    print(
        f"{'one round, all ' + str(count) + ' due (wall ' + f'{all_wall * 1000:.0f} ms)':<58} "
        f"{all_cpu * 1000:>9.1f} {all_cpu / count * 1e6:>10.0f}"
    )
    print(
        f"{'a round of an hour, ~' + str(count // 60) + ' due (average of 60)':<58} "
        f"{spent / 60 * 1000:>9.1f} {spent / count * 1e6:>10.0f}"
    )
    print(f"{'a round with nothing due':<58} {idle * 1000:>9.3f} {'-':>10}")
    print(
        f"{'floor: ' + str(count) + ' jobs.enqueue(dedup_id=...)':<58} {floor * 1000:>9.1f} {floor / count * 1e6:>10.0f}"
    )
    print(f"load average after: {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=["runners", "scheduler"])
    parser.add_argument("--pg", help="also the scheduler on PostgreSQL at this URL (a fresh schema)")
    args = parser.parse_args()
    print(f"tidelog {tidelog.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if args.only != "scheduler":
        runners(args.jobs, args.rounds)
    if args.only != "runners":
        scheduler()
        if args.pg:
            scheduler(pg=args.pg)


if __name__ == "__main__":
    main()
