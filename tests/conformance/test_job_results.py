"""What became of a job, on every store: status, result, failure, cancel,
expiry; and bad input refused with the store unchanged (issue 31).

The runner is `tidelog.Jobs` (sync) here; `tidelog.aio.Jobs` has its own
asyncio-native test at the end. Clocked tests move the conformance clock
instead of sleeping: delays, backoffs and result_ttl expire when told.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import tidelog
import tidelog.aio
from dumps import dump

from .conftest import StoreKind

pytestmark = pytest.mark.store_feature("queues")
sync_only = pytest.mark.sync_api_only("tidelog.Jobs runs on the sync API; tidelog.aio.Jobs is tested below")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def store_file(store: StoreKind, tmp_path: Any) -> str:
    """What `dump` reads for this store: the served file behind an http:// store."""
    return str(tmp_path / "served.db") if store.name == "http" else store.url


@contextmanager
def running(jobs: tidelog.Jobs) -> Iterator[None]:
    """The runner in a thread for the length of the block."""
    t = threading.Thread(target=jobs.run, kwargs={"poll": 0.05, "install_signals": False}, daemon=True)
    t.start()
    try:
        yield
    finally:
        jobs.stop()
        t.join(20)
        assert not t.is_alive()


@sync_only
def test_a_job_keeps_its_status_and_its_handlers_value(store):
    with store.open() as log:
        jobs = tidelog.Jobs(log, queue="work", visibility_timeout=10)

        @jobs.job("add")
        def add(p: dict[str, int]) -> dict[str, int]:
            return {"sum": p["a"] + p["b"]}

        job = jobs.enqueue("add", {"a": 2, "b": 3})
        assert job.id == f"{job.partition}-{job.offset}"
        assert job.sent == tidelog.Sent("work", job.partition, job.offset, job.timestamp)
        assert job.status() == "waiting"
        with running(jobs):
            assert job.result(timeout=20) == {"sum": 5}
        found = jobs.info(job.id)
        assert (found.status, found.attempts, found.result, found.error) == ("done", 1, {"sum": 5}, None)
        # Another handle (another process) sees the same, by id.
        again = tidelog.Jobs(log, queue="work").get(job.id)
        assert again.status() == "done" and again.result(timeout=0) == {"sum": 5}
        assert again.offset == job.offset and again.timestamp == job.timestamp


@sync_only
def test_a_failure_is_failed_until_its_retry_then_dead_lettered_with_its_error(store, clock):
    with store.open(clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="work", max_deliveries=2, backoff=60, max_backoff=60)
        runs: list[int] = []

        @jobs.job("flaky")
        def flaky(n: int) -> None:
            runs.append(n)
            raise ValueError(f"no {n}")

        job = jobs.enqueue("flaky", 7)
        with running(jobs):
            wait_for(lambda: job.status() == "failed")
            found = job.info()
            assert (found.error, found.attempts) == ("ValueError: no 7", 1)
            with pytest.raises(tidelog.ResultTimeout):
                job.result(timeout=0.1)  # a retry follows: not final
            clock.advance(61)  # the backoff runs out: delivered again, fails for good
            with pytest.raises(tidelog.JobFailed) as failed:
                job.result(timeout=20)
        assert failed.value.status == "dead-lettered"
        assert failed.value.error == "ValueError: no 7"
        assert job.status() == "dead-lettered" and runs == [7, 7]


@sync_only
def test_a_waiting_delayed_or_retrying_job_cancels_and_never_runs(store, clock):
    with store.open(clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="work", max_deliveries=3, backoff=60, max_backoff=60)
        runs: list[str] = []

        @jobs.job("note")
        def note(what: str) -> None:
            runs.append(what)
            if what == "retry":
                raise RuntimeError("once")

        later = jobs.enqueue("note", "later", delay=30)
        retrying = jobs.enqueue("note", "retry")
        assert later.status() == "delayed"
        with running(jobs):
            wait_for(lambda: retrying.status() == "failed")
            assert later.cancel().status == "cancelled"
            assert retrying.cancel().status == "cancelled"
            assert later.cancel().status == "cancelled"  # again: a no-op
            clock.advance(61)  # both fall due: the runner takes each and acks it unrun
            wait_for(lambda: jobs.queue.stats().available + jobs.queue.stats().delayed == 0)
            wait_for(lambda: jobs.queue.stats().in_flight == 0)
        assert runs == ["retry"]
        assert later.status() == retrying.status() == "cancelled"
        with pytest.raises(tidelog.JobCancelled):
            later.result(timeout=0)


