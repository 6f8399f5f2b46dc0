"""The hottest route without the framework's per-request cost: POST /publish/{topic}.

An empty Starlette POST cost 87 µs of CPU on this stack (issue 15's
profile): middleware, the ordered route scan, Request objects. This plain
ASGI middleware sits first in the app's stack and serves the common case of
miniqueue's publish itself: no query string, a valid topic name, a body
within the limit, the bearer token when one is set. Everything else -- a
query (`partition`, `key`), a bad name, a missing or wrong token, a body
over the limit, a client that hangs up -- goes on to the Starlette route
untouched (the body read so far is replayed), so every refusal is the
route's own, byte for byte, and the route table and OpenAPI stay the one
source of what the API is. What the write itself raises is answered by the
same error handler the Starlette route would reach; requests are counted
in the same metrics, under the same route label.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request

from ...config import check_name
from ...errors import TidelogError
from .auth import client_host
from .errors import error_response, on_unexpected

if TYPE_CHECKING:
    from .context import Context

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PREFIX = "/publish/"
ROUTE = "/publish/{topic}"  # the Starlette route's template: one metrics label for both paths
_JSON = (b"content-type", b"application/json")


def _replay(read: list[Message], receive: Receive) -> Receive:
    """`receive` as if nothing had been read from it yet."""
    pending = list(read)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


class HotPublish:
    """ASGI middleware: POST /publish/{topic} served inline, all else passed on."""

    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], ctx: Context, token: str | None
    ):
        self.app = app
        self.ctx = ctx
        self.expected = b"Bearer " + token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["query_string"]
            or scope.get("root_path")
            or not scope["path"].startswith(PREFIX)
        ):
            await self.app(scope, receive, send)
            return
        name = scope["path"][len(PREFIX) :]
        if not self._plain(scope, name):
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        chunks: list[bytes] = []
        size, limit = 0, self.ctx.settings.max_body
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":  # a hang-up: the route's own handling
                await self.app(scope, _replay(read, receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self.app(scope, _replay(read, receive), send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self._publish(scope, receive, send, name, b"".join(chunks))

    def _plain(self, scope: Scope, name: str) -> bool:
        """True when nothing about the request needs the full route: a valid
        name, the token when one is set, a declared length within the limit."""
        if not name or "/" in name:
            return False
        try:
            check_name("topic", name)
        except TidelogError:
            return False
        given = b""
        length = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                given = value
            elif key == b"content-length":
                length = value
        if self.expected is not None and not hmac.compare_digest(given, self.expected):
            return False
        if self.expected is not None and self.ctx.throttle.wait(client_host(scope)):
            return False  # an address held back: BearerAuth refuses it
        return not (length is not None and length.isdigit() and int(length) > self.ctx.settings.max_body)

    async def _publish(self, scope: Scope, receive: Receive, send: Send, topic: str, value: bytes) -> None:
        ctx = self.ctx
        start = time.perf_counter()
        status = 500
        try:
            producer = ctx.producer(None)
            try:
                (sent,) = await ctx.writer.write(lambda: [producer.prepare(topic, [value])])
            except Exception as exc:
                # What the Starlette route's exception handlers would answer.
                response = (
                    error_response(exc)
                    if isinstance(exc, TidelogError)
                    else await on_unexpected(Request(scope), exc)
                )
                status = response.status_code
                await response(scope, receive, send)
                return
            body = orjson.dumps(
                {
                    "topic": topic,
                    "partition": sent.partition,
                    "offset": sent.first_offset,
                    "timestamp": sent.timestamp,
                }
            )
            status = 201
            await send(
                {
                    "type": "http.response.start",
                    "status": 201,
                    "headers": [(b"content-length", str(len(body)).encode()), _JSON],
                }
            )
            await send({"type": "http.response.body", "body": body})
        finally:
            ctx.metrics.requests.labels("POST", ROUTE, str(status)).inc()
            ctx.metrics.latency.labels("POST", ROUTE).observe(time.perf_counter() - start)
