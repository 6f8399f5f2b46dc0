"""tidelog.aio in its own terms, on every store: waits on the loop, `async for`,
cancellation, the event loop a log belongs to.

Every other conformance test also runs through tidelog.aio (the `async`
variant, see aio_bridge.py); these are the asyncio-only promises.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import tidelog

pytestmark = [pytest.mark.anyio, pytest.mark.async_api_only]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Gate:
    """A clock that, once armed, holds the next tidelog.aio pool thread that
    reads it until `go` is set: a core call caught in the middle."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self) -> int:
        if self.armed and threading.current_thread().name.startswith("tidelog-aio"):
            self.armed = False
            self.entered.set()
            self.go.wait(30)
        return time.time_ns() // 1_000_000


async def _parked(log: tidelog.aio.AsyncLog) -> None:
    """Let every started task make its first read and park on the loop."""
    await log._runtime.hub()  # started: the waiters' first reads come next
    for _ in range(3):
        await asyncio.sleep(0)
        await log._runtime.idle()


async def test_receive_wakes_on_a_send_from_this_log(store):
    async with store.aio_open() as log:
        q = log.queue("jobs")
        waiter = asyncio.create_task(q.receive(wait=30))
        await _parked(log)
        assert not waiter.done()
        await q.send(b"hello")
        got = await asyncio.wait_for(waiter, 20)
        assert [d.value for d in got] == [b"hello"]


async def test_receive_wakes_on_a_send_by_another_log(store):
    # Another Log (as another process would be): the wake-up comes through the
    # store's watch path (SQLite's data version, LISTEN/NOTIFY, /v1/changes).
    async with store.aio_open() as log:
        q = log.queue("jobs")
        await q.open()
        waiter = asyncio.create_task(q.receive(wait=30))
        await _parked(log)

        def send_elsewhere() -> None:
            with tidelog.open(store.url) as other:
                other.queue("jobs").send(b"from afar")

        await asyncio.to_thread(send_elsewhere)
        got = await asyncio.wait_for(waiter, 20)
        assert [d.value for d in got] == [b"from afar"]


async def test_wait_for_records_and_group_poll_wake_on_append(store):
    async with store.aio_open() as log:
        await log.create_topic("w", partitions=2)
        assert await log.wait_for_records("w", 1, 0, timeout=0) is False
        waiter = asyncio.create_task(log.wait_for_records("w", 1, 0, timeout=30))
        member = log.consumer("g", topics=["w"], heartbeat_interval=0)
        await member.open()
        polling = asyncio.create_task(member.poll(timeout=30))
        await _parked(log)
        assert not waiter.done() and not polling.done()
        await log.producer().send("w", b"x", partition=1)
        assert await asyncio.wait_for(waiter, 20) is True
        assert [m.value for m in await asyncio.wait_for(polling, 20)] == [b"x"]
        await member.close()


async def test_many_waiting_receives_hold_no_thread_each(store):
    async with store.aio_open() as log:
        q = log.queue("jobs", visibility_timeout=600)
        # Warm up: the pool's threads, the hub and the store's watch exist now.
        await asyncio.gather(*(q.receive(wait=0.01) for _ in range(8)))
        before = threading.active_count()
        waiters = [asyncio.create_task(q.receive(wait=60)) for _ in range(200)]
        await _parked(log)
        assert not any(w.done() for w in waiters)
        assert threading.active_count() - before < 10  # not one a waiter
        await q.send_batch([f"job-{i}" for i in range(200)])
        got = await asyncio.wait_for(asyncio.gather(*waiters), 60)
        # Every waiter woke and leased its own record.
        assert sorted(d.offset for batch in got for d in batch) == list(range(1, 201))


class CountingClock:
    """The wall clock, counting the reads of it made on tidelog.aio's pool:
    one a send, one a lease attempt (`Queue.poll`)."""

    def __init__(self) -> None:
        self.pool_calls = 0

    def __call__(self) -> int:
        if threading.current_thread().name.startswith("tidelog-aio"):
            self.pool_calls += 1
        return time.time_ns() // 1_000_000


