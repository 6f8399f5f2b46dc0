"""The full API under /v1: topics, produce, read, groups, and the change feed.

Every route is a thin translation of a core call (`tidelog.Log`,
`Producer.prepare` through the group-commit writer, `Consumer`); blocking
calls run on the context's threads.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...config import check_name, check_txn
from ...errors import InvalidRequest, UnknownGroup, UnknownTopic
from ...log import Message
from ...records import BatchSent
from ...store.base import TopicInfo
from .bodies import (
    field,
    int_field,
    json_object,
    no_unknown,
    path_int,
    query_int,
    query_limit,
    query_str,
    query_wait,
    read_model,
)
from .members import member_commit
from .models import Produce, ProduceBatches
from .responses import ctx_of, json_response, messages_out

MAX_READ = 10_000  # records a read answers at most; a larger limit is held to it
DEFAULT_READ = 100


def topic_out(info: TopicInfo) -> dict[str, Any]:
    return {"name": info.name, "partitions": info.partitions, "config": info.config, "created": info.created}


def _topic(request: Request) -> str:
    return check_name("topic", request.path_params["topic"])


def _group(request: Request) -> str:
    return check_name("group", request.path_params["group"])


# topics ----------------------------------------------------------------------------


async def list_topics(request: Request) -> Response:
    ctx = ctx_of(request)
    topics = await ctx.run(ctx.log.topics)
    return json_response({"topics": [topic_out(t) for t in topics]})


async def create_topic(request: Request) -> Response:
    ctx = ctx_of(request)
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"name", "partitions", "config"})
    name = check_name("topic", field(body, "name", str))
    partitions = int_field(body, "partitions", 1, default=1)
    config = field(body, "config", dict, default={})

    def create() -> tuple[TopicInfo, bool]:
        try:
            ctx.log.topic(name)
            existed = True
        except UnknownTopic:
            existed = False
        return ctx.log.create_topic(name, partitions, **config), not existed

    info, created = await ctx.run(create)
    return json_response(topic_out(info), 201 if created else 200)


async def describe_topic(request: Request) -> Response:
    ctx = ctx_of(request)
    name = _topic(request)

    def look():
        return ctx.log.describe(name), ctx.log.last_clean(name)

    desc, last_clean = await ctx.run(look)
    return json_response(
        {
            "name": desc.name,
            "partitions": len(desc.partitions),
            "config": desc.config,
            "created": desc.created,
            "records": desc.records,
            "offsets": [
                {
                    "partition": p.partition,
                    "first_offset": p.first_offset,
                    "last_offset": p.last_offset,
                    "records": p.records,
                    "bytes": p.bytes,
                }
                for p in desc.partitions
            ],
            "bytes": sum(p.bytes for p in desc.partitions),
            "last_clean": last_clean,
        }
    )


async def delete_topic(request: Request) -> Response:
    ctx = ctx_of(request)
    name = _topic(request)
    deleted = await ctx.run(ctx.log.delete_topic, name)
    ctx.forget_topic(name)
    if not deleted:
        raise UnknownTopic(f"topic {name!r} does not exist")
    return json_response({"name": name, "deleted": True})


async def add_partitions(request: Request) -> Response:
    ctx = ctx_of(request)
    name = _topic(request)
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"partitions"})
    partitions = int_field(body, "partitions", 1)
    info = await ctx.run(ctx.log.add_partitions, name, partitions)
    return json_response(topic_out(info))


# produce ---------------------------------------------------------------------------


async def produce(request: Request) -> Response:
    """Records to one topic; each record's partition, key or the spread picks its partition."""
    ctx = ctx_of(request)
    topic = _topic(request)
    body = await read_model(request, ctx.settings.max_body, Produce)
    records = body.records
    default_partition = body.partition
    producer_id, stamp = body.producer, body.timestamp
    if producer_id is not None:
        check_name("producer", producer_id)
    # Group records by what picks their partition, keeping their order.
    groups: dict[tuple, tuple[list[int], list[Any]]] = {}
    for i, item in enumerate(records):
        value, partition, key = item.to_record(f"records[{i}]")
        if partition is None:
            partition = default_partition
        route = ("p", partition) if partition is not None else ("k", key) if key is not None else ("spread",)
        slot = groups.get(route)
        if slot is None:
            slot = groups[route] = ([], [])
        slot[0].append(i)
        slot[1].append(value)
    producer = ctx.producer(producer_id)

    def job():
        out = []
        for route, (_, values) in groups.items():
            partition = route[1] if route[0] == "p" else None
            key = route[1] if route[0] == "k" else None
            out.append(producer.prepare(topic, values, key=key, partition=partition, timestamp=stamp))
        return out

    sent = await ctx.writer.write(job)
    placed: list[Any] = [None] * len(records)
    for (indices, _), s in zip(groups.values(), sent):
        for j, i in enumerate(indices):
            placed[i] = {"partition": s.partition, "offset": s.first_offset + j}
    return json_response({"topic": topic, "timestamp": sent[0].timestamp, "records": placed})


