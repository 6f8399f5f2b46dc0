"""tidelog.aio as a front: the job runner on an event loop (on a real SQLite
file) and what the asyncio API needs installed. Its semantics are tested in
tests/conformance (test_aio.py, and every test's async variant)."""

from __future__ import annotations

import asyncio
import shutil
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
    "view",  # another log on the same store and threads
}
# A sync generator's twin is an async one: called plainly, walked with `async for`.
ITERATORS = {"iter"}


TWINS = [
    (tidelog.aio.AsyncLog, tidelog.Log),
    (tidelog.aio.AsyncProducer, tidelog.Producer),
    (tidelog.aio.AsyncConsumer, tidelog.Consumer),
    (tidelog.aio.AsyncGroupConsumer, tidelog.GroupConsumer),
    (tidelog.aio.AsyncGroup, tidelog.Group),
    (tidelog.aio.AsyncQueue, tidelog.Queue),
    (tidelog.aio.Jobs, tidelog.Jobs),
]


def test_the_generated_twins_are_current():
    # The twins' plain operations are generated from the sync classes; the
    # generator also refuses a sync method it cannot twin and a hand-written
    # twin whose parameters differ from the sync method's.
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_aio.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("twin", "core"), TWINS, ids=[core.__name__ for _, core in TWINS])
def test_every_public_operation_of_the_sync_api_is_spelled_out_on_its_twin(twin, core):
    import inspect

    # On the class, with no catch-all __getattr__: what mypy and an IDE see is all there is.
    assert not any("__getattr__" in vars(cls) for cls in twin.__mro__), twin.__name__
    for name, _ in inspect.getmembers(core, inspect.isfunction):
        if name.startswith("_"):
            continue
        assert hasattr(twin, name), (core.__name__, name)
        method = inspect.getattr_static(twin, name)
        awaited = name not in NO_IO and name not in ITERATORS
        assert inspect.iscoroutinefunction(method) == awaited, (core.__name__, name)


def _source_copy(tmp_path: Path) -> Path:
    """A copy of src/tidelog and tools/ to change, for the generator to read."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "src" / "tidelog", tmp_path / "src" / "tidelog", ignore=ignore)
    shutil.copytree(ROOT / "tools", tmp_path / "tools", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)  # the ruff settings the generator formats with
    return tmp_path


def _generate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "tools" / "gen_aio.py"), *args], capture_output=True, text=True, cwd=ROOT
    )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_new_sync_operation_gets_its_twin_from_the_generator(tmp_path):
    root = _source_copy(tmp_path)
    queues = root / "src" / "tidelog" / "queues.py"
    _edit(
        queues,
        "    def stats(self) -> QueueStats:",
        "    def waiting(self, limit: int = 10) -> int:\n"
        '        """How many records wait."""\n'
        "        return self.stats().available\n\n"
        "    def stats(self) -> QueueStats:",
    )
    stale = _generate(root, "--check")
    assert stale.returncode == 1 and "out of date" in stale.stderr
    assert _generate(root).returncode == 0
    generated = (root / "src" / "tidelog" / "aio" / "generated.py").read_text()
    assert (
        "    async def waiting(self, limit: int = 10) -> int:\n"
        '        """How many records wait."""\n'
        "        return await self._runtime.call((await self._core()).waiting, limit)\n"
    ) in generated


def test_the_generator_refuses_what_it_cannot_twin_and_a_drifting_hand_written_twin(tmp_path):
    root = _source_copy(tmp_path)
    # A sync method that hands out a sync handle: its twin must hand out an asyncio one.
    _edit(
        root / "src" / "tidelog" / "queues.py",
        "    def stats(self) -> QueueStats:",
        "    def again(self) -> Queue:\n        return self\n\n    def stats(self) -> QueueStats:",
    )
    # A hand-written twin whose parameters are no longer the sync method's.
    _edit(
        root / "src" / "tidelog" / "aio" / "queue.py",
        "self, max_messages: int = 1, wait: float = 0,",
        "self, limit: int = 1, wait: float = 0,",
    )
    before = (root / "src" / "tidelog" / "aio" / "generated.py").read_text()
    done = _generate(root)
    assert done.returncode == 2
    assert "Queue.again takes or returns a sync handle" in done.stderr
    assert "AsyncQueue.receive takes ['limit'" in done.stderr
    assert (root / "src" / "tidelog" / "aio" / "generated.py").read_text() == before  # nothing written


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


@pytest.mark.anyio
async def test_a_view_is_an_async_log_on_the_same_store_and_threads(tmp_path):
    async with tidelog.aio.open(str(tmp_path / "view.db")) as log:
        strict = log.view(auto_create=False, default_partitions=3)  # no I/O: not awaited
        assert isinstance(strict, tidelog.aio.AsyncLog) and strict.loop is log.loop
        assert (strict.auto_create, strict.default_partitions) == (False, 3)
        assert (log.auto_create, log.default_partitions) == (True, 1)
        with pytest.raises(tidelog.UnknownTopic):
            await strict.producer().send("missing", b"x")
        await log.producer().send("made", b"x")
        assert [m.value for m in await strict.read("made", 0)] == [b"x"]
        assert [t.name for t in await strict.topics()] == ["made"]
