"""tidelog.aio as a front: the job runner on an event loop (on a real SQLite
file) and what the asyncio API needs installed. Its semantics are tested in
tests/conformance (test_aio.py, and every test's async variant)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest

import tidelog
import tidelog.aio

ROOT = Path(__file__).parents[1]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_asyncio_api_needs_nothing_beyond_the_core():
    # Imported in a fresh interpreter: no server, client or web framework comes with it.
    code = (
        "import sys, tidelog.aio; "
        "print(sorted(m for m in ('starlette', 'granian', 'httpx', 'fastapi', 'anyio', 'psycopg') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert out.stdout.strip() == "[]"


def test_fastapi_is_for_the_example_only():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    with_fastapi = {name for name, reqs in extras.items() if any(r.startswith("fastapi") for r in reqs)}
    assert with_fastapi == {"dev"}


@pytest.mark.anyio
async def test_async_handlers_run_on_the_loop_and_sync_ones_in_threads(tmp_path):
    async with tidelog.aio.open(str(tmp_path / "jobs.db")) as log:
        jobs = tidelog.aio.Jobs(log, queue="jobs", concurrency=8)
        loop_thread = threading.current_thread()
        ran: dict[str, list] = {"async": [], "sync": []}
        both = asyncio.Event()

        @jobs.job("on_loop")
        async def on_loop(payload):
            ran["async"].append((payload, threading.current_thread() is loop_thread))
            await asyncio.sleep(0)
            if len(ran["async"]) == 3 and ran["sync"]:
                both.set()

        @jobs.job("in_thread")
        def in_thread(payload):
            ran["sync"].append((payload, threading.current_thread().name))
            log.loop.call_soon_threadsafe(lambda: both.set() if len(ran["async"]) == 3 else None)

        for n in range(3):
            await jobs.enqueue("on_loop", n)
        await jobs.enqueue("in_thread", {"n": 9})
        runner = asyncio.create_task(jobs.run(poll=5))
        await asyncio.wait_for(both.wait(), 20)
        jobs.stop()
        await asyncio.wait_for(runner, 20)
        assert sorted(ran["async"]) == [(0, True), (1, True), (2, True)]
        ((payload, thread_name),) = ran["sync"]
        assert payload == {"n": 9} and thread_name.startswith("tidelog-job")
        stats = await jobs.queue.stats()
        assert (stats.available, stats.in_flight, stats.dead_lettered) == (0, 0, 0)


@pytest.mark.anyio
async def test_cancelling_run_finishes_running_jobs_then_cancels(tmp_path):
    async with tidelog.aio.open(str(tmp_path / "jobs.db")) as log:
        jobs = tidelog.aio.Jobs(log, queue="jobs", concurrency=2)
        started, release = asyncio.Event(), asyncio.Event()
        finished = []

        @jobs.job("slow")
        async def slow(payload):
            started.set()
            await release.wait()
            finished.append(payload)

        await jobs.enqueue("slow", "a")
        runner = asyncio.create_task(jobs.run(poll=30))
        await asyncio.wait_for(started.wait(), 20)
        runner.cancel()  # as a server's shutdown does
        await asyncio.sleep(0)
        assert not runner.done()  # it waits for the running job
        await jobs.enqueue("slow", "b")  # not taken: the runner stopped taking work
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(runner, 20)
        assert finished == ["a"]
        stats = await jobs.queue.stats()
        assert (stats.available, stats.in_flight) == (1, 0)  # "a" acked, "b" waits, nothing leased


@pytest.mark.anyio
async def test_failures_retry_then_dead_letter_as_the_sync_runner(tmp_path):
    async with tidelog.aio.open(str(tmp_path / "jobs.db")) as log:
        jobs = tidelog.aio.Jobs(log, queue="jobs", max_deliveries=2, backoff=0)
        attempts = []

        @jobs.job("broken")
        async def broken(payload):
            attempts.append(payload)
            if len(attempts) == 2:
                jobs.stop()  # the runner settles this last failure, then returns
            raise ValueError("always fails")

        await jobs.enqueue("broken", 7)
        await jobs.enqueue("nobody", 8)  # no handler: dead-lettered at once
        await asyncio.wait_for(jobs.run(poll=5), 20)
        assert attempts == [7, 7]
        dead = await log.read("jobs.dlq", 0)
        reasons = sorted(dict(m.headers)["tidelog-reason"] for m in dead)
        assert reasons == [b"failed: ValueError: always fails", b"unknown job 'nobody'"]
        # The sync runner's backoff: backoff * 2^(n-1), capped.
        paced = tidelog.aio.Jobs(log, backoff=0.5, max_backoff=3)
        assert [paced.retry_delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]


@pytest.mark.anyio
async def test_stop_from_another_thread_and_bad_options(tmp_path):
    async with tidelog.aio.open(str(tmp_path / "jobs.db")) as log:
        with pytest.raises(tidelog.InvalidRequest, match="concurrency"):
            tidelog.aio.Jobs(log, concurrency=0)
        jobs = tidelog.aio.Jobs(log)
        runner = asyncio.create_task(jobs.run(poll=30))
        await asyncio.sleep(0)
        await asyncio.to_thread(jobs.stop)
        await asyncio.wait_for(runner, 20)  # returns, not cancelled
        assert runner.exception() is None


# What the sync API does without I/O stays a plain call in the asyncio API.
NO_IO = {
    "producer",
    "consumer",
    "group",
    "queue",
    "listen",
    "assignment",
    "revoking",
    "job",
    "periodic",  # registers a schedule, as job does
    "stop",
    "on",  # the same runner on another log: builds a handle, no I/O
    "retry_delay",
    "transaction",  # the outbox runs on the application's own (sync) connection
}
# A sync generator's twin is an async one: called plainly, walked with `async for`.
ITERATORS = {"iter"}


@pytest.mark.anyio
async def test_every_public_operation_of_the_sync_api_has_an_async_twin(tmp_path):
    import inspect

    async with tidelog.aio.open(str(tmp_path / "twins.db")) as log:
        pairs = [
            (log, tidelog.Log),
            (log.producer(), tidelog.Producer),
            (log.consumer("g"), tidelog.Consumer),
            (log.consumer("g", topics=["t"]), tidelog.GroupConsumer),
            (log.group("g"), tidelog.Group),
            (log.queue("t"), tidelog.Queue),
            (tidelog.aio.Jobs(log), tidelog.Jobs),
        ]
        for twin, core in pairs:
            for name, member in inspect.getmembers(core, inspect.isfunction):
                if name.startswith("_"):
                    continue
                method = getattr(twin, name)  # spelled out, or offered by Twin for a newer core method
                awaited = name not in NO_IO and name not in ITERATORS
                assert inspect.iscoroutinefunction(method) == awaited, (core.__name__, name)
                if name not in NO_IO and name in vars(type(twin)):  # spelled out: same arguments
                    ours = list(inspect.signature(method).parameters)
                    theirs = list(inspect.signature(member).parameters)[1:]
                    assert ours == theirs, (core.__name__, name, ours, theirs)


def test_an_open_sync_log_can_be_wrapped_inside_a_loop_only(tmp_path):
    sync = tidelog.open(str(tmp_path / "wrapped.db"))
    with pytest.raises(tidelog.WrongEventLoop, match="running event loop"):
        tidelog.aio.AsyncLog(sync)

    async def use() -> list[bytes]:
        log = tidelog.aio.AsyncLog(sync)
        await log.producer().send("t", b"x")
        msgs = await log.read("t", 0)
        await log.close()  # closes the sync log too
        return [m.value for m in msgs]

    assert asyncio.run(use()) == [b"x"]
