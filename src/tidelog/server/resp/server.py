"""The Redis protocol front: redis-cli and redis-py speak to tidelog.

    server = await start_resp_server(log, host="127.0.0.1", port=7379, token=None)
    python -m tidelog.server.resp --db tidelog.db --port 7379

asyncio streams; requests are read by framing.py (hiredis's C reader behind
checks of every announced length, `pip install 'tidelog[resp]'`). Store
calls run in a thread pool, never on the event loop. XADD and PUBLISH go to
one writer task that commits every request waiting at that moment in one
transaction (group commit). Blocking reads wait for an append
(`Log.listen`, bridged with `call_soon_threadsafe`), not on a poll tick, and
notice a client that hangs up meanwhile.

The bounds of `Limits` hold here as Redis holds its own: past
`max_connections` a new client reads `-ERR max number of clients reached`
and is closed (Redis's `maxclients`); a connection waiting for its next
command longer than `idle_timeout` is closed without a word (Redis's
`timeout`; a blocked XREAD or a subscriber waiting for a record is not
idle); with a token, a connection not authenticated within
`handshake_timeout` is closed; SUBSCRIBE holds a message for a silent client
no longer than `max_hold` (subscribe.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ...errors import ConfigurationError, TidelogError
from ...log import Log
from ...records import BatchSent
from ...store.base import ReadsInPlace
from ...streams import Add, Streams
from ..limits import Limits
from ..runtime.hub import AppendHub
from ..runtime.threads import LoopThreads
from ..throttle import AuthThrottle
from .codec import RespError, arity_error, encode, error, text, translate

try:
    from .framing import ConnectionClosed, ProtocolError, RequestReader
except ImportError:  # pragma: no cover - hiredis: the extra is installed by make test
    HIREDIS = False
else:
    HIREDIS = True

logger = logging.getLogger("tidelog.resp")

DEFAULT_PORT = 7379
READ_BYTES = 1 << 16
# Replies a pipeline may hold unsent before its next command waits for the client to
# take them: 40-byte requests read 64 KiB at a time could otherwise queue gigabytes
# of replies (XRANGE of a large stream) for a client that never reads.
OUT_HIGH_WATER = 1 << 20
CLOSE_TIMEOUT_S = 5.0  # how long stopping waits for a client handler to end
LONGEST_WAIT_S = 86_400.0  # one wait of a blocked read; a longer BLOCK waits again
DEFERRED = frozenset((b"xadd", b"publish"))
SUBSCRIBE_FRAMES = ("miniqueue", "redis")
MAX_CLIENTS = b"-ERR max number of clients reached\r\n"  # Redis's words, then the connection closes

# A command's handler, and the table a server runs its commands from:
# name -> (handler, arity, first key) (commands.py holds tidelog's). The
# server is given its table, so the commands can name the Connection they
# take without an import running back.
Handler = Callable[["Connection", list[bytes]], Awaitable[Any]]
Commands = Mapping[str, tuple[Handler, int, int]]
NO_REPLY = object()  # what a handler returns when it wrote its replies itself
NO_AUTH = frozenset({"auth", "hello", "quit"})  # the commands that may run before AUTH when a token is set


class Deferred:
    """A reply that waits for the writer task's commit: result `index` of the
    batch whose future is `future` (one future a batch, not one a request)."""

    __slots__ = ("future", "index", "reply")

    def __init__(self, future: asyncio.Future, index: int, reply: Callable[[Any], Any]):
        self.future = future
        self.index = index
        self.reply = reply


class Writer:
    """One task that commits the XADDs and PUBLISHes waiting together."""

    def __init__(self, server: RespServer):
        self.server = server
        self.items: list[Any] = []
        self.batch = server.loop.create_future()
        self.ready = asyncio.Event()
        # One thread, handed each batch as the commands' store calls are
        # (LoopThreads): a queue put and one call_soon_threadsafe back, not
        # run_in_executor's chained concurrent and asyncio futures.
        self.thread = LoopThreads(1, "tidelog-resp-writer")
        self.task = asyncio.ensure_future(self._run())

    def submit(self, add: Add, reply: Callable[[Any], Any]) -> Deferred:
        self.items.append(add)
        self.ready.set()
        return Deferred(self.batch, len(self.items) - 1, reply)

    def submit_publish(self, topic: str, value: bytes, reply: Callable[[Any], Any]) -> Deferred:
        self.items.append((topic, value))
        self.ready.set()
        return Deferred(self.batch, len(self.items) - 1, reply)

    async def _run(self) -> None:
        loop = self.server.loop
        while True:
            await self.ready.wait()
            self.ready.clear()
            if not self.items:
                continue
            # Everything submitted since the last commit goes in this one.
            items, batch = self.items, self.batch
            self.items, self.batch = [], loop.create_future()
            try:
                results = await self.thread.run(self._write, items)
            except Exception as e:  # noqa: BLE001 - every request of the batch hears it
                results = [e] * len(items)
            batch.set_result(results)

    def _write(self, items: list[Any]) -> list[Any]:
        results: list[Any] = [None] * len(items)
        adds = [(i, x) for i, x in enumerate(items) if isinstance(x, Add)]
        if adds:
            for (i, _), r in zip(adds, self.server.streams.add([x for _, x in adds])):
                results[i] = r
        prepared = []
        for i, item in enumerate(items):
            if not isinstance(item, Add):
                try:
                    prepared.append((i, self.server.producer.prepare(item[0], [item[1]])))
                except Exception as e:  # noqa: BLE001 - refuses that PUBLISH alone
                    results[i] = e
        if prepared:
            sent: list[BatchSent] | list[Exception]
            try:
                sent = self.server.log.write([p for _, p in prepared])
            except Exception as e:  # noqa: BLE001
                sent = [e] * len(prepared)  # each request gets the error
            for (i, _), s in zip(prepared, sent):
                results[i] = s
        return results

    def close(self) -> None:
        self.task.cancel()
        self.thread.stop(wait=False)


class RespServer:
    """The state one Redis-protocol listener shares among its connections."""

    def __init__(
        self,
        log: Log,
        commands: Commands,
        token: str | None = None,
        hub: AppendHub | None = None,
        limits: Limits | None = None,
        subscribe_frames: str = "miniqueue",
        throttle: AuthThrottle | None = None,
    ):
        if not HIREDIS:
            raise ConfigurationError("the Redis protocol front needs hiredis: pip install 'tidelog[resp]'")
        if subscribe_frames not in SUBSCRIBE_FRAMES:
            raise ConfigurationError(
                f"subscribe_frames must be one of {', '.join(SUBSCRIBE_FRAMES)}, not {subscribe_frames!r}"
            )
        self.log = log
        self.commands = commands
        self.streams = Streams(log)
        self.producer = log.producer()
        self.token = token or None
        self.limits = limits or Limits()
        self.subscribe_frames = subscribe_frames
        self.throttle = (
            throttle if throttle is not None else AuthThrottle.of(self.limits)
        )  # shared with the other fronts by `serve`
        # Store calls; a command's round trip to them is a queue put and one
        # call_soon_threadsafe back (LoopThreads), not a pool's chained futures.
        self.threads = LoopThreads(8, "tidelog-resp")
        # A small read on a store whose reads wait for nothing (SQLite on a
        # file) runs on the loop: a hop to a thread and back cost more CPU
        # than the read of a few records from the page cache.
        store = log.store
        self.reads_in_place = isinstance(store, ReadsInPlace) and store.reads_wait_for_nothing()
        self.connections: set[Connection] = set()
        self.handlers: set[asyncio.Task[Any]] = set()  # one a connection, awaited when we stop
        self.ids = itertools.count(1)
        self.blocked = 0
        self.refused = 0  # connections refused past max_connections (INFO's rejected_connections)
        self.started = time.monotonic()
        self.port = 0
        # The wake-ups on appends: the HTTP front's when both run (tidelog
        # serve), so one listener on the log wakes every waiter; else our own.
        self.hub = hub if hub is not None else AppendHub(log)
        self._own_hub = hub is None

    async def start(
        self, host: str, port: int, reuse_port: bool = False, sock: socket.socket | None = None
    ) -> asyncio.Server:
        self.loop = asyncio.get_running_loop()
        if self._own_hub:
            self.hub.start()
        self.writer = Writer(self)
        if sock is not None:  # bound by `serve`
            server = await asyncio.start_server(self._handle, sock=sock)
        else:
            server = await asyncio.start_server(self._handle, host, port, reuse_port=reuse_port or None)
        self.port = server.sockets[0].getsockname()[1]
        _states[id(server)] = self
        return server

    async def aclose(self) -> None:
        """Hang up on every client and wait for its handler to end, then stop
        listening for appends and end the writer (after server.close()).

        The handlers are awaited, not left pending: one that holds a
        subscriber's message releases it through the pool (which must still
        run), and a handler destroyed pending with the loop would leave its
        socket to be closed by the garbage collector, at interpreter exit.
        """
        for conn in list(self.connections):
            conn.hang_up()
        if self.handlers:
            _, late = await asyncio.wait(set(self.handlers), timeout=CLOSE_TIMEOUT_S)
            for task in late:  # stuck in a store call: give up on it
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=CLOSE_TIMEOUT_S)
        if self._own_hub:
            self.hub.stop()
        self.writer.close()
        self.threads.stop(wait=False)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking core call in the pool."""
        return await self.threads.run(fn, *args)

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a small read (a bounded number of records, from the tail as
        a rule): here when the store's reads wait for nothing, else in the pool."""
        if self.reads_in_place:
            return fn(*args)
        return await self.threads.run(fn, *args)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) >= self.limits.max_connections:
            # Refused at once, never queued, as Redis refuses past maxclients.
            self.refused += 1
            writer.write(MAX_CLIENTS)
            writer.close()
            return
        conn = Connection(self, reader, writer)
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self.handlers.add(task)
            task.add_done_callback(self.handlers.discard)
        try:
            await conn.serve()
        except (ConnectionClosed, ConnectionError):
            pass
        except Exception:  # never let one client disturb the others
            logger.exception("RESP connection %s failed", conn.id)
        finally:
            self.connections.discard(conn)
            conn.close()


