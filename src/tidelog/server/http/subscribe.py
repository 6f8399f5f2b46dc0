"""miniqueue's subscribe: a queue group's records pushed one at a time.

    ws /subscribe/{topic}?group=G          (group defaults to the topic)
    POST /subscribe/{topic}?group=G        (HTTP/2: the same, both ways in one request; duplex.py)
    client: INIT
    server: {"msg": "<base64 value>", "dackCount": 0, "partition": 0, "offset": 7, "deliveryCount": 1}
    client: ACK | NACK | BACK | DACK <seconds>
    server: the next message, when there is one
    client: EXTEND                         (keep the message: no answer, unless its lease was lost)

A command is the bare word or, as miniqueue's clients send it, a JSON string
(`"INIT"`, `"DACK 5"`, quotes included). ACK finishes the record; NACK makes
it available again at the front, BACK behind the records waiting now, DACK
after a delay (`dackCount` counts the DACKs this server saw for the record).
While the client holds a message its lease is extended, for at most the
server's `max_hold` (Limits) after the message or the client's last EXTEND:
a client that says nothing for that long (frozen, or not reading its
socket) loses the message to another consumer, is told so if its socket
still drains, and is disconnected. A client that disconnects releases its
message to the front. Errors come as `{"error": "..."}`; a malformed
command changes nothing and the message stays with the client.

The socket and the HTTP stream differ in one way, each as its clients
expect: on the socket a command said while no message is out is answered
with an error at once; the stream reads commands in order, one after each
answer, as miniqueue does, so a client may send several ahead.

All subscribers of one queue group share a `Pump` (pumps.py): one task that
applies every waiting answer and leases a record for every waiting
subscriber in one trip to the pumps' own thread, so the cost of a trip is
shared by all of them.

Each subscriber keeps the next record leased ahead while the client holds
one (a prefetch of one: at most two leases a subscriber, the answer to the
first applied in the same round as the lease of the one after). An ACK is
answered with that record at once, without waiting for the ACK's commit; an
error the ACK meets (a lease lost) then comes after that message. NACK, BACK
and DACK change what is next, so the record leased ahead goes back to the
front uncounted (the store's "return") in the round that applies the answer,
and the next is leased after it. A record leased ahead goes back the same
way when the client disconnects, and its lease is extended with the held one.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from ...config import check_name
from ...errors import InvalidRequest, LeaseLost, TidelogError
from ...queues import Delivery
from .context import Context
from .errors import status_for
from .pumps import EXTEND_EVERY_S, Pump, Settle, leased

if TYPE_CHECKING:
    from .connections import Connections

log = logging.getLogger("tidelog.server")

ANSWER = "answer the message with ACK, NACK, BACK or DACK <seconds> (EXTEND keeps it)"
# How long a subscriber that held a message too long is given to take the
# news; a socket that does not drain is not waited for longer.
GOODBYE_S = 1.0
# Commands read ahead of the one being answered: a client that sends faster
# than it is answered waits in its own socket, not in this process's memory.
READ_AHEAD = 64


# the socket ------------------------------------------------------------------------


class Gone(Exception):
    """The client disconnected."""


class HeldTooLong(Exception):
    """The client held a message for max_hold without a word: it lost it."""


class TooManyInvalid(Gone):
    """The client sent max_invalid_commands invalid commands in a row: closed."""


def command_text(raw: str) -> str:
    """A command as the bare word, also when sent as a JSON string (miniqueue's form)."""
    text = raw.strip()
    if text.startswith('"'):
        try:
            decoded = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text  # answered as a malformed command
        if isinstance(decoded, str):
            return decoded.strip()
    return text


class Channel(Protocol):
    """How a subscriber talks to its client: a WebSocket, or an HTTP/2 stream."""

    # True: commands queue and are read one after each answer (the stream);
    # False: a command while no message is out is refused at once (the socket).
    pipelined: bool

    async def receive(self) -> str | None:
        """The next command's text; None once the client said it will say no
        more (it still reads); raises Gone when it disconnected."""
        ...

    async def send(self, line: bytes) -> None:
        """Send one JSON value; raises on a closed connection."""
        ...

    async def accepted(self) -> None:
        """INIT passed its checks: the stream may start."""
        ...

    async def refuse(self, line: bytes, status: int) -> None:
        """Answer a refused INIT and end the conversation."""
        ...

    def abandon(self) -> None:
        """The client takes nothing sent to it: drop its connection if the
        conversation has it to itself."""
        ...


class SocketChannel:
    """The WebSocket: one text frame a command, one a message."""

    pipelined = False

    def __init__(self, ws: WebSocket, connections: Connections | None = None):
        self.ws = ws
        self.connections = connections

    async def receive(self) -> str | None:
        frame = await self.ws.receive()
        if frame["type"] == "websocket.disconnect":
            raise Gone
        text = frame.get("text")
        if text is None:
            text = (frame.get("bytes") or b"").decode("utf-8", errors="replace")
        return str(text)

    async def send(self, line: bytes) -> None:
        await self.ws.send_text(line.decode())

    async def accepted(self) -> None:
        pass

    async def refuse(self, line: bytes, status: int) -> None:
        await self.send(line)
        await self.ws.close(1008)

    def abandon(self) -> None:
        # A WebSocket whose sends do not drain cannot be closed politely
        # (the close frame waits behind them): the connection guard shuts
        # the socket down.
        if self.connections is not None:
            self.connections.abort(self.ws.scope.get("client"))


class Subscriber:
    """One client: waits for INIT, then push, answer, push, ...

    One reader task reads the channel for the connection's whole life:
    answers go to the inbox and a disconnect ends whatever the main loop
    waits for. On the socket, anything said while no message is out is
    answered with an error at once; on a pipelined stream it waits its turn.
    Each step of the main loop awaits one future, so a message costs no new
    task.
    """

    def __init__(self, channel: Channel, ctx: Context):
        self.channel = channel
        self.ctx = ctx
        self.inbox: deque[str] = deque()
        self.gone = False
        self.said_all = False  # the client will send no more commands (a stream's body ended)
        self.waiting = False  # True while no message is out (after INIT)
        self._waiter: asyncio.Future | None = None
        self._wants_command = False  # the main loop waits for a command, not a delivery
        self.owed: deque[asyncio.Future] = deque()  # answers sent to the pump, not yet told
        self.max_hold = ctx.settings.limits.max_hold
        self._hold: asyncio.TimerHandle | None = None  # runs while the client holds a message
        self._serving: asyncio.Task | None = None  # the main loop's task, while it serves messages
        self.held_too_long = False
        self.invalid = 0  # invalid commands in a row
        self.max_invalid = ctx.settings.limits.max_invalid_commands
        self._room = asyncio.Event()  # set when the inbox has room again (READ_AHEAD)

    def _wake(self, exc: BaseException | None = None) -> None:
        """End the main loop's wait: with `exc` (a disconnect) whatever it
        waits for; without, only a wait for a command. A wait for a delivery
        is the pump's future: a command said meanwhile (sent ahead on the
        stream) waits in the inbox for the message it answers."""
        w = self._waiter
        if w is None or w.done():
            return
        if exc is not None:
            w.set_exception(exc)
        elif self._wants_command:
            w.set_result(None)

    async def _read(self) -> None:
        try:
            while True:
                raw = await self.channel.receive()
                if raw is None:
                    # The client said all it will: once its commands are
                    # answered, the next one it owes ends the conversation.
                    self.said_all = True
                    if self._wants_command:
                        self._wake(Gone())
                    continue
                text = command_text(raw)
                if self.waiting and not self.channel.pipelined:
                    await self.invalid_command(f"no message is out yet: {text[:40]!r} changes nothing")
                else:
                    while len(self.inbox) >= READ_AHEAD:
                        self._room.clear()
                        await self._room.wait()
                    self.inbox.append(text)
                    self._wake()
        except Exception:  # a disconnect, or the connection broke: the same
            pass
        finally:
            self.gone = True
            self._wake(Gone())

    async def command(self, timeout: float | None = None) -> str | None:
        """The client's next command; None when `timeout` passed first.
        Gone once the client disconnected, also with commands unread: no
        one is there to take their answers."""
        if self.gone:
            raise Gone
        if not self.inbox:
            if self.gone or self.said_all:
                raise Gone
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            self._wants_command = True
            timer = loop.call_later(timeout, self._wake) if timeout is not None else None
            try:
                await waiter
            finally:
                self._waiter = None
                self._wants_command = False
                if timer is not None:
                    timer.cancel()
            if not self.inbox:
                return None
        self._room.set()
        return self.inbox.popleft()

    async def send(self, payload: dict[str, Any]) -> None:
        try:
            await self.channel.send(orjson.dumps(payload))
        except Exception:  # the client went away mid-send
            self.gone = True
            raise Gone from None

    async def error(self, message: str) -> None:
        await self.send({"error": message})

    async def invalid_command(self, message: str) -> None:
        """Answer an invalid command (a client waits for each answer); the
        max_invalid_commands-th in a row is answered with why, and closes."""
        self.invalid += 1
        if self.invalid >= self.max_invalid:
            await self.error(f"{message}; {self.invalid} invalid commands in a row: closing")
            self.gone = True
            raise TooManyInvalid
        await self.error(message)

    def valid_command(self) -> None:
        self.invalid = 0

    async def run(self, topic: str, group: str | None) -> None:
        reader = asyncio.ensure_future(self._read())
        try:
            while (text := await self.command()) != "INIT":
                await self.invalid_command(f"send INIT to start, not {(text or '')[:40]!r}")
            self.valid_command()
            # Names are checked after INIT, like the topic's existence, so every
            # refusal reaches a client the same way: its INIT is answered, then closed.
            try:
                topic = check_name("topic", topic)
                group = check_name("group", group or topic)
                pump = await self.ctx.pumps.take(topic, group)
            except TidelogError as e:
                await self.channel.refuse(orjson.dumps({"error": str(e)}), status_for(e))
                return
            await self.channel.accepted()
            self._serving = task = asyncio.current_task()
            try:
                await self._serve(pump)
            except asyncio.CancelledError:
                if not self.held_too_long or task is None:
                    raise
                # Our own cancel (`_held_too_long`): the message is released.
                task.uncancel()
                self._serving = None
                await self._goodbye()
                raise HeldTooLong from None
            finally:
                self._serving = None
                self._stop_hold()
                self.ctx.pumps.give_back(pump)
        finally:
            reader.cancel()

    # the hold ----------------------------------------------------------------------

    def _start_hold(self, pump: Pump) -> None:
        """The client holds a message from now: max_hold without a word loses it."""
        self._stop_hold()
        loop = asyncio.get_running_loop()
        self._hold = loop.call_later(self.max_hold, self._held_too_long, pump)

    def _stop_hold(self) -> None:
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None

    def _held_too_long(self, pump: Pump) -> None:
        """max_hold passed with no word from the client: release its message
        (and the one leased ahead) now, then end the main loop wherever it
        waits -- for a command, or for a send into a socket that does not
        drain -- by cancelling it. A timer, not a check in the loop: the loop
        may be stuck in that send."""
        self._hold = None
        if self._serving is None:
            return
        me = id(self)
        self.held_too_long = True
        d = pump.held.pop(me, None)
        if d is not None:
            pump.release(d)
            log.info(
                "a subscriber of %s/%s held %s:%s for %gs without a word (max_hold): released",
                pump.queue.topic,
                pump.queue.group,
                d.partition,
                d.offset,
                self.max_hold,
            )
        pump.unlease_ahead(pump.ahead.pop(me, None))
        self._serving.cancel()

    async def _goodbye(self) -> None:
        """Tell a client that lost its message why, if its socket takes it soon."""
        line = orjson.dumps(
            {
                "error": f"the message was held {self.max_hold:g}s without ACK, NACK, BACK, DACK"
                " or EXTEND (the server's max_hold): it went back to the queue; reconnect to go on"
            }
        )
        try:
            await asyncio.wait_for(self.channel.refuse(line, 408), GOODBYE_S)
        except TimeoutError:  # its socket does not drain
            self.channel.abandon()
        except Exception:  # noqa: BLE001 - it is gone: nothing more to say
            pass

    async def _serve(self, pump: Pump) -> None:
        me = id(self)
        ahead = pump.next()  # the first record
        answer: asyncio.Future | None = None
        try:
            while True:
                d = await self._next(pump, ahead, answer)
                pump.held[me] = d
                self._start_hold(pump)
                # Lease the one after now, in the round that applies this
                # one's answer at the latest: an ACK is answered without
                # waiting for its commit.
                ahead = pump.ahead[me] = pump.next()
                message = {
                    "msg": base64.b64encode(d.value).decode("ascii"),
                    "dackCount": pump.dack_count(d),
                    "partition": d.partition,
                    "offset": d.offset,
                    "deliveryCount": d.delivery_count,
                }
                try:
                    await self.send(message)
                except Gone:
                    pump.held.pop(me, None)
                    pump.release(d)
                    raise
                settle = await self._answer(pump, d)
                ahead = pump.ahead[me]  # (a lost lease ahead was replaced)
                if settle[0] != "ACK":
                    # NACK, BACK and DACK change what comes next: the record
                    # leased ahead goes back uncounted, then the next is
                    # leased, all in the round that applies this answer.
                    answer = pump.settle(settle)
                    pump.unlease_ahead(ahead)
                    ahead = pump.ahead[me] = pump.next()
                else:
                    answer = pump.settle(settle)
                pump.held.pop(me, None)
        finally:
            if not self.held_too_long:  # else that ahead is given back already
                pump.unlease_ahead(pump.ahead.pop(me, ahead))

    async def _next(self, pump: Pump, wanted: asyncio.Future, answer: asyncio.Future | None) -> Delivery:
        """The next delivery; how the last answer went is told before it, or
        (when the next was leased ahead and the answer is not applied yet) after it."""
        self.waiting = True  # from here, what the client says is told "no message is out"
        try:
            if answer is not None:
                self.owed.append(answer)
            if not wanted.done():
                # The next is not leased yet: the round that leases it applies
                # the answers first, so they are told in order.
                for owed in list(self.owed):
                    await owed
            await self._tell()
            while self.inbox and not self.channel.pipelined:  # said after its answer: an answer to nothing
                text = self.inbox.popleft()
                self._room.set()
                await self.invalid_command(f"no message is out yet: {text[:40]!r} changes nothing")
            if self.gone:
                raise Gone
            if wanted.done():
                return wanted.result()  # leased ahead
            self._waiter = wanted  # a disconnect ends this wait
            try:
                return await wanted
            finally:
                self._waiter = None
        finally:
            self.waiting = False

    async def _tell(self) -> None:
        """Report the errors of answers applied so far, in order."""
        while self.owed and self.owed[0].done():
            result = self.owed.popleft().result()
            if isinstance(result, BaseException):
                await self.error(str(result))

    async def _answer(self, pump: Pump, d: Delivery) -> Settle:
        """Wait for ACK, NACK, BACK or DACK <s>; returns it as a settle.
        EXTEND (the client's) and a silence of EXTEND_EVERY_S (the server's)
        extend the lease; only the client's restarts the max_hold clock."""
        try:
            while True:
                text = await self.command(timeout=EXTEND_EVERY_S)
                extend = text is None  # the client still holds it: keep the lease alive
                if text is not None and text.strip().upper() == "EXTEND":
                    self._start_hold(pump)
                    self.valid_command()
                    extend = True
                if extend:
                    extended = await pump.settle(("EXTEND", d, None))
                    if isinstance(extended, LeaseLost):
                        await self.error(str(extended))
                    elif isinstance(extended, Delivery):
                        d = pump.held[id(self)] = extended
                    await self._extend_ahead(pump)
                    continue
                assert text is not None
                await self._tell()
                try:
                    settle = self._parse(text, d)
                except InvalidRequest as e:
                    await self.invalid_command(str(e))
                    continue
                self.valid_command()
                self._stop_hold()
                return settle
        except Gone:
            pump.held.pop(id(self), None)
            pump.release(d)
            raise

    async def _extend_ahead(self, pump: Pump) -> None:
        """The record leased ahead keeps its lease while the client holds one."""
        ahead = pump.ahead.get(id(self))
        if ahead is None or not leased(ahead):
            return
        extended = await pump.settle(("EXTEND", ahead.result(), None))
        if isinstance(extended, BaseException):  # lost meanwhile: lease another
            pump.ahead[id(self)] = pump.next()

    @staticmethod
    def _parse(text: str, d: Delivery) -> Settle:
        word, _, rest = text.partition(" ")
        word = word.upper()
        rest = rest.strip()
        if word in ("ACK", "NACK", "BACK") and not rest:
            return (word, d, None)
        if word == "DACK":
            try:
                seconds = float(rest)
            except ValueError:
                raise InvalidRequest(f"DACK needs a number of seconds, got {rest[:40]!r}") from None
            if not 0 <= seconds <= 12 * 3600:
                raise InvalidRequest(f"DACK seconds must be between 0 and 43200, got {rest[:40]}")
            return ("DACK", d, seconds)
        return _bad(text)


def _bad(text: str) -> Settle:
    raise InvalidRequest(f"{ANSWER}; got {text[:40]!r}")


async def subscribe(ws: WebSocket) -> None:
    ctx: Context = ws.app.state.ctx
    await ws.accept()
    try:
        await Subscriber(SocketChannel(ws, ctx.connections), ctx).run(
            ws.path_params["topic"], ws.query_params.get("group")
        )
    except (Gone, HeldTooLong, ConnectionAbortedError):
        pass


routes = [WebSocketRoute("/subscribe/{topic}", subscribe)]
