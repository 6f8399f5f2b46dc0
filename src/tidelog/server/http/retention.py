"""Retention over HTTP: topic settings, and cleaning on demand.

    PATCH /v1/topics/{t}         {"config": {"retention_ms": "12h", "cleanup_policy": "compact", ...}}
    POST  /v1/topics/{t}/clean   apply the topic's retention and compaction now (?chunk=)
    POST  /v1/clean              the same for every topic

Settings are parsed and checked by the core (`TopicConfig`): durations as
`7d`, `12h`, `30m`, `10s`, `500ms` or milliseconds, sizes as `1GiB`, `500MB`
or bytes; a bad one is a 400 naming the field and changes nothing. The
server's background cleaner (`clean_interval`) runs the same `Log.clean`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...config import check_name
from ...retention import DEFAULT_CHUNK, CleanReport
from .bodies import field, json_object, no_unknown, query_int
from .responses import ctx_of, json_response
from .v1 import topic_out

MAX_CHUNK = 100_000


def report_out(r: CleanReport) -> dict[str, Any]:
    return r.to_dict()


async def alter_topic(request: Request) -> Response:
    ctx = ctx_of(request)
    name = check_name("topic", request.path_params["topic"])
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"config"})
    config = field(body, "config", dict)
    info = await ctx.run(lambda: ctx.log.alter_topic(name, **config))
    return json_response(topic_out(info))


async def clean_topic(request: Request) -> Response:
    ctx = ctx_of(request)
    name = check_name("topic", request.path_params["topic"])
    chunk = query_int(request, "chunk", DEFAULT_CHUNK, 1, MAX_CHUNK)
    reports = await ctx.run(lambda: ctx.log.clean(name, chunk=chunk))
    return json_response({"reports": [report_out(r) for r in reports]})


async def clean_all(request: Request) -> Response:
    ctx = ctx_of(request)
    chunk = query_int(request, "chunk", DEFAULT_CHUNK, 1, MAX_CHUNK)
    reports = await ctx.run(lambda: ctx.log.clean(chunk=chunk))
    return json_response({"reports": [report_out(r) for r in reports]})


routes = [
    Route("/v1/topics/{topic}", alter_topic, methods=["PATCH"]),
    Route("/v1/topics/{topic}/clean", clean_topic, methods=["POST"]),
    Route("/v1/clean", clean_all, methods=["POST"]),
]