async def test_an_append_wakes_one_waiting_receive_of_a_group_not_all(store):
    clock = CountingClock()
    async with store.aio_open(clock=clock) as log:
        q = log.queue("jobs")
        await q.open()
        waiters = [asyncio.create_task(q.receive(wait=60)) for _ in range(100)]
        await _parked(log)
        before = clock.pool_calls
        await q.send(b"one")
        done, waiting = await asyncio.wait(waiters, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        await log._runtime.idle()
        # The send, the lease that took it, the next in turn's look: not 100 lease attempts.
        assert clock.pool_calls - before <= 5
        assert [[d.value for d in w.result()] for w in done] == [[b"one"]]
        await q.send(b"two")  # the next in turn gets it
        done, waiting = await asyncio.wait(waiting, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        assert [[d.value for d in w.result()] for w in done] == [[b"two"]]
        for w in waiting:
            w.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


async def test_cancelling_a_waiting_receive_leaks_nothing(store):
    async with store.aio_open() as log:
        q = log.queue("jobs")
        waiter = asyncio.create_task(q.receive(wait=30))
        await _parked(log)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await q.send(b"x")
        stats = await q.stats()
        assert (stats.available, stats.in_flight) == (1, 0)
        (d,) = await q.receive()
        assert d.delivery_count == 1


async def test_a_receive_cancelled_while_leasing_gives_the_lease_back(store):
    gate = Gate()
    async with store.aio_open(clock=gate) as log:
        q = log.queue("jobs", visibility_timeout=600)
        await q.send(b"x")
        gate.armed = True
        task = asyncio.create_task(q.receive(max_messages=5))
        assert await asyncio.to_thread(gate.entered.wait, 30)  # the lease call is under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.go.set()  # the call leases the record now; its undo gives it back
        await log._runtime.idle()
        stats = await q.stats()
        assert (stats.available, stats.in_flight) == (1, 0)
        (d,) = await q.receive()
        assert (d.value, d.delivery_count) == (b"x", 2)


@pytest.mark.store_feature("groups")
async def test_a_poll_cancelled_while_reading_reads_the_records_again(store):
    async with store.aio_open() as log:
        await log.create_topic("orders", partitions=2)
        await log.producer().send_batch("orders", [b"1", b"2", b"3"], partition=0)
        gate = Gate()

        def hold(partitions):  # on_revoke runs inside poll's read, in a pool thread
            gate.entered.set()
            gate.go.wait(30)

        a = log.consumer("g", topics=["orders"], heartbeat_interval=0, member_id="a", on_revoke=hold)
        b = log.consumer("g", topics=["orders"], heartbeat_interval=0, member_id="b")
        await a.open()
        await b.open()
        await a.heartbeat()  # a learns it gives partition 1 to b: its next poll releases it
        task = asyncio.create_task(a.poll(timeout=0))
        assert await asyncio.to_thread(gate.entered.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.go.set()  # the read goes on, moving partition 0's position; the undo moves it back
        await log._runtime.idle()
        assert a.assignment() == [("orders", 0)]
        assert [m.offset for m in await a.poll(timeout=0)] == [1, 2, 3]
        await a.commit()
        assert await log.consumer("g").committed("orders", 0) == 3


async def test_async_for_on_a_queue_until_the_log_closes(store):
    log = await store.aio_open()
    q = log.queue("jobs")
    await q.send_batch([b"1", b"2"])
    seen: list[bytes] = []
    three = asyncio.Event()

    async def consume() -> str:
        async for d in q:
            seen.append(d.value)
            await q.ack(d)
            if len(seen) == 3:
                three.set()
        return "ended"

    consumer = asyncio.create_task(consume())
    await q.send(b"3")  # wakes the iteration waiting for work
    await asyncio.wait_for(three.wait(), 20)
    await log.close()
    assert await asyncio.wait_for(consumer, 20) == "ended"
    assert seen == [b"1", b"2", b"3"]


@pytest.mark.store_feature("groups")
async def test_async_for_on_a_group_member_and_commit_covers_what_was_yielded(store):
    async with store.aio_open() as log:
        await log.create_topic("orders")
        await log.producer().send_batch("orders", [b"a", b"b", b"c", b"d", b"e"], partition=0)
        async with log.consumer("billing", topics=["orders"]) as consumer:
            got = []
            async for msg in consumer:
                got.append(msg.offset)
                if len(got) == 2:
                    break
            # The iteration read all five ahead; commit() covers the two it yielded.
            await consumer.commit()
            assert await log.consumer("billing").committed("orders", 0) == 2
            assert (await anext(aiter(consumer))).offset == 3
            msg = await anext(aiter(consumer))
            await consumer.commit(msg)
            assert await log.consumer("billing").committed("orders", 0) == 4
        assert consumer.assignment() == []


async def test_another_event_loop_is_refused(store):
    async with store.aio_open() as log:
        q = log.queue("jobs")
        await q.send(b"x")

        def from_another_loop(make):
            return asyncio.run(make())

        for make in (log.topics, lambda: q.receive(wait=1), q.stats):
            with pytest.raises(tidelog.WrongEventLoop, match="another event loop"):
                await asyncio.to_thread(from_another_loop, make)
        # Nothing changed, and the log still works on its own loop.
        assert (await q.stats()).available == 1
        assert [d.value for d in await q.receive()] == [b"x"]


async def test_bad_input_raises_the_same_errors_from_the_awaited_call(store):
    async with store.aio_open() as log:
        q = log.queue("jobs", visibility_timeout=-1)  # no I/O yet: the handle is made at once
        with pytest.raises(tidelog.InvalidRequest, match="visibility_timeout"):
            await q.send(b"x")
        with pytest.raises(tidelog.InvalidName):
            await log.producer().send("bad topic", b"x")
        member = log.consumer("g", topics=["t"], assignor="fastest")
        with pytest.raises(tidelog.InvalidRequest, match="assignor"):
            await member.open()
        with pytest.raises(tidelog.InvalidRequest):
            await log.queue("jobs").receive(wait=-1)
        assert [t.name for t in await log.topics()] == []
        assert await log.groups() == []


async def test_closed_log_refuses_calls(store):
    log = await store.aio_open()
    await log.close()
    with pytest.raises(tidelog.Closed):
        await log.topics()
    await log.close()  # twice is fine