class Connection:
    """One client: reads commands, runs them in order, writes replies."""

    def __init__(self, server: RespServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.stream = reader
        self.transport_writer = writer
        peer = writer.get_extra_info("peername")
        self.host = str(peer[0]) if isinstance(peer, tuple) else ""  # what the login throttle counts
        self._authenticated = server.token is None
        self.requests = RequestReader(server.limits, self._authenticated)
        self.read_task: asyncio.Future | None = None
        self.out: list[bytes] = []
        # Replies not written yet because a reply before them waits for its
        # commit: Deferreds, and the ready error lines queued behind them.
        self.outstanding: list[Deferred | bytes] = []
        self.id = next(server.ids)
        self.proto = 2
        self.name: str | None = None
        self.lib: dict[str, str] = {}
        self.closing = False
        # Since when the connection waits for the client's next command (None:
        # a command runs, or a read is blocked, which is not idle).
        self.waiting_since: float | None = None
        loop, limits = server.loop, server.limits
        self.idle_timer: asyncio.TimerHandle | None = None
        self.handshake_timer: asyncio.TimerHandle | None = None
        if limits.idle_timeout:
            self.idle_timer = loop.call_later(limits.idle_timeout, self._check_idle)
        if not self._authenticated:
            self.handshake_timer = loop.call_later(limits.handshake_timeout, self._check_handshake)

    @property
    def authenticated(self) -> bool:
        return self._authenticated

    @authenticated.setter
    def authenticated(self, value: bool) -> None:
        if value and not self._authenticated:
            self._authenticated = True
            self.requests.authenticate()
            if self.handshake_timer is not None:
                self.handshake_timer.cancel()

    def redis_frames(self) -> bool:
        """SUBSCRIBE in Redis's pub/sub frames (RESP3, or the server says so), else miniqueue's."""
        return self.proto == 3 or self.server.subscribe_frames == "redis"

    # deadlines -----------------------------------------------------------------------

    def _check_idle(self) -> None:
        loop, idle = self.server.loop, self.server.limits.idle_timeout
        now = loop.time()
        since = self.waiting_since
        if since is not None and now + 0.001 >= since + idle:
            self.hang_up()  # as Redis's `timeout` closes an idle client: without a word
            return
        self.idle_timer = loop.call_at((now if since is None else since) + idle, self._check_idle)

    def _check_handshake(self) -> None:
        if not self._authenticated:
            timeout = self.server.limits.handshake_timeout
            self.hang_up(error(f"NOAUTH Authentication required within {timeout:g} seconds of connecting"))

    def hang_up(self, line: bytes = b"") -> None:
        """Close the connection (after `line`); a client that does not read is not waited for."""
        self.closing = True
        transport = self.transport_writer.transport
        if transport.is_closing():
            return
        if line:
            transport.write(line)
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()

    async def drain(self) -> None:
        """Wait for the client to take the replies written, at most `write_timeout`:
        a client that does not read is hung up on, its buffers and slot freed."""
        try:
            async with asyncio.timeout(self.server.limits.write_timeout):
                await self.transport_writer.drain()
        except TimeoutError:
            logger.info(
                "RESP client %s took no reply within %gs: closed", self.id, self.server.limits.write_timeout
            )
            self.hang_up()
            raise ConnectionResetError("the client took no reply within write_timeout") from None

    def close(self) -> None:
        """The connection ended: stop its timers, drop its buffers."""
        for timer in (self.idle_timer, self.handshake_timer):
            if timer is not None:
                timer.cancel()
        if self.read_task is not None:
            self.read_task.cancel()
            self.read_task = None
        self.requests.close()
        self.out.clear()
        self.transport_writer.close()

    # reading -----------------------------------------------------------------

    def next_command(self) -> list[bytes] | None:
        """The next complete command read, None when there is none yet (ProtocolError: the connection ends)."""
        return self.requests.next_command()

    async def _read(self) -> None:
        if self.read_task is not None:
            task, self.read_task = self.read_task, None
            data = await task
        else:
            data = await self.stream.read(READ_BYTES)
        if not data:
            raise ConnectionClosed
        self.requests.take(data)

    async def wait_or_input(self, fut: asyncio.Future, timeout: float | None) -> bool:
        """Wait for `fut` (or `timeout`), taking in what the client sends meanwhile;
        True when bytes arrived.

        Bytes that arrive are buffered for later commands; a hang-up raises
        ConnectionClosed at once, so a blocked client that leaves is noticed.
        """
        self._send()
        if self.read_task is None:
            self.read_task = asyncio.ensure_future(self.stream.read(READ_BYTES))
        done, _ = await asyncio.wait(
            {fut, self.read_task},
            timeout=None if timeout is None else min(timeout, LONGEST_WAIT_S),
            return_when=asyncio.FIRST_COMPLETED,
        )
        if self.read_task in done:
            await self._read()
            return True
        return False

    # writing -----------------------------------------------------------------

    def _unsent(self) -> int:
        return sum(map(len, self.out)) + self.transport_writer.transport.get_write_buffer_size()

    def _send(self) -> None:
        if self.out:
            if not self.transport_writer.transport.is_closing():  # not after a hang-up
                self.transport_writer.write(b"".join(self.out))
            self.out.clear()

    async def settle_outstanding(self) -> None:
        while self.outstanding:
            d = self.outstanding.pop(0)
            if isinstance(d, bytes):
                self.out.append(d)
                continue
            try:
                results = await d.future
                self.out.append(encode(d.reply(results[d.index]), self.proto))
            except Exception as e:  # noqa: BLE001 - the request's own error reply
                self.out.append(error(translate(e)))

    # commands ----------------------------------------------------------------

    async def serve(self) -> None:
        loop = self.server.loop
        try:
            while not self.closing:
                command = self.next_command()
                if command is None:
                    await self.settle_outstanding()
                    self._send()
                    self.waiting_since = loop.time()
                    await self.drain()
                    self.waiting_since = loop.time()
                    await self._read()
                    self.waiting_since = None
                    continue
                await self.execute(command)
                if len(self.out) >= 4 and self._unsent() > OUT_HIGH_WATER:
                    await self.settle_outstanding()
                    self._send()
                    await self.drain()
        except ProtocolError as e:
            # One error line, then the connection closes, as Redis does.
            self._reply_in_turn(error(e.line))
        await self.settle_outstanding()
        self._send()
        if not self.transport_writer.transport.is_closing():
            await self.drain()

    async def execute(self, command: list[bytes]) -> None:
        name = command[0].lower()
        spec = self.server.commands.get(text(name))
        try:
            if spec is None:
                raise RespError(_unknown(command))
            handler, arity, _ = spec
            n = len(command)
            if (arity > 0 and n != arity) or (arity < 0 and n < -arity):
                raise arity_error(text(name))
            if not self._authenticated and text(name) not in NO_AUTH:
                raise RespError("NOAUTH Authentication required.")
            if name not in DEFERRED:
                await self.settle_outstanding()
            reply = await handler(self, command[1:])
        except (ConnectionError, ProtocolError):
            raise
        except Exception as e:  # noqa: BLE001 - a Redis error reply; the connection stays usable
            if not isinstance(e, TidelogError | RespError):
                logger.exception("RESP command %s failed", text(name))
            self._reply_in_turn(error(translate(e)))
            return
        if type(reply) is Deferred:
            self.outstanding.append(reply)
        elif reply is not NO_REPLY:
            self.out.append(encode(reply, self.proto))

    def _reply_in_turn(self, line: bytes) -> None:
        """A ready reply (an error) after those still waiting for their commit:
        a pipeline's replies keep its commands' order."""
        if self.outstanding:
            self.outstanding.append(line)
        else:
            self.out.append(line)

    async def wait_for(
        self, topics: Sequence[str], read: Callable[[], list], block_ms: int | None, small: bool = False
    ) -> list:
        """Run `read` in the pool (`small`: `server.read`); with BLOCK, again after
        each append to `topics` until it finds something or the time is up (0 waits for ever)."""
        run = self.server.read if small else self.server.run
        if block_ms is None:
            return await run(read)
        loop = self.server.loop
        deadline = None if block_ms == 0 else loop.time() + block_ms / 1000
        keys = [(topic, None) for topic in topics]
        self.server.blocked += 1
        try:
            while True:
                woken = self.server.hub.register(keys)
                try:
                    found = await run(read)
                    if found:
                        return found
                    left = None if deadline is None else deadline - loop.time()
                    if left is not None and left <= 0:
                        return []
                    await self.wait_or_input(woken, left)
                finally:
                    self.server.hub.unregister(keys, woken)
        finally:
            self.server.blocked -= 1


def _unknown(command: list[bytes]) -> str:
    args = " ".join(f"'{text(a)[:128]}'" for a in command[1:6])
    return f"ERR unknown command '{text(command[0])[:128]}', with args beginning with: {args}"


# asyncio.Server (and uvloop's) takes no attributes: the state of each
# listener is found by the server's id, for stop_resp_server.
_states: dict[int, RespServer] = {}


def resp_state(server: asyncio.AbstractServer) -> RespServer:
    return _states[id(server)]


async def stop_resp_server(server: asyncio.AbstractServer) -> None:
    """Stop listening, close the clients and end the writer task."""
    server.close()
    state = _states.pop(id(server), None)
    if state is not None:
        await state.aclose()
    await server.wait_closed()
