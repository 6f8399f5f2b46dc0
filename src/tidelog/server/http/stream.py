"""Server-Sent Events: a topic's records for a group, as they arrive.

The stream starts after the group's committed offset on each partition
(the partitions the topic has when the stream opens). Each record is one
`record` event whose id is `<partition>:<offset>`. With `commit=true` (the
default) the group's offset advances as events are written, like Kafka's
auto-commit; with `commit=false` the client commits through
POST /v1/groups/{group}/commit. An idle stream sends a comment line every
few seconds so proxies keep it open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from ...config import check_name
from ...wire import row_to_wire
from .bodies import query_bool, query_int, query_str
from .responses import ctx_of, raw_json

BATCH = 500


class _Stalled(Exception):
    """The client took no event within the write deadline."""


class DeadlineStream(StreamingResponse):
    """A streaming response whose every chunk must be taken within `Limits.write_deadline`:
    a client that stops reading holds its connection (and, with commit=true, the
    group's position) until then, not for ever. Its connection is then shut down
    (the connection guard), and the events not taken are not committed."""

    def __init__(self, content: AsyncIterator[bytes], write_timeout: float, abort: Any, **kw: Any):
        super().__init__(content, **kw)
        self.write_timeout = write_timeout
        self.abort = abort

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def timed(message: Message) -> None:
            if message["type"] != "http.response.body" or not message.get("more_body"):
                await send(message)
                return
            try:
                async with asyncio.timeout(self.write_timeout):
                    await send(message)
            except TimeoutError:
                self.abort(scope.get("client"))
                raise _Stalled from None

        try:
            await super().__call__(scope, receive, timed)
        except _Stalled:
            pass


async def stream(request: Request) -> Response:
    ctx = ctx_of(request)
    topic = check_name("topic", request.path_params["topic"])
    group = check_name("group", query_str(request, "group"))
    only = query_int(request, "partition", -1, 0)
    auto_commit = query_bool(request, "commit", True)

    def start() -> dict[int, int]:
        # A read until it commits: the group is registered with its first commit.
        consumer = ctx.consumer(group, register=False)
        partitions = [only] if only >= 0 else range(ctx.log.topic(topic).partitions)
        return {p: consumer.committed(topic, p) for p in partitions}

    # Errors (unknown topic or partition) answer before the stream starts.
    positions = await ctx.run(start)
    keys = [(topic, p) for p in positions]

    def read() -> list:
        out = []
        for p, after in positions.items():
            rows = ctx.log.read(topic, p, after, BATCH)
            if rows:
                out.append((p, rows))
        return out

    def commit(done: dict[int, int]) -> None:
        consumer = ctx.consumer(group, register=False)
        for p, offset in done.items():
            consumer.commit(topic, p, offset)
        ctx.consumer(group)

    async def events() -> AsyncIterator[bytes]:
        yield f": {topic} for group {group}\n\n".encode()
        while not ctx.hub.closed:
            seq = ctx.hub.seq
            found = await ctx.read(read)
            if not found:
                if not await ctx.hub.wait(keys, seq, ctx.settings.keepalive):
                    yield b": keepalive\n\n"
                continue
            chunks = []
            done = {}
            for p, rows in found:
                for row in rows:
                    data = orjson.dumps(row_to_wire(topic, p, row, raw_json))
                    chunks.append(b"id: %d:%d\nevent: record\ndata: %s\n\n" % (p, row[0], data))
                positions[p] = done[p] = rows[-1][0]
                ctx.metrics.records_read(topic, len(rows))
            yield b"".join(chunks)
            if auto_commit:
                await ctx.run(commit, done)

    return DeadlineStream(
        events(),
        ctx.settings.limits.write_deadline,
        ctx.connections.abort,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


routes = [Route("/v1/topics/{topic}/stream", stream, methods=["GET"])]
