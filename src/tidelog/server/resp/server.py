"""The Redis protocol front: redis-cli and redis-py speak to tidelog.

    server = await start_resp_server(log, host="127.0.0.1", port=7379, token=None)
    python -m tidelog.server.resp --db tidelog.db --port 7379

asyncio streams; requests are parsed by hiredis's C reader (`pip install
'tidelog[resp]'`), with inline commands (`PING` typed into telnet) read by
hand. Store calls run in a thread pool, never on the event loop. XADD and
PUBLISH go to one writer task that commits every request waiting at that
moment in one transaction (group commit). Blocking reads wait for an append
(`Log.listen`, bridged with `call_soon_threadsafe`), not on a poll tick, and
notice a client that hangs up meanwhile.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...errors import ConfigurationError, InvalidRequest, LeaseLost, TidelogError
from ...log import Log
from ...records import BatchSent
from ...streams import Add, Streams
from ..limits import Limits
from ..runtime.hub import AppendHub
from ..runtime.threads import LoopThreads
from .codec import OK, PONG, Push, RespError, encode, error, translate
from .commands import COMMANDS, NO_AUTH, NO_REPLY, arity_error, text

try:
    import hiredis
except ImportError:  # pragma: no cover - the extra is installed by make test
    HIREDIS = False
else:
    HIREDIS = True

logger = logging.getLogger("tidelog.resp")

DEFAULT_PORT = 7379
READ_BYTES = 1 << 16
MAX_FRAME = 64 << 20  # a request larger than this closes the connection
MAX_INLINE = 64 << 10
SUBSCRIBE_VISIBILITY_S = 30.0  # the lease on a pushed message, extended while the client holds it
CLOSE_TIMEOUT_S = 5.0  # how long stopping waits for a client handler to end
DEFERRED = frozenset((b"xadd", b"publish"))
SETTLE = frozenset((b"ACK", b"NACK", b"BACK", b"DACK"))


class ConnectionClosed(Exception):
    """The client hung up."""


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
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="tidelog-resp-writer")
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
                results = await loop.run_in_executor(self.executor, self._write, items)
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
        self.executor.shutdown(wait=False)


class RespServer:
    """The state one Redis-protocol listener shares among its connections."""

    def __init__(
        self, log: Log, token: str | None = None, hub: AppendHub | None = None, limits: Limits | None = None
    ):
        if not HIREDIS:
            raise ConfigurationError("the Redis protocol front needs hiredis: pip install 'tidelog[resp]'")
        self.log = log
        self.streams = Streams(log)
        self.producer = log.producer()
        self.token = token or None
        self.limits = limits or Limits()
        # Store calls; a command's round trip to them is a queue put and one
        # call_soon_threadsafe back (LoopThreads), not a pool's chained futures.
        self.threads = LoopThreads(8, "tidelog-resp")
        self.connections: set[Connection] = set()
        self.handlers: set[asyncio.Task[Any]] = set()  # one a connection, awaited when we stop
        self.ids = itertools.count(1)
        self.blocked = 0
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
        if sock is not None:  # bound by `serve` (server/listeners.py)
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
            conn.transport_writer.close()
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

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
            if conn.read_task is not None:
                conn.read_task.cancel()
            writer.close()


class Connection:
    """One client: reads frames, runs commands in order, writes replies."""

    def __init__(self, server: RespServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.reader = reader
        self.transport_writer = writer
        self.parser = hiredis.Reader()
        self.inline = b""
        self.mid_frame = False  # hiredis holds part of a frame: the next bytes are not inline
        self.read_task: asyncio.Future | None = None
        self.out: list[bytes] = []
        self.outstanding: list[Deferred] = []
        self.id = next(server.ids)
        self.proto = 2
        self.name: str | None = None
        self.lib: dict[str, str] = {}
        self.authenticated = server.token is None
        self.closing = False

    # reading -----------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self.inline or (data[:1] != b"*" and not self.mid_frame):
            self.inline += data
            if len(self.inline) > MAX_INLINE and b"\n" not in self.inline:
                raise RespError("ERR Protocol error: too big inline request")
            return
        self.parser.feed(data)
        self.mid_frame = True
        if self.parser.len() > MAX_FRAME:
            raise RespError("ERR Protocol error: request larger than 64 MiB")

    def next_command(self) -> list[bytes] | None:
        """The next complete command in the buffers, None when there is none yet."""
        while self.inline:
            nl = self.inline.find(b"\n")
            if nl < 0:
                return None
            line, rest = self.inline[:nl].rstrip(b"\r"), self.inline[nl + 1 :]
            self.inline = b""
            if rest:
                self._feed(rest)
            parts = line.split()
            if parts:
                return parts
        try:
            frame = self.parser.gets()
        except hiredis.ProtocolError as e:
            raise RespError(f"ERR Protocol error: {e}") from None
        if frame is False:
            return None
        # hiredis consumes a frame's parts as they come, so an empty buffer
        # is no proof of a frame boundary: only a whole frame with nothing
        # after it is.
        self.mid_frame = self.parser.has_data()
        if type(frame) is not list or not frame or not all(type(a) is bytes for a in frame):
            raise RespError("ERR Protocol error: expected an array of bulk strings")
        return frame

    async def _read(self) -> None:
        if self.read_task is not None:
            task, self.read_task = self.read_task, None
            data = await task
        else:
            data = await self.reader.read(READ_BYTES)
        if not data:
            raise ConnectionClosed
        self._feed(data)

    async def wait_or_input(self, fut: asyncio.Future, timeout: float | None) -> None:
        """Wait for `fut` (or `timeout`), taking in what the client sends meanwhile.

        Bytes that arrive are buffered for later commands; a hang-up raises
        ConnectionClosed at once, so a blocked client that leaves is noticed.
        """
        self._send()
        if self.read_task is None:
            self.read_task = asyncio.ensure_future(self.reader.read(READ_BYTES))
        done, _ = await asyncio.wait(
            {fut, self.read_task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if self.read_task in done:
            await self._read()

    # writing -----------------------------------------------------------------

    def _send(self) -> None:
        if self.out:
            self.transport_writer.write(b"".join(self.out))
            self.out.clear()

    async def _settle_outstanding(self) -> None:
        while self.outstanding:
            d = self.outstanding.pop(0)
            try:
                results = await d.future
                self.out.append(encode(d.reply(results[d.index]), self.proto))
            except Exception as e:  # noqa: BLE001 - the request's own error reply
                self.out.append(error(translate(e)))

    # commands ----------------------------------------------------------------

    async def serve(self) -> None:
        while not self.closing:
            try:
                command = self.next_command()
            except RespError as e:
                self.out.append(error(e.line))
                break  # a malformed frame closes the connection, as Redis does
            if command is None:
                await self._settle_outstanding()
                self._send()
                await self.transport_writer.drain()
                try:
                    await self._read()
                except RespError as e:
                    self.out.append(error(e.line))
                    break
                continue
            await self.execute(command)
        await self._settle_outstanding()
        self._send()
        await self.transport_writer.drain()

    async def execute(self, command: list[bytes]) -> None:
        name = command[0].lower()
        spec = COMMANDS.get(text(name))
        try:
            if spec is None:
                raise RespError(_unknown(command))
            handler, arity, _ = spec
            n = len(command)
            if (arity > 0 and n != arity) or (arity < 0 and n < -arity):
                raise arity_error(text(name))
            if not self.authenticated and text(name) not in NO_AUTH:
                raise RespError("NOAUTH Authentication required.")
            if name not in DEFERRED:
                await self._settle_outstanding()
            reply = await handler(self, command[1:])
        except ConnectionClosed:
            raise
        except Exception as e:  # noqa: BLE001 - a Redis error reply; the connection stays usable
            if not isinstance(e, TidelogError | RespError):
                logger.exception("RESP command %s failed", text(name))
            self.out.append(error(translate(e)))
            return
        if type(reply) is Deferred:
            self.outstanding.append(reply)
        elif reply is not NO_REPLY:
            self.out.append(encode(reply, self.proto))

    async def wait_for(self, topics: Sequence[str], read: Callable[[], list], block_ms: int | None) -> list:
        """Run `read` in the pool; with BLOCK, again after each append to `topics`
        until it finds something or the time is up (0 waits for ever)."""
        if block_ms is None:
            return await self.server.run(read)
        loop = self.server.loop
        deadline = None if block_ms == 0 else loop.time() + block_ms / 1000
        keys = [(topic, None) for topic in topics]
        self.server.blocked += 1
        try:
            while True:
                woken = self.server.hub.register(keys)
                try:
                    found = await self.server.run(read)
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

    # SUBSCRIBE: one message at a time ----------------------------------------

    async def subscribe(self, topic: str) -> None:
        """Push one message of `topic`'s queue group at a time; each is answered
        ACK, NACK (again at the front), BACK (behind those waiting) or DACK
        <seconds> (after a delay). A hang-up releases the message to the front.

        Framed as Redis pub/sub is, so Redis clients' pub/sub APIs read it:
        ["subscribe", channel, 1] first, then ["message", channel, value] a
        message, ["unsubscribe", channel, 0] at the end; an answer is +OK.
        """
        await self._settle_outstanding()
        queue = await self.server.run(
            lambda: self.server.log.queue(topic, visibility_timeout=SUBSCRIBE_VISIBILITY_S)
        )
        channel = topic.encode()
        self.out.append(encode(Push([b"subscribe", channel, 1]), self.proto))
        while not self.closing:
            delivery = await self._next_delivery(queue, topic)
            if delivery is None:
                return
            self.out.append(encode(Push([b"message", channel, delivery.value]), self.proto))
            if not await self._settled(queue, delivery):
                return

    async def _next_delivery(self, queue: Any, topic: str) -> Any:
        run, clock = self.server.run, self.server.log.clock
        while True:
            woken = self.server.hub.register([(topic, None)])
            try:
                got, next_due = await run(queue.poll, 1)
                if got:
                    return got[0]
                timeout = None if next_due is None else max(0.001, (next_due - clock()) / 1000)
                await self.wait_or_input(woken, timeout)
            finally:
                self.server.hub.unregister([(topic, None)], woken)
            while (command := self.next_command()) is not None:
                word = command[0].upper()
                if word == b"UNSUBSCRIBE":
                    self.out.append(encode(Push([b"unsubscribe", topic.encode(), 0]), self.proto))
                    return None
                if word == b"QUIT":
                    self.out.append(OK)
                    self.closing = True
                    return None
                if word == b"PING":
                    self.out.append(PONG)
                else:
                    self.out.append(
                        error("ERR no message is out: only PING, UNSUBSCRIBE and QUIT while subscribed")
                    )

    async def _settled(self, queue: Any, delivery: Any) -> bool:
        """Wait for the client's answer to a pushed message; False ends the subscription."""
        run = self.server.run
        never = self.server.loop.create_future()
        try:
            while True:
                command = self.next_command()
                if command is None:
                    try:
                        await self.wait_or_input(never, SUBSCRIBE_VISIBILITY_S * 2 / 3)
                    except ConnectionClosed:
                        await self._release(queue, delivery)
                        raise
                    if self.next_command_ready():
                        continue
                    # The client holds the message: keep its lease alive.
                    delivery = await run(queue.extend, delivery, SUBSCRIBE_VISIBILITY_S)
                    continue
                word = command[0].upper()
                if word in SETTLE:
                    try:
                        await self._settle(queue, delivery, command)
                    except (RespError, InvalidRequest) as e:
                        # A bad answer (DACK past its bound): the message is
                        # still the client's to answer.
                        self.out.append(error(translate(e)))
                        continue
                    except LeaseLost as e:
                        self.out.append(error(translate(e)))
                        return True
                    self.out.append(OK)
                    return True
                if word in (b"QUIT", b"UNSUBSCRIBE"):
                    await self._release(queue, delivery)
                    if word == b"QUIT":
                        self.out.append(OK)
                        self.closing = True
                    else:
                        self.out.append(encode(Push([b"unsubscribe", queue.topic.encode(), 0]), self.proto))
                    return False
                if word == b"PING":
                    self.out.append(PONG)
                    continue
                self.out.append(error("ERR answer the message with ACK, NACK, BACK or DACK <seconds>"))
        finally:
            never.cancel()

    def next_command_ready(self) -> bool:
        return bool(self.inline) or self.mid_frame

    async def _settle(self, queue: Any, delivery: Any, command: list[bytes]) -> None:
        word = command[0].upper()
        if len(command) != (2 if word == b"DACK" else 1):
            raise arity_error(text(word).lower())
        run = self.server.run
        if word == b"ACK":
            await run(queue.ack, delivery)
        elif word == b"NACK":
            await run(queue.nack, delivery)
        elif word == b"BACK":
            await run(lambda: queue.nack(delivery, back=True))
        else:
            try:
                seconds = float(command[1])
            except ValueError:
                raise RespError("ERR value is not a valid float") from None
            await run(lambda: queue.nack(delivery, delay=seconds))

    async def _release(self, queue: Any, delivery: Any) -> None:
        try:
            await self.server.run(queue.nack, delivery)
        except TidelogError:
            pass  # the lease ended already: the record is due again anyway


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


async def start_resp_server(
    log: Log,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    hub: AppendHub | None = None,
    reuse_port: bool = False,
    limits: Limits | None = None,
    sock: socket.socket | None = None,
) -> asyncio.Server:
    """Listen for the Redis protocol on host:port (0 picks a free port; the
    bound one is `server.sockets[0].getsockname()[1]`). With a token, clients
    must AUTH with it (any user name but `default` is refused). `hub`: a
    running wake-up hub on the same log to share (the HTTP front's).
    `reuse_port`: listen beside other processes on the same port
    (SO_REUSEPORT). `limits`: the bounds of server/limits.py (defaults when
    None). `sock`: a listening socket to accept on instead of binding
    host:port (`tidelog serve` binds its ports first, server/listeners.py)."""
    return await RespServer(log, token, hub, limits).start(host, port, reuse_port, sock)
