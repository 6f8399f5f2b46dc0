"""The Kafka listener: connections, frames, limits, and the hand-off to each API.

    server = await start_kafka_server(log, host="127.0.0.1", port=9092)

asyncio streams. A frame is a size (i32) and that many bytes; the size is
checked against `Limits.max_request` (Kafka's `socket.request.max.bytes`)
before anything is read for it, and, before a client has authenticated
(`--token`), against the few KiB a SASL exchange needs (Kafka's
`sasl.server.max.receive.size`). Requests of one connection are answered in
order, one at a time, as a Kafka broker does; store calls run on threads,
never on the event loop. Writes go through the group-commit writer (one
transaction for the produce requests of every connection waiting together),
and a Fetch waits for an append (the hub's wake-ups), not on a tick.

A frame that does not decode, an API or version the listener does not serve
(but ApiVersions, answered UNSUPPORTED_VERSION with the table, so the client
can pick again), or a request before authentication that is not part of it,
closes the connection, as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Any

from ...log import Log
from ..limits import Limits
from ..runtime.hub import AppendHub
from ..runtime.writer import GroupCommitWriter
from ..throttle import AuthThrottle
from .broker import Broker, Session
from .handlers import HANDLERS
from .sasl import raw_token
from .wire import (
    API_VERSIONS,
    APIS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    MalformedRequest,
    Request,
    UnsupportedRequest,
    api_keys,
    build,
    encode_response,
    parse_request,
    response_class,
)

logger = logging.getLogger("tidelog.kafka")

DEFAULT_PORT = 9092
# What a client may send before it has authenticated: ApiVersions and the
# SASL exchange, a few hundred bytes (Kafka's sasl.server.max.receive.size
# is 512 KiB; a PLAIN token needs far less).
PRE_AUTH_MAX_REQUEST = 64 << 10
# Requests a connection may send before it authenticates: a client sends ApiVersions, a
# SaslHandshake and a SaslAuthenticate (again after an UNSUPPORTED_VERSION); one that goes
# on sending costs the server work for nothing a client needs.
PRE_AUTH_MAX_REQUESTS = 16
CLOSE_TIMEOUT_S = 5.0
MAX_IN_FLIGHT = 32  # produce requests of one connection taken in before the first is answered
PRODUCE_KEY = b"\0\0"


class CloseConnection(Exception):
    """End this client's connection (after sending what is queued)."""