@sync_only
def test_a_cancelled_job_counts_nowhere_in_its_queues_stats(store, clock):
    # A cancelled job is finished: it waits in the queue group only for a runner to ack
    # it unrun, so it is neither available nor delayed (groups describe, /v1, the console).
    with store.open(clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="work")
        runs: list[str] = []

        @jobs.job("note")
        def note(what: str) -> None:
            runs.append(what)

        later = jobs.enqueue("note", "later", delay=3600)
        soon = jobs.enqueue("note", "soon")
        jobs.enqueue("note", "kept", delay=3600)
        assert jobs.queue.stats()[:3] == (1, 0, 2)  # available, in flight, delayed
        later.cancel()
        soon.cancel()
        assert jobs.queue.stats()[:3] == (0, 0, 1)  # before a receive took them into the group
        with running(jobs):
            # The runner's receive takes `soon` (and acks it unrun) and the next job, and
            # keeps the delayed ones in the group's state until they fall due.
            assert jobs.enqueue("note", "done").result(timeout=20) is None
            wait_for(lambda: jobs.queue.stats().in_flight == 0)
            assert jobs.queue.stats()[:3] == (0, 0, 1)
            clock.advance(3601)
            wait_for(lambda: jobs.queue.stats()[:3] == (0, 0, 0))
        assert runs == ["done", "kept"] and later.status() == soon.status() == "cancelled"


@sync_only
def test_a_running_or_finished_job_refuses_a_cancel_and_nothing_changes(store, tmp_path):
    with store.open() as log:
        jobs = tidelog.Jobs(log, queue="work", visibility_timeout=10)
        started, release = threading.Event(), threading.Event()

        @jobs.job("slow")
        def slow(_: Any) -> str:
            started.set()
            release.wait(20)
            return "ok"

        running_job = jobs.enqueue("slow")
        with running(jobs):
            assert started.wait(20)
            wait_for(lambda: running_job.status() == "running")
            before = dump(store_file(store, tmp_path))
            with pytest.raises(tidelog.JobConflict, match="running"):
                running_job.cancel()
            assert dump(store_file(store, tmp_path)) == before
            release.set()
            assert running_job.result(timeout=20) == "ok"
        before = dump(store_file(store, tmp_path))
        with pytest.raises(tidelog.JobConflict, match="done"):
            running_job.cancel()
        assert dump(store_file(store, tmp_path)) == before


@sync_only
def test_an_unknown_or_malformed_job_id_is_refused_and_nothing_changes(store, tmp_path):
    with store.open() as log:
        jobs = tidelog.Jobs(log, queue="work")
        job = jobs.enqueue("anything")
        elsewhere = tidelog.Jobs(log, queue="elsewhere")
        before = dump(store_file(store, tmp_path))
        for unknown in (f"0-{job.offset + 1}", "7-1"):
            with pytest.raises(tidelog.UnknownJob):
                jobs.status(unknown)
            with pytest.raises(tidelog.UnknownJob):
                jobs.get(unknown)
            with pytest.raises(tidelog.UnknownJob):
                jobs.cancel(unknown)
            with pytest.raises(tidelog.UnknownJob):
                jobs.result(unknown, timeout=0)
        with pytest.raises(tidelog.UnknownJob):
            elsewhere.status(job.id)
        for malformed in ("", "abc", "0-0", "-1-2", "0-99999999999999999999", 42):
            with pytest.raises(tidelog.InvalidRequest, match="job id"):
                jobs.status(malformed)
            with pytest.raises(tidelog.InvalidRequest):
                jobs.cancel(malformed)
        with pytest.raises(tidelog.InvalidRequest, match="timeout"):
            job.result(timeout=-1)
        with pytest.raises(tidelog.InvalidRequest, match="result_ttl"):
            tidelog.Jobs(log, queue="work", result_ttl=0)
        assert dump(store_file(store, tmp_path)) == before
        assert job.status() == "waiting"


