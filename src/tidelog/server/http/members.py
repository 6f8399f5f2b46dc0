"""Stream group membership over HTTP: a client in any language can be a member.

    POST /v1/groups/{g}/join       {"topics": [...], "member_id"?, "session_timeout"?, "assignor"?, "start"?}
    POST /v1/groups/{g}/heartbeat  {"member_id"}
    POST /v1/groups/{g}/poll       {"member_id", "max_messages"?, "wait"?}
    POST /v1/groups/{g}/commit     {"member_id", "generation"?, "topic"?, "partition"?, "offset"?}
    POST /v1/groups/{g}/release    {"member_id", "partitions"?}
    POST /v1/groups/{g}/leave      {"member_id"}

The server keeps a `GroupConsumer` per joined member (its positions), with
no heartbeat thread of its own: the remote member heartbeats (at least every
third of its session timeout). Every answer carries the member's generation,
`assignment` and `revoke`: partitions it holds that are assigned elsewhere;
the member commits them and the next `poll` (or `release`) gives them up,
so a member always hears of a revocation before it happens. A handle whose
member left, expired or stayed silent for two session timeouts is dropped.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...config import MAX_PARTITIONS, check_name
from ...errors import InvalidRequest, StaleGeneration
from ...groups import GroupConsumer
from ...log import MAX_BATCH
from .bodies import field, int_field, json_object, no_unknown, number_field, read_model
from .context import Context
from .models import Member, Poll
from .responses import ctx_of, json_response, messages_out

DEFAULT_SESSION_S = 10.0
MAX_OFFSET = (1 << 53) - 1


def view(handle: GroupConsumer) -> dict[str, Any]:
    return {
        "group": handle.group,
        "member_id": handle.member_id,
        "generation": handle.generation,
        "assignment": [list(tp) for tp in handle.assignment()],
        "revoke": [list(tp) for tp in handle.revoking()],
    }


def _group(request: Request) -> str:
    return check_name("group", request.path_params["group"])


def _member_of(body: dict[str, Any]) -> str:
    return check_name("member", field(body, "member_id", str))


def _partitions(raw: Any, name: str) -> list[tuple[str, int]]:
    if not isinstance(raw, list):
        raise InvalidRequest(f"field {name!r} must be an array of [topic, partition] pairs")
    out = []
    for i, pair in enumerate(raw):
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or type(pair[1]) is not int
            or pair[1] < 0
        ):
            raise InvalidRequest(f"{name}[{i}] must be a [topic, partition] pair")
        out.append((check_name("topic", pair[0]), pair[1]))
    return out


async def _call(ctx: Context, group: str, member: str, fn: Any, *args: Any) -> Any:
    """A call on a member's handle; a member the store no longer knows is forgotten."""
    try:
        return await ctx.run(fn, *args)
    except StaleGeneration:
        ctx.members.drop(group, member)
        raise


# routes ----------------------------------------------------------------------------


async def join(request: Request) -> Response:
    ctx = ctx_of(request)
    group = _group(request)
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"topics", "member_id", "session_timeout", "assignor", "start"})
    topics = field(body, "topics", list)
    if not topics or not all(isinstance(t, str) for t in topics):
        raise InvalidRequest("field 'topics' must be a non-empty array of topic names")
    options: dict[str, Any] = {
        "session_timeout": number_field(body, "session_timeout", default=DEFAULT_SESSION_S),
        "assignor": field(body, "assignor", str, default="range"),
        "start": field(body, "start", str, default="earliest"),
        "member_id": field(body, "member_id", str, default=None),
        "heartbeat_interval": 0,  # the remote member heartbeats
    }

    def join_existing() -> GroupConsumer:
        for topic in topics:
            ctx.log.topic(topic)  # UnknownTopic: joining reads, and reads never create a topic
        return GroupConsumer(ctx.log, group, topics, **options)

    handle = await ctx.run(join_existing)
    ctx.members.add(handle)
    return json_response({**view(handle), "session_timeout": handle.session_ms / 1000})


async def heartbeat(request: Request) -> Response:
    ctx = ctx_of(request)
    group = _group(request)
    member = check_name("member", (await read_model(request, ctx.settings.max_body, Member)).member_id)
    handle = ctx.members.get(group, member)
    await _call(ctx, group, member, handle.heartbeat)
    return json_response(view(handle))


async def poll(request: Request) -> Response:
    """Records from the member's partitions (after releasing those it was told to give up)."""
    ctx = ctx_of(request)
    group = _group(request)
    body = await read_model(request, ctx.settings.max_body, Poll)
    member = check_name("member", body.member_id)
    limit = min(body.max_messages or 500, MAX_BATCH)
    wait = body.wait or 0
    handle = ctx.members.get(group, member)
    # A long-poll never outlasts a third of the session: the member must heartbeat.
    wait = min(wait, ctx.settings.max_wait, handle.session_ms / 3000)
    msgs = await ctx.long_poll(handle.assignment(), wait, lambda: handle.poll(timeout=0, max_messages=limit))
    for topic in {m.topic for m in msgs}:
        ctx.metrics.records_read(topic, sum(m.topic == topic for m in msgs))
    return json_response({**view(handle), "records": messages_out(msgs)})


async def release(request: Request) -> Response:
    ctx = ctx_of(request)
    group = _group(request)
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"member_id", "partitions"})
    member = _member_of(body)
    handle = ctx.members.get(group, member)
    given = body.get("partitions")
    partitions = handle.revoking() if given is None else _partitions(given, "partitions")
    await _call(ctx, group, member, handle.release, partitions)
    return json_response(view(handle))


async def leave(request: Request) -> Response:
    ctx = ctx_of(request)
    group = _group(request)
    member = check_name("member", (await read_model(request, ctx.settings.max_body, Member)).member_id)
    handle = ctx.members.get(group, member)
    ctx.members.drop(group, member)
    await ctx.run(handle.close)
    return json_response({"group": group, "member_id": member, "left": True})


async def member_commit(ctx: Context, group: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v1/groups/{g}/commit with a member_id: a fenced commit.

    With topic, partition and offset: that offset, at `generation` (default:
    the member's current one). Without them: everything the member's polls
    returned.
    """
    member = _member_of(body)
    given = [k for k in ("topic", "partition", "offset") if k in body]
    if given and len(given) != 3:
        raise InvalidRequest("a member's commit names topic, partition and offset together, or none of them")
    if not given:
        if "generation" in body:
            raise InvalidRequest("'generation' goes with topic, partition and offset")
        handle = ctx.members.get(group, member)
        await _call(ctx, group, member, handle.commit)
        return {"group": group, "member_id": member, "generation": handle.generation}
    topic = check_name("topic", field(body, "topic", str))
    partition = int_field(body, "partition", 0, MAX_PARTITIONS - 1)
    offset = int_field(body, "offset", 0, MAX_OFFSET)
    generation = int_field(body, "generation", 0, MAX_OFFSET, default=None)
    if generation is None:
        generation = ctx.members.get(group, member).generation
    await ctx.run(ctx.log.group(group).commit, member, generation, topic, partition, offset)
    committed = await ctx.run(ctx.consumer(group, register=False).committed, topic, partition)
    return {"group": group, "topic": topic, "partition": partition, "committed": committed}


routes = [
    Route("/v1/groups/{group}/join", join, methods=["POST"]),
    Route("/v1/groups/{group}/heartbeat", heartbeat, methods=["POST"]),
    Route("/v1/groups/{group}/poll", poll, methods=["POST"]),
    Route("/v1/groups/{group}/release", release, methods=["POST"]),
    Route("/v1/groups/{group}/leave", leave, methods=["POST"]),
]