def _batch_out(s: BatchSent) -> dict[str, Any]:
    return {
        "topic": s.topic,
        "partition": s.partition,
        "first_offset": s.first_offset,
        "count": s.count,
        "timestamp": s.timestamp,
    }


async def produce_batches(request: Request) -> Response:
    """Batches to any topics in one transaction: all are written or none.

    With `txn` the write is idempotent: a write whose id was recorded before
    writes nothing and answers that earlier write's batches.
    """
    ctx = ctx_of(request)
    body = await read_model(request, ctx.settings.max_body, ProduceBatches)
    txn = body.txn
    if txn is not None:
        check_txn(txn)
    plan = []
    for b, batch in enumerate(body.batches):
        where = f"batches[{b}]."
        check_name("topic", batch.topic)
        if batch.producer is not None:
            check_name("producer", batch.producer)
        values = []
        for i, item in enumerate(batch.records):
            value, own_partition, _ = item.to_record(f"{where}records[{i}]")
            if own_partition is not None:
                raise InvalidRequest(
                    f"{where}records[{i}].partition: a batch goes to one partition, set {where}partition"
                )
            values.append(value)
        plan.append(
            (ctx.producer(batch.producer), batch.topic, values, batch.key, batch.partition, batch.timestamp)
        )

    def job():
        out = []
        for producer, topic, values, key, partition, stamp in plan:
            out.append(producer.prepare(topic, values, key=key, partition=partition, timestamp=stamp))
        return out

    sent = await ctx.writer.write(job, txn, body.txn_since or 0)
    return json_response({"batches": [_batch_out(s) for s in sent]})


# reads -----------------------------------------------------------------------------


async def read_partition(request: Request) -> Response:
    ctx = ctx_of(request)
    topic = _topic(request)
    partition = path_int(request, "partition")
    after = query_int(request, "after", 0, 0)
    limit = query_limit(request, "limit", DEFAULT_READ, MAX_READ)
    wait = query_wait(request, ctx.settings.max_wait)
    msgs = await ctx.long_poll(
        [(topic, partition)], wait, lambda: ctx.log.read(topic, partition, after, limit)
    )
    ctx.metrics.records_read(topic, len(msgs))
    return json_response({"records": messages_out(msgs)})


# groups ----------------------------------------------------------------------------


async def list_groups(request: Request) -> Response:
    ctx = ctx_of(request)
    return json_response({"groups": await ctx.run(ctx.log.groups)})


async def create_group(request: Request) -> Response:
    ctx = ctx_of(request)
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"name", "mode"})
    name = check_name("group", field(body, "name", str))
    mode = field(body, "mode", str, default="stream")
    if mode != "stream":
        raise InvalidRequest(f"field 'mode' must be 'stream' (queue groups come later), got {mode!r}")
    await ctx.run(ctx.consumer, name)
    return json_response({"name": name, "mode": mode})


async def describe_group(request: Request) -> Response:
    ctx = ctx_of(request)
    group = _group(request)
    topics = [check_name("topic", t) for t in request.query_params.getlist("topic")]

    def describe():
        if group not in ctx.log.groups():
            raise UnknownGroup(f"group {group!r} does not exist")
        members = ctx.log.group(group).members()
        subscribed = {t for m in members for t in m.topics}
        return members, ctx.log.describe_group(group, sorted(set(topics) | subscribed))

    members, rows = await ctx.run(describe)
    owners = {tp: m.member for m in members for tp in m.partitions}
    return json_response(
        {
            "group": group,
            "generation": members[0].generation if members else None,
            "members": [
                {
                    "member_id": m.member,
                    "topics": m.topics,
                    "partitions": [list(tp) for tp in m.partitions],
                    "session_ms": m.session_ms,
                    "heartbeat": m.heartbeat,
                    "generation": m.generation,
                }
                for m in members
            ],
            "partitions": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "owner": owners.get((r.topic, r.partition)),
                    "committed": r.committed,
                    "last_offset": r.last_offset,
                    "lag": r.lag,
                }
                for r in rows
            ],
        }
    )


async def group_offsets(request: Request) -> Response:
    ctx = ctx_of(request)
    group = _group(request)
    rows = await ctx.run(ctx.log.group_offsets, group)
    return json_response(
        {
            "group": group,
            "offsets": [{"topic": r.topic, "partition": r.partition, "committed": r.committed} for r in rows],
        }
    )


async def group_partition(request: Request) -> Response:
    ctx = ctx_of(request)
    group, topic = _group(request), _topic(request)
    partition = path_int(request, "partition")

    def look():
        committed = ctx.consumer(group, register=False).committed(topic, partition)
        last = ctx.log.describe(topic).partitions[partition].last_offset
        return committed, last

    committed, last = await ctx.run(look)
    return json_response(
        {
            "group": group,
            "topic": topic,
            "partition": partition,
            "committed": committed,
            "last_offset": last,
            "lag": max(0, last - committed),
        }
    )


