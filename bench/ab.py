"""A/B of the core's hot loops: this tree against another checkout's `src`, alternating.

    python bench/ab.py --before SRC [--after src] [--rounds 3] [--peers]

Each loop runs in its own interpreter importing tidelog from one tree (PYTHONPATH=SRC),
on a fresh SQLite file, the two trees in turn (ABBA...), best of `--rounds`:

- single send: `producer.send` of one 100-byte record, autocommit (3,000);
- fetch + commit: 20,000 records read 500 a fetch, a commit after each;
- queue loop: send, receive, ack one at a time (3,000), the loop goqite's bench runs;
- job runner: 2,000 no-op jobs enqueued, then run 4 at once until all are done.

Beside them, in the same run: raw sqlite3 doing the queue loop's three commits (the
floor), and goqite's own Go bench when built (`../shared/tools/build-peers.sh`).
Prints one table of rates and after/before ratios, the load before and after, and
flags a ratio under 0.85 (three rounds on this machine move by about a tenth).
`--peers` runs `bench/peers.py --before SRC` after it (the served paths).

Reading it: run it when a change touches `store/`, `queues.py`, `log.py` or `server/`;
a flagged ratio is a regression until a rerun on a quiet machine says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# One loop, run in a child interpreter: prints {"rate": records a second}.
LOOP = r"""
import os, sys, tempfile, threading, time
import tidelog

V = b"x" * 100
name = sys.argv[1]
log = tidelog.open(os.path.join(tempfile.mkdtemp(prefix="tidelog-ab-"), "ab.db"))


def single():
    p = log.producer(); n = 3000
    t = time.perf_counter()
    for _ in range(n):
        p.send("s", V)
    return n / (time.perf_counter() - t)


def fetch_commit():
    p = log.producer(); n = 20000
    for _ in range(0, n, 1000):
        p.send_batch("f", [V] * 1000)
    c = log.consumer("g"); got = 0
    t = time.perf_counter()
    while got < n:
        msgs = c.fetch("f", 0, max_messages=500)
        if not msgs:
            break
        got += len(msgs); c.commit(msgs[-1])
    return got / (time.perf_counter() - t)


def queue_loop():
    q = log.queue("q"); p = log.producer(); n = 3000
    t = time.perf_counter()
    for _ in range(n):
        p.send("q", V); q.ack(q.receive()[0])
    return n / (time.perf_counter() - t)


def job_runner():
    n = 2000
    jobs = tidelog.Jobs(log, "jobs", concurrency=4)
    done = []
    lock = threading.Lock()

    @jobs.job("noop")
    def noop(payload):
        with lock:
            done.append(payload)
            if len(done) == n:
                jobs.stop()

    for i in range(n):
        jobs.enqueue("noop", i)
    t = time.perf_counter()
    jobs.run(poll=0.05, install_signals=False)
    return len(done) / (time.perf_counter() - t)


rate = {"single send": single, "fetch + commit": fetch_commit, "queue loop": queue_loop,
        "job runner": job_runner}[name]()
log.close()
print('{"rate": %f}' % rate)
"""

# The floor of the queue loop: bench/queues.py's raw sqlite3 loop, the same three commits a record.
RAW = r"""
import os, sys, tempfile
sys.path.insert(0, sys.argv[1])
from queues import raw_loop
print('{"rate": %f}' % raw_loop(os.path.join(tempfile.mkdtemp(prefix="tidelog-ab-"), "raw.db"), 3000))
"""

LOOPS = ("single send", "fetch + commit", "queue loop", "job runner")


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def child(code: str, src: str | None, *args: str) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )
    if done.returncode != 0:
        raise SystemExit(f"{args} from {src} failed:\n{done.stderr.strip()[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["rate"])


def goqite() -> float | None:
    """goqite's own bench, if built: its first figure, (a) send + receive + delete one at a
    time on SQLite, messages/s."""
    binary = Path.home() / ".cache" / "tidelog-peers" / "gqbench" / "gqbench"
    if not binary.exists():
        return None
    done = subprocess.run(
        [str(binary), "-body", "100", "-n", "3000"], capture_output=True, text=True, timeout=300
    )
    found = re.findall(r"([\d.]+)\s*(?:msgs?|messages)/s", done.stdout + done.stderr)
    return float(found[0]) if found else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the other checkout's src directory")
    ap.add_argument("--after", default=str(HERE.parent / "src"), help="this tree's src (default)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", action="store_true", help="then bench/peers.py --before SRC")
    args = ap.parse_args(argv)
    start_load = load()
    best: dict[tuple[str, str], float] = {}
    for i in range(args.rounds):
        sides = [("before", args.before), ("after", args.after)]
        for side, src in sides if i % 2 == 0 else sides[::-1]:
            for name in LOOPS:
                rate = child(LOOP, src, name)
                best[(side, name)] = max(best.get((side, name), 0.0), rate)
        best[("raw", "queue loop")] = max(best.get(("raw", "queue loop"), 0.0), child(RAW, None, str(HERE)))
    peer = goqite()
    end_load = load()
    print(f"core loops, after ({args.after}) / before ({args.before}), best of {args.rounds}, alternating;")
    print(f"load {start_load:.2f} before, {end_load:.2f} after; a flag marks a ratio under 0.85")
    print()
    print("| loop | before (/s) | after (/s) | after / before |")
    print("| --- | ---: | ---: | ---: |")
    for name in LOOPS:
        b, a = best[("before", name)], best[("after", name)]
        flag = " **slower**" if a / b < 0.85 else ""
        print(f"| {name} | {b:,.0f} | {a:,.0f} | {a / b:.2f}{flag} |")
    raw = best[("raw", "queue loop")]
    after_loop = best[("after", "queue loop")]
    print()
    print(
        f"queue loop beside its floor: raw sqlite3 {raw:,.0f}/s, after {after_loop / raw:.2f} of it", end=""
    )
    print(f"; goqite's bench {peer:,.0f}/s, after {after_loop / peer:.2f}x" if peer else "; goqite not built")
    if args.peers:
        print(flush=True)
        peers = [sys.executable, str(HERE / "peers.py"), "--before", args.before]
        if shutil.which("h2load") is None:
            print("(--peers: h2load is not installed: apt-get install nghttp2-client)")
            return 0
        return subprocess.call(peers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