class KafkaServer:
    """A listener: its broker state, its connections and their handlers."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.connections: set[Connection] = set()
        self.handlers: set[asyncio.Task[Any]] = set()
        self.refused = 0  # connections refused at max_connections

    async def start(
        self,
        host: str,
        port: int,
        reuse_port: bool = False,
        sock: socket.socket | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> asyncio.Server:
        broker = self.broker
        if broker.own_hub:
            broker.hub.start()
        if broker.own_writer:
            broker.writer.start()
        # Under TLS a client has the handshake deadline for the TLS handshake too: one that
        # opens a connection and says nothing holds no slot past it.
        secure: dict[str, Any] = {}
        if tls is not None:
            secure = {"ssl": tls, "ssl_handshake_timeout": broker.limits.handshake_timeout}
        if sock is not None:  # bound by `serve` (server/listeners.py)
            server = await asyncio.start_server(self._handle, sock=sock, **secure)
        else:
            server = await asyncio.start_server(
                self._handle, host, port, reuse_port=reuse_port or None, **secure
            )
        broker.bind(host, server.sockets[0].getsockname()[1])
        _states[id(server)] = self
        return server

    async def aclose(self) -> None:
        """Hang up on every client, wait for their handlers, stop what is ours."""
        for conn in list(self.connections):
            conn.writer.close()
        if self.handlers:
            _, late = await asyncio.wait(set(self.handlers), timeout=CLOSE_TIMEOUT_S)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=CLOSE_TIMEOUT_S)
        broker = self.broker
        if broker.own_hub:
            broker.hub.stop()
        if broker.own_writer:
            await broker.writer.stop()
        broker.threads.stop(wait=False)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.connections) >= self.broker.limits.max_connections:
            # Refused at once, never queued (Kafka's max.connections).
            self.refused += 1
            writer.close()
            return
        conn = Connection(self.broker, reader, writer)
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self.handlers.add(task)
            task.add_done_callback(self.handlers.discard)
        try:
            await conn.serve()
        except (CloseConnection, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except Exception:  # never let one client disturb the others
            logger.exception("Kafka connection from %s failed", conn.session.peer)
        finally:
            self.connections.discard(conn)
            if writer.transport.get_write_buffer_size():
                # Answers the client never took: close() would wait for them to drain,
                # holding the socket and its kernel buffers for as long as it does not read.
                writer.transport.abort()
            else:
                writer.close()


class Connection:
    """One client: reads frames, answers each request in order."""

    def __init__(self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        address = peer if isinstance(peer, tuple) else ("?", 0)
        self.session = Session(broker, f"{address[0]}:{address[1]}", str(address[0]))

    async def serve(self) -> None:
        """Read frames until the client leaves; answer each in order.

        Produce requests are taken in while the ones before them commit
        (up to MAX_IN_FLIGHT, and max_request bytes in all): their records
        go to the group-commit writer in the order they came, so they land
        in that order, and one commit carries several of them. Any other
        request waits until every answer before it is sent.
        """
        loop = asyncio.get_running_loop()
        limits = self.broker.limits
        session = self.session
        started = self.started = loop.time()
        pre_auth = 0  # requests read before authenticating
        self.answers: asyncio.Queue[tuple[asyncio.Task[bytes | None], int]] = asyncio.Queue()
        self.in_flight = 0  # bytes of the produce requests taken in and not yet answered
        responder = asyncio.ensure_future(self._respond())
        try:
            while not responder.done():
                if session.authenticated:
                    timeout = limits.idle_timeout or None
                    bound = limits.max_request
                else:  # the SASL deadline counts from the connection's start
                    timeout = started + limits.handshake_timeout - loop.time()
                    bound = min(limits.max_request, PRE_AUTH_MAX_REQUEST)
                    pre_auth += 1
                    # Checked here too: requests already buffered are read without waiting,
                    # so the timeout below would never fire for a client that keeps sending.
                    if timeout <= 0 or pre_auth > PRE_AUTH_MAX_REQUESTS:
                        logger.info(
                            "Kafka client %s did not authenticate within %gs or %d requests: closed",
                            session.peer,
                            limits.handshake_timeout,
                            PRE_AUTH_MAX_REQUESTS,
                        )
                        raise CloseConnection
                async with asyncio.timeout(timeout):
                    head = await self.reader.readexactly(4)
                    size = int.from_bytes(head, "big", signed=True)
                    # Checked before a byte of the frame is read or allocated.
                    if size < 0 or size > bound:
                        logger.info(
                            "Kafka client %s announced a %d-byte request (at most %d): closed",
                            session.peer,
                            size,
                            bound,
                        )
                        raise CloseConnection
                    if self.in_flight + size > bound or self.answers.qsize() >= MAX_IN_FLIGHT:
                        await self.answers.join()
                    frame = await self.reader.readexactly(size)
                if session.authenticated and frame[:2] == PRODUCE_KEY and not session.sasl_raw:
                    self.in_flight += size
                    self.answers.put_nowait((asyncio.ensure_future(self.answer(frame)), size))
                    continue
                await self.answers.join()
                if responder.done():
                    break
                if session.sasl_raw:  # after a v0 handshake: a bare token, a bare answer
                    answer, ok = raw_token(session, frame)
                    self.writer.write(answer)
                    await self._drain()
                    if not ok:
                        raise CloseConnection
                    continue
                await self._send(await self.answer(frame))
        finally:
            responder.cancel()
            while not self.answers.empty():  # records taken in are written all the same
                task, _ = self.answers.get_nowait()
                await asyncio.gather(task, return_exceptions=True)
        responder.result()  # a request that closed the connection

    async def _respond(self) -> None:
        """Send the pipelined produce answers, in the order their requests came."""
        while True:
            task, size = await self.answers.get()
            try:
                await self._send(await task)
            except BaseException:
                self.writer.close()  # ends the reading loop too
                raise
            finally:
                self.in_flight -= size
                self.answers.task_done()

    async def _send(self, response: bytes | None) -> None:
        if self.writer.is_closing():  # the client left while its request ran
            raise CloseConnection
        if response is not None:
            self.writer.write(response)
            await self._drain()
        if self.session.close_after:  # a failed authentication: answered, then closed
            raise CloseConnection

    async def _drain(self) -> None:
        """Wait for the client to take what was written, within the write deadline:
        the handshake's before authentication, `Limits.write_deadline` after. A client that
        does not read is closed (its buffers and its connection slot freed)."""
        limits = self.broker.limits
        if self.session.authenticated:
            deadline = limits.write_deadline
        else:
            deadline = self.started + limits.handshake_timeout - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(max(0.0, deadline)):
                await self.writer.drain()
        except TimeoutError:
            logger.info("Kafka client %s took no answer within %.3g s: closed", self.session.peer, deadline)
            self.writer.transport.abort()
            raise CloseConnection from None

    async def answer(self, frame: bytes) -> bytes | None:
        try:
            request = parse_request(frame)
        except UnsupportedRequest as e:
            if e.api_key == API_VERSIONS:
                return unsupported_api_versions(e.correlation_id)
            logger.info(
                "Kafka client %s sent API key %d version %d, which is not served: closed",
                self.session.peer,
                e.api_key,
                e.version,
            )
            raise CloseConnection from None
        except MalformedRequest as e:
            logger.info("Kafka client %s sent a malformed request (%s): closed", self.session.peer, e)
            raise CloseConnection from None
        if not self.session.authenticated and request.api_key not in (
            API_VERSIONS,
            SASL_HANDSHAKE,
            SASL_AUTHENTICATE,
        ):
            logger.info(
                "Kafka client %s sent %s before authenticating: closed",
                self.session.peer,
                APIS[request.api_key][0],
            )
            raise CloseConnection
        values = await HANDLERS[request.api_key](self.session, request)
        if values is None or isinstance(values, bytes):  # acks=0 (no response), or a frame written
            return values
        return encode_response(request, build(response_class(request.api_key, request.version), values))


def unsupported_api_versions(correlation_id: int) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION and the table: the client picks again."""
    request = Request(API_VERSIONS, 0, correlation_id, None, None)
    return encode_response(
        request, build(response_class(API_VERSIONS, 0), {"error_code": 35, "api_keys": api_keys()})
    )