async def fetch(request: Request) -> Response:
    """Records after the group's committed offset, on one partition or all of them."""
    ctx = ctx_of(request)
    group, topic = _group(request), _topic(request)
    only = query_int(request, "partition", -1, 0)
    limit = query_limit(request, "max", DEFAULT_READ, MAX_READ)
    exclude = query_str(request, "exclude_producer", required=False)
    if exclude is not None:
        check_name("producer", exclude)
    wait = query_wait(request, ctx.settings.max_wait)
    partitions = [only] if only >= 0 else list(range((await ctx.run(ctx.log.topic, topic)).partitions))

    def read() -> list[Message]:
        # A fetch reads after the committed offset and registers nothing (as
        # Kafka's fetch): the group shows once it commits.
        consumer = ctx.consumer(group, register=False)
        out: list[Message] = []
        for p in partitions:
            out += consumer.fetch(topic, p, limit - len(out), exclude_producer=exclude)
            if len(out) >= limit:
                break
        return out

    msgs = await ctx.long_poll([(topic, p) for p in partitions], wait, read)
    ctx.metrics.records_read(topic, len(msgs))
    return json_response({"group": group, "records": messages_out(msgs)})


async def _offset_body(request: Request) -> tuple[str, int, int]:
    ctx = ctx_of(request)
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"topic", "partition", "offset"})
    topic = check_name("topic", field(body, "topic", str))
    return topic, int_field(body, "partition", 0), int_field(body, "offset", 0, None)


async def commit(request: Request) -> Response:
    """Commit an offset; with `member_id`, a group member's fenced commit (see members.py)."""
    ctx = ctx_of(request)
    group = _group(request)
    body = await json_object(request, ctx.settings.max_body)
    if "member_id" in body:
        no_unknown(body, {"member_id", "generation", "topic", "partition", "offset"})
        return json_response(await member_commit(ctx, group, body))
    no_unknown(body, {"topic", "partition", "offset"})
    topic = check_name("topic", field(body, "topic", str))
    # An offset past the end, however large, is OffsetOutOfRange with the partition's bounds.
    partition, offset = int_field(body, "partition", 0), int_field(body, "offset", 0, None)

    def do():
        consumer = ctx.consumer(group, register=False)
        consumer.commit(topic, partition, offset)
        ctx.consumer(group)  # registered once the commit went through: a refused one writes nothing
        return consumer.committed(topic, partition)

    committed = await ctx.run(do)
    return json_response({"group": group, "topic": topic, "partition": partition, "committed": committed})


async def seek(request: Request) -> Response:
    ctx = ctx_of(request)
    group = _group(request)
    topic, partition, offset = await _offset_body(request)

    def do() -> None:
        ctx.consumer(group, register=False).seek(topic, partition, offset)
        ctx.consumer(group)  # registered once the seek went through

    await ctx.run(do)
    return json_response({"group": group, "topic": topic, "partition": partition, "committed": offset})


async def changes(request: Request) -> Response:
    """Long-poll for any append: answers with the change counter once it passes `after`."""
    ctx = ctx_of(request)
    after = query_int(request, "after", -1, -1)
    wait = query_wait(request, ctx.settings.max_wait)
    seq = ctx.hub.seq if after < 0 else await ctx.hub.wait_any(after, wait)
    return json_response({"seq": seq})


routes = [
    Route("/v1/topics", list_topics, methods=["GET"]),
    Route("/v1/topics", create_topic, methods=["POST"]),
    Route("/v1/topics/{topic}", describe_topic, methods=["GET"]),
    Route("/v1/topics/{topic}", delete_topic, methods=["DELETE"]),
    Route("/v1/topics/{topic}/partitions", add_partitions, methods=["POST"]),
    Route("/v1/topics/{topic}/records", produce, methods=["POST"]),
    Route("/v1/topics/{topic}/partitions/{partition}/records", read_partition, methods=["GET"]),
    Route("/v1/records", produce_batches, methods=["POST"]),
    Route("/v1/groups", list_groups, methods=["GET"]),
    Route("/v1/groups", create_group, methods=["POST"]),
    Route("/v1/groups/{group}", describe_group, methods=["GET"]),
    Route("/v1/groups/{group}/offsets", group_offsets, methods=["GET"]),
    Route("/v1/groups/{group}/topics/{topic}/records", fetch, methods=["GET"]),
    Route("/v1/groups/{group}/topics/{topic}/partitions/{partition}", group_partition, methods=["GET"]),
    Route("/v1/groups/{group}/commit", commit, methods=["POST"]),
    Route("/v1/groups/{group}/seek", seek, methods=["POST"]),
    Route("/v1/changes", changes, methods=["GET"]),
]
