"""Periodic jobs on every store, on the conformance clock: each tick is
enqueued once by any number of runners racing for it, a restarted runner
repeats nothing and skips or catches up what it missed, and a bad schedule
is refused at registration (issue 31)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from typing import Any

import pytest

import tidelog
import tidelog.aio
from dumps import dump

from .conftest import StoreKind

pytestmark = pytest.mark.store_feature("queues")
sync_only = pytest.mark.sync_api_only("tidelog.Jobs on the sync API; tidelog.aio.Jobs is tested below")
MINUTE = 60_000


def store_file(store: StoreKind, tmp_path: Any) -> str:
    return str(tmp_path / "served.db") if store.name == "http" else store.url


def runner(log: tidelog.Log, missed: str = "skip") -> tidelog.Jobs:
    jobs = tidelog.Jobs(log, queue="cron")

    @jobs.periodic("*/5 * * * *", name="sweep", missed=missed)
    def sweep(tick: dict[str, Any]) -> int:
        return int(tick["tick"])

    return jobs


def race(jobs: tidelog.Jobs, barrier: threading.Barrier) -> None:
    barrier.wait()  # the three rounds start together
    jobs.tick()


def enqueued(log: tidelog.Log) -> Counter[int]:
    """How many job records each tick has on the queue topic."""
    return Counter(m.data["payload"]["tick"] for m in log.read("cron", 0, after=0, limit=10_000))


@sync_only
def test_three_runners_racing_for_every_tick_enqueue_each_once(store, clock):
    clock.now = 1_800_000_000_000  # on a 5-minute boundary
    logs = [store.open(clock=clock) for _ in range(3)]
    try:
        runners = [runner(log) for log in logs]
        assert [r.tick() for r in runners] == [[], [], []]  # nothing due yet: a new schedule starts now
        for _ in range(6):
            clock.advance(5 * 60)
            barrier = threading.Barrier(3)
            threads = [threading.Thread(target=race, args=(r, barrier)) for r in runners]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        counts = enqueued(logs[0])
        ticks = [clock.now - k * 5 * MINUTE for k in range(5, -1, -1)]
        assert counts == Counter({t: 1 for t in ticks})
        markers = [json.loads(m.value)["tick"] for m in logs[0].read("cron.ticks", 0, after=0, limit=100)]
        assert sorted(markers) == ticks  # one marker a tick, written with its job
    finally:
        for log in logs:
            log.close()


@sync_only
@pytest.mark.parametrize("missed", ["skip", "catch_up"])
def test_a_restarted_runner_repeats_nothing_and_skips_or_catches_up(store, clock, missed):
    clock.now = 1_800_000_000_000
    with store.open(clock=clock) as log:
        first = runner(log, missed)
        first.tick()
        clock.advance(5 * 60)
        assert [t.tick for t in first.tick()] == [clock.now]
        last = clock.now
    # Down for three ticks and a bit; then a new process (a new scheduler) starts.
    clock.advance(3 * 5 * 60 + 30)
    with store.open(clock=clock) as log:
        again = runner(log, missed)
        got = [t.tick for t in again.tick()]
        missed_ticks = [last + k * 5 * MINUTE for k in (1, 2, 3)]
        assert got == (missed_ticks if missed == "catch_up" else missed_ticks[-1:])
        assert again.tick() == []  # nothing more until the next tick
        counts = enqueued(log)
        assert set(counts.values()) == {1}
        info = {s.name: s for s in again.schedules()}["sweep"]
        assert (info.last_tick, info.next_tick) == (missed_ticks[-1], missed_ticks[-1] + 5 * MINUTE)


@sync_only
def test_a_running_runner_runs_each_tick_once_as_the_clock_moves(store, clock):
    clock.now = 1_800_000_000_000
    with store.open(clock=clock) as log:
        jobs = tidelog.Jobs(log, queue="cron")
        ran: list[int] = []

        @jobs.periodic("*/5 * * * *", name="sweep")
        def sweep(tick: dict[str, Any]) -> None:
            ran.append(tick["tick"])

        worker = threading.Thread(target=jobs.run, kwargs={"poll": 0.05, "install_signals": False})
        worker.start()
        try:
            expected = []
            for _ in range(3):
                wait_for(lambda: jobs._scheduler is not None and jobs._scheduler.next_due() is not None)
                clock.advance(5 * 60)
                expected.append(clock.now)
                # Acked too: the clock's next jump would expire a lease still held.
                wait_for(lambda: ran == expected and jobs.queue.stats().in_flight == 0)
        finally:
            jobs.stop()
            worker.join(20)
        assert ran == expected


@sync_only
def test_a_bad_schedule_is_refused_at_registration_and_nothing_changes(store, tmp_path):
    with store.open() as log:
        jobs = tidelog.Jobs(log, queue="cron")

        @jobs.periodic("0 3 * * *", name="nightly")
        def nightly(_: Any) -> None: ...

        before = dump(store_file(store, tmp_path))
        bad = [
            (("61 * * * *",), {}, "minute"),
            (("* 24 * * *",), {}, "hour"),
            (("* * * 13 *",), {}, "month"),
            (("*/5 * *",), {}, "number of fields"),
            (("* * * * *",), {"tz": "Mars/Olympus"}, "time zone"),
            (("* * * * *",), {"missed": "sometimes"}, "missed"),
            (("0 4 * * *",), {"name": "nightly"}, "registered twice"),
            (("0 3 * * *",), {"name": "nightly"}, "registered twice"),
            (("0 3 * * *",), {"name": "bad name"}, "name"),
        ]
        for args, kwargs, says in bad:
            with pytest.raises(tidelog.InvalidRequest, match=says):
                jobs.periodic(*args, **{"name": "other", **kwargs})(lambda _: None)
        assert [s.name for s in jobs.schedules()] == ["nightly"]
        assert dump(store_file(store, tmp_path)) == before


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.async_api_only
async def test_the_asyncio_runner_runs_each_tick_once_too(store, clock):
    clock.now = 1_800_000_000_000
    async with store.aio_open(clock=clock) as log:
        jobs = tidelog.aio.Jobs(log, queue="cron")
        other = tidelog.aio.Jobs(log, queue="cron")
        ran: list[int] = []

        @jobs.periodic("*/5 * * * *", name="sweep", tz="Europe/Paris")
        async def sweep(tick: dict[str, Any]) -> None:
            ran.append(tick["tick"])

        other.periodic("*/5 * * * *", name="sweep", tz="Europe/Paris")(sweep)
        with pytest.raises(tidelog.InvalidRequest, match="Bad minute"):
            jobs.periodic("99 * * * *", name="bad")(sweep)
        assert await jobs.tick() == [] and await other.tick() == []
        clock.advance(5 * 60)
        assert [t.tick for t in await other.tick()] == [clock.now]  # the other runner got there first
        runner = asyncio.create_task(jobs.run(poll=0.05))

        async def settled(expected: list[int]) -> None:
            # The clock moves on only once the tick's job is acked: moving it
            # 5 minutes past a job still running (its handler returned, its
            # ack not yet committed) expires the lease, and a job delivered
            # again runs again (at least once), which is not what this tests.
            for _ in range(1000):
                if sorted(ran) == expected and (await jobs.queue.stats()).in_flight == 0:
                    return
                await asyncio.sleep(0.02)

        try:
            expected = [clock.now]
            for _ in range(2):
                await settled(expected)
                clock.advance(5 * 60)
                expected.append(clock.now)
            await settled(expected)
            assert sorted(ran) == expected  # each tick once
        finally:
            jobs.stop()
            await asyncio.wait_for(runner, 20)
        [info] = await jobs.schedules()
        assert (info.name, info.last_tick, info.next_tick) == (
            "sweep",
            expected[-1],
            expected[-1] + 5 * MINUTE,
        )


def wait_for(condition: Any, timeout: float = 20) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
