"""The job runner, run in real processes on a real SQLite file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tidelog

pytestmark = pytest.mark.slow

# A jobs module as a user would write it; the runner process imports it.
JOBS_MODULE = textwrap.dedent(
    """
    import asyncio, json, os, time, tidelog

    log = tidelog.open(os.environ["JOBS_DB"])
    jobs = tidelog.Jobs(log, queue="jobs", concurrency=3, visibility_timeout=0.6,
                        max_deliveries=3, backoff=0.05)
    done_path = os.environ["JOBS_DONE"]

    def record(kind, payload):
        with open(done_path, "a") as f:
            f.write(json.dumps([kind, payload]) + "\\n")

    @jobs.job("ok")
    def ok(payload):
        time.sleep(payload.get("sleep", 0))
        record("ok", payload)

    @jobs.job("async_ok")
    async def async_ok(payload):
        await asyncio.sleep(0.01)
        record("async_ok", payload)

    @jobs.job("flaky")
    def flaky(payload):
        path = done_path + ".flaky"
        attempts = int(open(path).read()) if os.path.exists(path) else 0
        open(path, "w").write(str(attempts + 1))
        if attempts < 1:
            raise RuntimeError("first try fails")
        record("flaky", payload)

    @jobs.job("broken")
    def broken(payload):
        raise ValueError("always fails")

    if __name__ == "__main__":
        jobs.run(poll=0.1)
    """
)


def read_done(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture
def jobs_env(tmp_path):
    module = tmp_path / "myjobs.py"
    module.write_text(JOBS_MODULE)
    env = dict(os.environ, JOBS_DB=str(tmp_path / "jobs.db"), JOBS_DONE=str(tmp_path / "done.txt"))
    return tmp_path, module, env


def wait_until(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_runner_runs_retries_dead_letters_and_stops_cleanly(jobs_env):
    tmp_path, module, env = jobs_env
    with tidelog.open(env["JOBS_DB"]) as log:
        jobs = tidelog.Jobs(log, queue="jobs", max_deliveries=3)
        for i in range(5):
            jobs.enqueue("ok", {"i": i})
        jobs.enqueue("async_ok", {"i": 99})
        jobs.enqueue("flaky", {"i": 7})
        jobs.enqueue("broken", {"i": 8})
        jobs.enqueue("nobody", {"i": 9})
        jobs.enqueue("ok", {"i": 100, "sleep": 1.5})  # longer than the lease: must not run twice
    proc = subprocess.Popen(
        [sys.executable, str(module)], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        assert wait_until(lambda: len(read_done(env["JOBS_DONE"])) >= 8)
        with tidelog.open(env["JOBS_DB"]) as log:
            assert wait_until(lambda: len(log.read("jobs.dlq", 0)) >= 2 if log.topics() else False)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    done = read_done(env["JOBS_DONE"])
    payloads = sorted(p["i"] for kind, p in done)
    assert payloads == [0, 1, 2, 3, 4, 7, 99, 100]  # each exactly once, the long one too
    assert "first try fails" in err and "Traceback" in err  # failures are logged with tracebacks
    with tidelog.open(env["JOBS_DB"]) as log:
        dead = {json.loads(m.value)["job"]: dict(m.headers) for m in log.read("jobs.dlq", 0)}
        assert set(dead) == {"broken", "nobody"}
        assert dead["broken"]["tidelog-delivery-count"] == b"3"
        assert b"ValueError" in dead["broken"]["tidelog-reason"]
        stats = log.queue("jobs").stats()
        assert (stats.available, stats.in_flight) == (0, 0)


def test_sigterm_lets_running_jobs_finish(jobs_env):
    tmp_path, module, env = jobs_env
    with tidelog.open(env["JOBS_DB"]) as log:
        jobs = tidelog.Jobs(log, queue="jobs")
        jobs.enqueue("ok", {"i": 1, "sleep": 1.0})
    proc = subprocess.Popen(
        [sys.executable, str(module)], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        with tidelog.open(env["JOBS_DB"]) as log:
            assert wait_until(lambda: log.queue("jobs").stats().in_flight == 1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert [p["i"] for _, p in read_done(env["JOBS_DONE"])] == [1]
    with tidelog.open(env["JOBS_DB"]) as log:
        assert log.queue("jobs").stats().in_flight == 0


def test_bad_options():
    with tidelog.open(":memory:") as log:
        with pytest.raises(tidelog.InvalidRequest):
            tidelog.Jobs(log, concurrency=0)
        jobs = tidelog.Jobs(log)
        jobs.job("x")(lambda p: None)
        with pytest.raises(tidelog.InvalidRequest):
            jobs.job("x")(lambda p: None)
        with pytest.raises(tidelog.InvalidName):
            jobs.enqueue("bad name", {})
        assert jobs.retry_delay(1) == 1.0 and jobs.retry_delay(4) == 8.0


def test_heartbeat_after_stop_keeps_its_pace_and_never_extends_a_settled_job(tmp_path, caplog):
    # stop() while a job runs: the heartbeat must go on extending that job's
    # lease at its interval (not in a tight loop), and never extend a lease the
    # job has just acked (which logged a spurious "job lease lost").
    log = tidelog.open(str(tmp_path / "jobs.db"))
    # A lease of 1.2 s, a heartbeat every 0.4 s: one of 0.3 s lapsed once when a loaded
    # machine held the heartbeat thread back 0.3 s (make test, both cores busy).
    jobs = tidelog.Jobs(log, queue="jobs", concurrency=2, visibility_timeout=1.2)
    extends = []
    extend = jobs.queue.extend

    def counting_extend(d, seconds):
        extends.append(d.offset)
        return extend(d, seconds)

    jobs.queue.extend = counting_extend  # the real extend, counted
    started = []

    @jobs.job("slow")
    def slow(payload):
        started.append(payload)
        if payload == "first":
            jobs.stop()
        time.sleep(2.4)  # six heartbeat intervals of 0.4 s

    for i in range(10):
        jobs.enqueue("slow", "first" if i == 0 else f"n{i}")
    with caplog.at_level("WARNING", logger="tidelog"):
        jobs.run(poll=0.05, install_signals=False)
    assert len(started) <= 2  # stopped taking work after the first batch
    assert 1 <= len(extends) <= 20, len(extends)  # a tight loop made thousands
    assert not [
        r for r in caplog.records if "lease lost" in r.getMessage() or "could not settle" in r.getMessage()
    ]
    assert jobs.queue.stats().in_flight == 0
    log.close()