# asyncio.Server takes no attributes: each listener's state is found by the server's id.
_states: dict[int, KafkaServer] = {}


def kafka_state(server: asyncio.AbstractServer) -> KafkaServer:
    return _states[id(server)]


async def stop_kafka_server(server: asyncio.AbstractServer) -> None:
    """Stop listening, close the clients, end the writer if it is ours."""
    server.close()
    state = _states.pop(id(server), None)
    if state is not None:
        await state.aclose()
    await server.wait_closed()


async def start_kafka_server(
    log: Log,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    hub: AppendHub | None = None,
    writer: GroupCommitWriter | None = None,
    reuse_port: bool = False,
    limits: Limits | None = None,
    advertised_host: str | None = None,
    sock: socket.socket | None = None,
    throttle: AuthThrottle | None = None,
    tls: ssl.SSLContext | None = None,
) -> asyncio.Server:
    """Listen for Kafka's protocol on host:port (0 picks a free port).

    With a token, clients authenticate with SASL PLAIN (any user name, the
    token as password). `hub` and `writer`: the HTTP front's wake-ups and
    group-commit writer to share (own ones when None). `advertised_host`:
    the host clients are told to connect to (default: `host`). `sock`: a
    listening socket to accept on instead of binding (`serve` binds every
    port first: server/listeners.py). `throttle`: failed logins counted with
    the other fronts' (an own one when None). `tls`: serve TLS (clients' SSL, and
    SASL_SSL with a token; a plaintext client's connection ends in the handshake).
    """
    broker = Broker(log, token, hub, writer, limits, advertised_host, throttle)
    return await KafkaServer(broker).start(host, port, reuse_port, sock, tls)
