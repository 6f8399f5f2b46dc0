"""What every asyncio twin shares: the event loop, a small thread pool, the wake-up hub.

The semantics stay in the sync core. A twin runs the core's non-blocking
operations (a send, one `Queue.poll`, one fetch: milliseconds each) on this
pool and waits on the event loop, never in a thread: a `receive(wait=30)`
is `notify.along_poll` over those operations, woken by the same append hub
the HTTP and Redis fronts use (`server.runtime.hub`, fed by the store's
watch: SQLite's data-version tick, PostgreSQL's LISTEN, the server's
/v1/changes long-poll). So a thousand waiting receives hold a thousand
futures, not a thousand threads; and the receives of one queue group wait
in turns, so an append does not send every one of them to the store.

Cancellation: a task cancelled while it waits leaves nothing behind (the
wait is a future on the loop). A task cancelled while its operation runs in
a thread cannot stop the thread, so an operation that hands something out
(a lease, a read position) takes an `undo` that gives it back once the
thread is done.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar

from ..errors import Closed, WrongEventLoop
from ..log import Log
from ..notify import along_poll
from ..server.runtime.hub import AppendHub, Key

logger = logging.getLogger("tidelog.aio")

T = TypeVar("T")
C = TypeVar("C")  # the sync class a twin drives
P = ParamSpec("P")

DEFAULT_THREADS = 4
MAX_THREADS = 64


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The loop running now; WrongEventLoop when there is none."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise WrongEventLoop(f"{what} needs a running event loop: call it inside a coroutine") from None


class Runtime:
    """One per AsyncLog: its loop, its thread pool and its wake-up hub."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int = DEFAULT_THREADS):
        self.loop = loop
        self.threads = threads
        # Few threads on purpose: each runs one short store call at a time
        # and holds one store connection (a SQLite reader, a PostgreSQL
        # pool slot, an httpx connection); waits never occupy one.
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="tidelog-aio")
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self.log: Log | None = None
        self._hub: AppendHub | None = None
        self._hub_task: asyncio.Task[AppendHub] | None = None
        self._turns: dict[Hashable, collections.deque[asyncio.Future[None]]] = {}
        self.closed = False

    # the loop ------------------------------------------------------------------

    def check(self) -> None:
        """Refuse a call from another event loop (or from none), or after close."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self.loop:
            raise WrongEventLoop(
                "this tidelog.aio log was opened on another event loop; open one log per loop "
                "(await tidelog.aio.open(...) inside the loop that uses it)"
            )
        if self.closed:
            raise Closed("the log is closed")

    # running core operations ---------------------------------------------------

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a core operation on the pool and await its result."""
        self.check()
        return await asyncio.wrap_future(self._submit(functools.partial(fn, *args, **kwargs)))

    async def undoable(
        self, undo: Callable[[T], object], fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`call`, and if the caller is cancelled after the operation started,
        `undo(result)` on the pool once it finished (a lease given back)."""
        self.check()
        future = self._submit(functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # A future that had not started is cancelled with us and never runs.
            # `settled` stays in flight until the undo ran, so close() waits for it.
            settled: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._inflight.add(settled)
            settled.add_done_callback(self._inflight.discard)
            future.add_done_callback(functools.partial(self._undo, undo, settled))
            raise

    def _submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future = self._pool.submit(fn)
        self._inflight.add(future)
        future.add_done_callback(self._inflight.discard)
        return future

    def _undo(
        self,
        undo: Callable[[T], object],
        settled: concurrent.futures.Future[None],
        future: concurrent.futures.Future[T],
    ) -> None:
        # Runs in the pool thread that finished `future`, or on the loop when it
        # was done already: either way hand the store call back to the pool.
        if future.cancelled() or future.exception() is not None:
            settled.set_result(None)
            return
        try:
            done = self._pool.submit(_quietly, undo, future.result())
        except RuntimeError:  # the pool is shut down: a lease runs out by its visibility timeout
            logger.warning("could not give back what a cancelled call took: the log is closed")
            settled.set_result(None)
            return
        done.add_done_callback(lambda _: settled.set_result(None))

    # waiting -------------------------------------------------------------------

    async def hub(self) -> AppendHub:
        """The append hub of this log, started on first use."""
        if self._hub is not None:
            return self._hub
        self.check()
        if self._hub_task is None:
            self._hub_task = self.loop.create_task(self._start_hub())
        try:
            return await asyncio.shield(self._hub_task)
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._hub_task = None  # the next wait tries again
            raise

    async def _start_hub(self) -> AppendHub:
        log = self.log
        assert log is not None
        # Watching other writers may connect (PostgreSQL's LISTEN): start the
        # store's watch on the pool, so the hub's own listen below finds it running.
        await self.call(lambda: log.listen(_ignore)())
        hub = AppendHub(log)
        hub.start()
        self._hub = hub
        return hub

    async def poll(
        self,
        read: Callable[[], Awaitable[T]],
        wait: float,
        keys: Iterable[Key],
        *,
        found: Callable[[T], object] = bool,
        due_in: Callable[[T], float | None] | None = None,
        turns: Hashable | None = None,
    ) -> T:
        """`read` until it finds something or `wait` seconds pass, woken by an
        append to one of `keys` ((topic, partition), or (topic, None) for any
        partition) or when `due_in(result)` seconds passed.

        Waiters that share `turns` (the receives of one queue group) wait in
        turns: after a first read of its own, a waiter queues up, and only
        the one whose turn it is reads again on a wake-up; when it leaves
        (it got records, its wait ended, it was cancelled) the next one
        reads at once. So an append of k records costs about k + 1 reads,
        not one per waiter, however many wait.
        """
        if wait <= 0:
            return await read()
        hub = await self.hub()
        keys = list(keys)

        def waiting(left: float) -> Awaitable[T]:
            return along_poll(
                read,
                left,
                lambda: hub.seq,
                lambda seq, pause: _woken(hub, keys, seq, pause),
                found=found,
                due_in=due_in,
            )

        if turns is None:
            return await waiting(wait)
        deadline = time.monotonic() + wait
        result = await read()  # what is there now is taken without queueing
        left = deadline - time.monotonic()
        if found(result) or left <= 0:
            return result
        line = self._turns.setdefault(turns, collections.deque())
        turn: asyncio.Future[None] = self.loop.create_future()
        line.append(turn)
        if line[0] is turn:
            turn.set_result(None)
        try:
            # asyncio.wait, not wait_for: on Python 3.11 wait_for swallows a
            # cancellation that arrives as its future completes, and the
            # caller's task would go on to take a lease it cannot hand back.
            if not (await asyncio.wait([turn], timeout=left))[0]:
                return result
            # Our turn: `waiting` reads at once (an append may have come with
            # the hand-over), then waits on the hub.
            return await waiting(deadline - time.monotonic())
        finally:
            first = line[0] is turn
            line.remove(turn)
            if first and line and not line[0].done():
                line[0].set_result(None)
            if not line and self._turns.get(turns) is line:
                del self._turns[turns]

    # closing -------------------------------------------------------------------

    async def close(self) -> None:
        """Wake every waiter, let running operations (and their undos) finish,
        close the log, stop the pool."""
        if self.closed:
            return
        self.check()
        self.closed = True
        if self._hub is not None:
            self._hub.stop()
        await self.idle()
        if self.log is not None:
            await asyncio.wrap_future(self._pool.submit(self.log.close))
        self._pool.shutdown(wait=False)

    async def idle(self) -> None:
        """Return once no core call runs on the pool and every undo is done."""
        while self._inflight:
            await asyncio.wait([asyncio.wrap_future(f) for f in list(self._inflight)])

    def shutdown(self) -> None:
        """Stop the pool without closing a log (a failed open)."""
        self.closed = True
        self._pool.shutdown(wait=False)


class OnFirstUse(Generic[T]):
    """A core handle made on the pool on first use (its constructor does I/O:
    a queue group's first open stores its settings, a member joins)."""

    def __init__(self, runtime: Runtime, make: Callable[[], T]):
        self._runtime = runtime
        self._make = make
        self._task: asyncio.Task[T] | None = None
        self.value: T | None = None

    async def get(self) -> T:
        if self.value is not None:
            return self.value
        self._runtime.check()
        task = self._task
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            # Shielded: a caller cancelled during the open does not undo it for the others.
            task = self._task = self._runtime.loop.create_task(self._runtime.call(self._make))
        self.value = await asyncio.shield(task)
        return self.value


def on_loop(runtime: Runtime, callback: Callable[[T], Any] | None) -> Callable[[T], Any] | None:
    """A callback the core calls from a thread: an `async def` one runs on the
    loop and the thread waits for it (so `on_revoke` may await a commit)."""
    if callback is None or not inspect.iscoroutinefunction(callback):
        return callback
    coroutine_function = callback

    def run(arg: T) -> Any:
        if runtime.loop.is_closed():
            return None
        return asyncio.run_coroutine_threadsafe(coroutine_function(arg), runtime.loop).result()

    return run


class Twin(Generic[C]):
    """Base of the asyncio twins: the runtime they run on, and the core handle
    they drive. The operations a twin runs on its pool unchanged are generated
    from the sync class (`tidelog.aio.generated`, by tools/gen_aio.py), so
    every public method is spelled out where mypy and an IDE see it."""

    _runtime: Runtime

    async def _core(self) -> C:
        """The core handle this twin drives (made on first use where that does I/O)."""
        raise NotImplementedError


async def _woken(hub: AppendHub, keys: list[Key], seq: int, timeout: float) -> bool:
    """Wait until one of `keys` gets an append after `seq` or `timeout` passes;
    True when woken. `AppendHub.wait` with asyncio.wait (see `poll`): a
    cancellation always reaches the caller."""
    if hub.seq != seq:
        return True
    if timeout <= 0 or hub.closed:
        return False
    fut = hub.register(keys, seq)
    try:
        return bool((await asyncio.wait([fut], timeout=timeout))[0])
    finally:
        hub.unregister(keys, fut)
        fut.cancel()  # done or not, nothing is waiting for it any more


def _quietly(undo: Callable[[T], object], result: T) -> None:
    try:
        undo(result)
    except Exception:
        logger.exception("giving back what a cancelled call took failed")


def _ignore(*_: object) -> None:
    return None
