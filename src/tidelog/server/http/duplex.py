"""`POST /subscribe/{topic}`: miniqueue's subscribe, one HTTP/2 request both ways.

The request body is the client's commands and the response body the
server's answers, each a JSON value on its own line (miniqueue's clients
write `"INIT"\\n`, `"ACK"\\n` with Go's JSON encoder and decode the answers
the same way), for as long as the request lasts. The conversation is the
WebSocket's (subscribe.py); only the channel differs.

granian delivers the request body as it arrives while the response streams
(checked: a chunk sent after the response began reaches the app at once,
over h2c and TLS), so a client may wait for each answer before its next
command. A client that cannot interleave (httpx sends the whole body before
it reads the response) sends its commands ahead; they are read one after
each answer, as miniqueue reads them. The end of the body means "no more
commands": the answer owed to the last one is still sent, then the message
the client holds goes back to the front, as on a disconnect.

The route is a plain ASGI app, not a Starlette endpoint: a streaming
response would read `receive()` itself, to watch for a disconnect, and take
the body's chunks from under the subscriber.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from starlette.datastructures import QueryParams
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from .subscribe import Gone, HeldTooLong, Subscriber

if TYPE_CHECKING:
    from .context import Context

MAX_LINE = 64 << 10  # a command is a word and a number: a longer line is not one


class StreamChannel:
    """The request body in, the response body out, one JSON value a line."""

    pipelined = True

    def __init__(self, receive: Receive, send: Send):
        self._receive = receive
        self._send = send
        self._buffer = b""
        self._lines: deque[str] = deque()
        self._ended = False  # the body ended: what remains are lines already read
        self._told_end = False
        self._started = False
        self._done = False

    async def receive(self) -> str | None:
        while not self._lines:
            if self._ended and not self._told_end:
                self._told_end = True
                return None
            self._take(await self._receive())  # after the body, only the disconnect comes
        return self._lines.popleft()

    def _take(self, message: Message) -> None:
        if message["type"] == "http.disconnect":
            raise Gone
        if message["type"] != "http.request":
            return
        self._buffer += message.get("body", b"")
        *lines, self._buffer = self._buffer.split(b"\n")
        if not message.get("more_body", False):
            self._ended = True
            lines.append(self._buffer)  # a last command without its newline
            self._buffer = b""
        elif len(self._buffer) > MAX_LINE:
            lines.append(self._buffer[:80])  # answered as a malformed command
            self._buffer = b""
        for raw in lines:
            text = raw.decode("utf-8", errors="replace").strip()
            if text:
                self._lines.append(text)

    async def _start(self, status: int) -> None:
        if not self._started:
            self._started = True
            headers = [(b"content-type", b"application/x-ndjson"), (b"cache-control", b"no-store")]
            await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def send(self, line: bytes) -> None:
        if self._done:
            raise Gone
        await self._start(200)
        await self._send({"type": "http.response.body", "body": line + b"\n", "more_body": True})

    async def accepted(self) -> None:
        await self._start(200)  # the client sees its subscription before the first message

    async def refuse(self, line: bytes, status: int) -> None:
        await self._start(status)
        await self.end(line + b"\n")

    def abandon(self) -> None:
        pass  # the stream is reset when the subscriber returns; the connection may carry others

    async def end(self, body: bytes = b"") -> None:
        if not self._done:
            await self._start(200)
            self._done = True
            await self._send({"type": "http.response.body", "body": body, "more_body": False})


class DuplexSubscribe:
    """The ASGI app of `POST /subscribe/{topic}?group=G`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx: Context = scope["app"].state.ctx
        channel = StreamChannel(receive, send)
        topic = scope["path_params"]["topic"]
        group = QueryParams(scope.get("query_string", b"")).get("group")
        try:
            await Subscriber(channel, ctx).run(topic, group)
        except (Gone, HeldTooLong, ConnectionAbortedError):
            pass
        try:
            await channel.end()
        except Exception:  # noqa: BLE001 - the client is gone: nothing to end
            pass


routes = [Route("/subscribe/{topic}", DuplexSubscribe(), methods=["POST"])]