@sync_only
def test_a_record_that_was_never_a_job_says_so_and_refuses_a_cancel(store, tmp_path):
    with store.open() as log:
        jobs = tidelog.Jobs(log, queue="work", max_deliveries=1)

        @jobs.job("note")
        def note(_: Any) -> str:
            return "noted"

        # Sent to the runner's topic as a plain queue would, not enqueued as a job.
        plain = jobs.queue.send({"to": "a@b.c"})
        later = jobs.queue.send("text", delay=3600)
        ids = [f"{s.partition}-{s.offset}" for s in (plain, later)]
        job = jobs.enqueue("note")
        before = dump(store_file(store, tmp_path))
        for not_a_job in ids:
            with pytest.raises(tidelog.UnknownJob, match=f"'{not_a_job}' of queue 'work' is not a job"):
                jobs.status(not_a_job)
            with pytest.raises(tidelog.UnknownJob, match="is not a job"):
                jobs.cancel(not_a_job)
        assert dump(store_file(store, tmp_path)) == before  # the refused cancels wrote nothing
        with running(jobs):
            assert job.result(timeout=20) == "noted"
            wait_for(lambda: jobs.queue.stats().dead_lettered == 1)  # the runner's "not a job record"
        # Finished by the runner, it is still not a job (not "done", with no result kept).
        with pytest.raises(tidelog.UnknownJob, match="is not a job"):
            jobs.status(ids[0])
        assert job.status() == "done"


@sync_only
def test_results_are_kept_for_result_ttl_then_cleaned(store, clock):
    with store.open(clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="work", result_ttl=60)

        @jobs.job("value")
        def value(n: int) -> int:
            return n * 10

        job = jobs.enqueue("value", 4)
        with running(jobs):
            assert job.result(timeout=20) == 40
        clock.advance(30)
        log.clean()
        assert job.result(timeout=0) == 40  # within its time
        clock.advance(31)
        log.clean()
        # The record is still there, finished: done, with no result kept.
        found = job.info()
        assert found.status == "done" and found.result is None and "result_ttl" in found.error
        with pytest.raises(tidelog.UnknownJob, match="not kept"):
            job.result(timeout=0)


@sync_only
def test_a_job_whose_runners_die_until_max_deliveries_reads_dead_lettered(store, clock):
    with store.open(clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="work", visibility_timeout=5, max_deliveries=2)
        job = jobs.enqueue("crash")
        first = jobs.queue.receive()[0]
        assert jobs._start(first) == "running"  # what a runner does before the handler; then it dies
        assert job.status() == "running"
        clock.advance(6)
        second = jobs.queue.receive()[0]
        assert second.delivery_count == 2 and jobs._start(second) == "running"  # dies again
        clock.advance(6)
        assert jobs.queue.receive() == []  # past max deliveries: the queue dead-letters it
        found = job.info()
        assert (found.status, found.attempts) == ("dead-lettered", 2)
        with pytest.raises(tidelog.JobFailed, match="runner stopped"):
            job.result(timeout=0)


@pytest.mark.anyio
@pytest.mark.async_api_only
async def test_the_asyncio_runner_keeps_statuses_and_results_too(store):
    async with store.aio_open() as log:
        jobs = tidelog.aio.Jobs(log, queue="work", max_deliveries=1)

        @jobs.job("double")
        async def double(n: int) -> int:
            return 2 * n

        @jobs.job("broken")
        def broken(_: Any) -> None:
            raise KeyError("gone")

        job = await jobs.enqueue("double", 21)
        bad = await jobs.enqueue("broken")
        later = await jobs.enqueue("double", 1, delay=3600)
        assert await job.status() == "waiting" and await later.status() == "delayed"
        assert (await later.cancel()).status == "cancelled"
        runner = asyncio.create_task(jobs.run(poll=0.05))
        try:
            assert await job.result(timeout=20) == 42
            with pytest.raises(tidelog.JobFailed, match="KeyError"):
                await bad.result(timeout=20)
        finally:
            jobs.stop()
            await asyncio.wait_for(runner, 20)
        assert (await jobs.get(job.id)).offset == job.offset
        assert await jobs.status(bad.id) == "dead-lettered"
        with pytest.raises(tidelog.UnknownJob):
            await jobs.status("0-999")
        with pytest.raises(tidelog.JobConflict):
            await job.cancel()


def wait_for(condition: Any, timeout: float = 20) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
