"""POST /publish/{topic}: the raw request body is the value, stored as bytes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..config import check_name
from .bodies import query_int, query_str, read_body
from .context import ctx_of, json_response


async def publish_raw(request: Request) -> Response:
    ctx = ctx_of(request)
    topic = check_name("topic", request.path_params["topic"])
    partition = query_int(request, "partition", -1, 0)
    key = query_str(request, "key", required=False)
    value = await read_body(request, ctx.settings.max_body)
    producer = ctx.producer(None)
    (sent,) = await ctx.writer.write(
        lambda: [producer.prepare(topic, [value], key=key, partition=None if partition < 0 else partition)]
    )
    return json_response(
        {
            "topic": topic,
            "partition": sent.partition,
            "offset": sent.first_offset,
            "timestamp": sent.timestamp,
        },
        201,
    )


routes = [Route("/publish/{topic}", publish_raw, methods=["POST"])]
