"""The seed systems' routes, in the shapes their clients send verbatim.

/api: the small pub/sub API. Topics here have one partition and ids are its
offsets; a group's `lastAckedId` is its committed offset on partition 0.

POST /publish/{topic}: the raw request body is the value, stored as bytes
(miniqueue's publish); DELETE /{topic}: miniqueue's delete. Its
/subscribe/{topic} lives in subscribe.py (the WebSocket) and duplex.py (the
HTTP/2 stream): the delivery pump is a concept of its own.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...config import check_name
from ...errors import UnknownTopic, WrongType
from ...notify import along_poll
from ...records import FMT_TEXT, Message, Prepared, decode_meta
from . import v1
from .bodies import (
    field,
    int_field,
    json_object,
    query_int,
    query_limit,
    query_str,
    query_wait,
    read_body,
    read_model,
)
from .models import PublishPayload
from .responses import ctx_of, json_response, raw_json

if TYPE_CHECKING:
    from .context import Context

MAX_PULL = 1000  # records a pull answers at most; a larger batch is held to it


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _payload(stored: bytes | str, meta: bytes | None) -> Any:
    if not isinstance(stored, bytes):
        return stored if meta is not None and decode_meta(meta)[0] == FMT_TEXT else raw_json(stored)
    try:
        return stored.decode()
    except UnicodeDecodeError:
        return base64.b64encode(stored).decode("ascii")


def _topic_out(info) -> dict[str, Any]:
    return {"name": info.name, "partitions": info.partitions, "createdAt": iso(info.created)}


async def one_partition(ctx: Context, topic: str, *, writes: bool = False) -> None:
    """/api has one offset a group: a topic of several partitions is refused,
    never read in part (its other partitions would be skipped silently).

    `writes`: a missing topic passes when the auto-create policy would make
    it (with one partition, as /api makes every topic)."""
    catalog = ctx.log.catalog
    shape = catalog.get(topic)
    if shape is None:
        shape = await ctx.run(
            lambda: catalog.planned(topic, partitions=1) if writes else catalog.shape(topic)
        )
    if shape.partitions != 1:
        raise WrongType(
            f"topic {topic!r} has {shape.partitions} partitions; /api serves one-partition topics "
            f"(one offset a group): use /v1/groups/{{group}}/topics/{topic}/records to read every partition"
        )


async def create_topic(request: Request) -> Response:
    ctx = ctx_of(request)
    body = await json_object(request, ctx.settings.max_body)
    name = check_name("topic", field(body, "name", str))

    def ensure():
        try:
            return ctx.log.topic(name), False
        except UnknownTopic:
            return ctx.log.create_topic(name, 1), True

    info, created = await ctx.run(ensure)
    return json_response(_topic_out(info), 201 if created else 200)


async def publish(request: Request) -> Response:
    ctx = ctx_of(request)
    topic = check_name("topic", request.path_params["name"])
    payload = (await read_model(request, ctx.settings.max_body, PublishPayload)).payload
    await one_partition(ctx, topic, writes=True)
    producer = ctx.producer(None)

    def job() -> list[Prepared]:
        prepared = producer.prepare(topic, [payload], partition=0)
        ctx.log.catalog.ensure(topic, partitions=1)  # checked: a missing topic is made now
        return [prepared]

    (sent,) = await ctx.writer.write(job)
    return json_response({"id": sent.first_offset, "topic": topic, "createdAt": iso(sent.timestamp)}, 201)


async def pull(request: Request) -> Response:
    ctx = ctx_of(request)
    topic = check_name("topic", request.path_params["name"])
    group = check_name("group", query_str(request, "group"))
    batch = query_limit(request, "batch", 10, MAX_PULL)
    wait = query_wait(request, ctx.settings.max_wait)
    await one_partition(ctx, topic)

    def read() -> tuple[int, list[Message]]:
        committed = ctx.consumer(group, register=False).committed(topic, 0)  # a read registers nothing
        return committed, ctx.log.read(topic, 0, committed, batch)

    committed, msgs = await along_poll(
        lambda: ctx.read(read),
        wait,
        lambda: ctx.hub.seq,
        lambda seq, left: ctx.hub.wait([(topic, 0)], seq, left),
        found=lambda r: r[1],
    )
    ctx.metrics.records_read(topic, len(msgs))
    messages = [{"id": m[0], "payload": _payload(m[2], m[3]), "createdAt": iso(m[1])} for m in msgs]
    return json_response({"messages": messages, "lastAckedId": committed})


async def ack(request: Request) -> Response:
    ctx = ctx_of(request)
    topic = check_name("topic", request.path_params["name"])
    body = await json_object(request, ctx.settings.max_body)
    group = check_name("group", field(body, "group", str))
    last = int_field(body, "lastAckedId", 0, None)  # past the end: OffsetOutOfRange
    await one_partition(ctx, topic)

    def commit():
        consumer = ctx.consumer(group, register=False)
        consumer.commit(topic, 0, last)
        ctx.consumer(group)  # registered once the commit went through
        return consumer.committed(topic, 0)

    committed = await ctx.run(commit)
    return json_response({"group": group, "topic": topic, "lastAckedId": committed})


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


routes = [
    Route("/api/topics", create_topic, methods=["POST"]),
    Route("/api/topics/{name}/publish", publish, methods=["POST"]),
    Route("/api/topics/{name}/pull", pull, methods=["GET"]),
    Route("/api/topics/{name}/ack", ack, methods=["POST"]),
    Route("/publish/{topic}", publish_raw, methods=["POST"]),
    # miniqueue deletes a topic at its bare name; the same as DELETE /v1/topics/{topic}.
    Route("/{topic}", v1.delete_topic, methods=["DELETE"]),
]
