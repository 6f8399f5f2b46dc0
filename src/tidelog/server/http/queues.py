"""Queue groups over HTTP: /v1/queues/{topic}/...

Every route takes `?group=` (default: the topic's name) and is a thin
translation of `tidelog.Queue`: open, send (with a delay), receive (a
long-poll that wakes on an append or when a delayed or expired record falls
due), ack, nack (front, back, delay), extend, reject and stats. Deliveries
carry an opaque receipt token (see `receipts`). Beside them, what an
operator reaches for (`tidelog.queues.peek`, `purge`): the queue groups of
the log, a peek that leases nothing, and a purge; these never register a
group (a missing one is a 404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...bounds import (
    MAX_DELIVERIES,
    MAX_RECEIVE,
    MAX_VISIBILITY_S,
    check_seconds,
    check_time_ms,
    check_visibility_timeout,
)
from ...config import check_name
from ...errors import InvalidRequest, LeaseLost, TidelogError
from ...notify import along_poll
from ...queues import (
    MAX_PEEK,
    Delivery,
    Queue,
    check_dedup_id,
    dedup_write,
    in_flight,
    peek,
    prepare_send,
    purge,
    queue_stats,
)
from ...records import Prepared
from ...wire import row_to_wire
from . import receipts
from .bodies import (
    decode,
    field,
    int_field,
    json_object,
    no_unknown,
    number_field,
    parse_json,
    query_limit,
    query_seconds,
    query_wait,
    read_body,
    read_model,
)
from .context import Context
from .models import Empty, Reject, Send
from .responses import ctx_of, json_response, raw_json


def topic_and_group(request: Request) -> tuple[str, str]:
    topic = check_name("topic", request.path_params["topic"])
    group = request.query_params.get("group") or topic
    return topic, check_name("group", group)


def delivery_out(group: str, d: Delivery) -> dict[str, Any]:
    out = row_to_wire(d.topic, d.partition, d.message, raw_json)
    out["delivery_count"] = d.delivery_count
    out["receipt"] = receipts.encode(group, d)
    out["lease_deadline"] = d.lease_deadline
    return out


async def receive_deliveries(
    ctx: Context, queue: Queue, limit: int, visibility: float | None, wait: float
) -> tuple[list[Delivery], int | None]:
    """Lease up to `limit` records, waiting up to `wait` seconds for one.

    Wakes on an append to the topic, or when a delayed, released or expired
    record falls due (the `next_due` the store reports), never on a tick.
    """
    return await along_poll(
        lambda: ctx.run(queue.poll, limit, visibility),
        wait,
        lambda: ctx.hub.seq,
        lambda seq, left: ctx.hub.wait([(queue.topic, None)], seq, left),
        found=lambda r: r[0],
        due_in=lambda r: None if r[1] is None else (r[1] - ctx.log.clock()) / 1000,
    )


# routes ----------------------------------------------------------------------------


async def open_queue(request: Request) -> Response:
    """Create the group (its settings are stored on first use) or show the stored ones."""
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    raw = await read_body(request, ctx.settings.max_body)
    body = parse_json(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    no_unknown(body, {"max_deliveries", "dead_letter", "start", "ordering"})
    int_field(body, "max_deliveries", 1, MAX_DELIVERIES, default=None)
    options = {
        k: body[k] for k in ("max_deliveries", "dead_letter", "start", "ordering") if body.get(k) is not None
    }
    queue = await ctx.run(ctx.queue, topic, group, options)
    return json_response(
        {
            "topic": topic,
            "group": group,
            "max_deliveries": queue.max_deliveries,
            "dead_letter": queue.dead_letter,
            "ordering": queue.ordering,
        }
    )


def _placement(route: tuple) -> dict[str, Any]:
    return {"key": route[1] if route[0] == "k" else None, "partition": route[1] if route[0] == "p" else None}


async def send(request: Request) -> Response:
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    body = await read_model(request, ctx.settings.max_body, Send)
    records, delay, priority, dedup_id = body.records, body.delay or 0, body.priority, body.dedup_id
    if dedup_id is not None:
        check_dedup_id(dedup_id)
    default_partition, producer_id = body.partition, body.producer
    if producer_id is not None:
        check_name("producer", producer_id)
    # Group records by what picks their partition, keeping their order.
    routes: dict[tuple, tuple[list[int], list[Any]]] = {}
    for i, item in enumerate(records):
        value, partition, key = item.to_record(f"records[{i}]")
        partition = default_partition if partition is None else partition
        route = ("p", partition) if partition is not None else ("k", key) if key is not None else ("spread",)
        slot = routes.setdefault(route, ([], []))
        slot[0].append(i)
        slot[1].append(value)
    producer = ctx.producer(producer_id)

    def prepare_and_open() -> tuple[list[Prepared], tuple[str, int] | None]:
        # Every record is checked (against the shape a missing topic will
        # get) before anything is made: a refused send writes nothing.
        prepared = [
            prepare_send(
                ctx.log, topic, values, **_placement(route), delay=delay, producer=producer, priority=priority
            )
            for route, (_, values) in routes.items()
        ]
        if ctx.log.catalog.get(topic) is None and ctx.log.store.topic(topic) is None:
            ctx.log.catalog.ensure(topic)  # a send makes a missing topic (the auto-create policy)
        ctx.queue(topic, group)
        return prepared, None if dedup_id is None else dedup_write(ctx.log, topic, dedup_id)

    prepared, dedup = await ctx.run(prepare_and_open)
    if dedup is None:
        sent = await ctx.writer.write(lambda: prepared)
    else:
        sent = await ctx.writer.write(lambda: prepared, *dedup)
    placed: list[Any] = [None] * len(records)
    for (indices, _), s in zip(routes.values(), sent):
        for j, i in enumerate(indices):
            placed[i] = {"partition": s.partition, "offset": s.first_offset + j}
    return json_response({"topic": topic, "timestamp": sent[0].timestamp, "records": placed})


async def receive(request: Request) -> Response:
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    limit = query_limit(request, "max", 1, MAX_RECEIVE)
    visibility = query_seconds(request, "visibility_timeout")
    if visibility is not None:
        check_visibility_timeout(visibility)  # before the group is opened: a refused receive registers none
    wait = query_wait(request, ctx.settings.max_wait)
    queue = await ctx.run(ctx.queue, topic, group)
    got, next_due = await receive_deliveries(ctx, queue, limit, visibility, wait)
    ctx.metrics.records_read(topic, len(got))
    if got:
        ctx.metrics.deliveries.labels(topic, group).inc(len(got))
    return json_response({"messages": [delivery_out(group, d) for d in got], "next_due": next_due})


async def _settle_body(request: Request, known: set[str]) -> tuple[Context, str, str, dict[str, Any]]:
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, known)
    return ctx, topic, group, body


async def _existing(ctx: Context, topic: str, group: str) -> Queue:
    """The group's handle, once the request passed its checks; settling never makes a group."""
    return await ctx.run(ctx.queue, topic, group, None, create=False)


def _one_or_many(body: dict[str, Any]) -> str | list[Any]:
    """The body's `receipt`, or its `receipts` (1 to MAX_RECEIVE of them)."""
    if ("receipt" in body) == ("receipts" in body):
        raise InvalidRequest("send exactly one of 'receipt' and 'receipts'")
    if "receipt" in body:
        return field(body, "receipt", str)
    tokens: list[Any] = field(body, "receipts", list)
    if not tokens or len(tokens) > MAX_RECEIVE:
        raise InvalidRequest(f"field 'receipts' must hold 1 to {MAX_RECEIVE} receipts")
    return tokens


def _failure(index: int, e: TidelogError) -> dict[str, Any]:
    return {"index": index, "error": {"code": e.code, "message": str(e)}}


def _settle_many(
    queue: Queue, tokens: list[Any], settle: Callable[[list[Delivery]], list[Any]]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Settle the receipts in one store transaction (`settle` is a `Queue.*_many`);
    (what each settled one returned, the failures by index in the request)."""
    indexes: list[int] = []
    deliveries: list[Delivery] = []
    failed: list[dict[str, Any]] = []
    for i, token in enumerate(tokens):
        try:
            deliveries.append(receipts.delivery(receipts.decode(token, queue.group, queue.topic)))
            indexes.append(i)
        except TidelogError as e:
            failed.append(_failure(i, e))
    done: list[Any] = []
    for i, result in zip(indexes, settle(deliveries) if deliveries else []):
        if isinstance(result, TidelogError):
            failed.append(_failure(i, result))
        else:
            done.append(result)
    failed.sort(key=lambda f: f["index"])
    return done, failed


async def ack(request: Request) -> Response:
    """Ack one receipt (`receipt`), or many (`receipts`: in one store
    transaction, each acked or failed on its own)."""
    ctx, topic, group, body = await _settle_body(request, {"receipt", "receipts"})
    tokens = _one_or_many(body)
    if isinstance(tokens, str):
        r = receipts.decode(tokens, group, topic)
        queue = await _existing(ctx, topic, group)
        await ctx.run(queue.ack, receipts.delivery(r))
        ctx.metrics.acks.labels(queue.topic, queue.group).inc()
        return json_response({"acked": 1})
    queue = await _existing(ctx, topic, group)
    done, failed = await ctx.run(_settle_many, queue, tokens, queue.ack_many)
    if done:
        ctx.metrics.acks.labels(queue.topic, queue.group).inc(len(done))
    return json_response({"acked": len(done), "failed": failed})


def _due_to_nack(ctx: Context, due: int) -> dict[str, Any]:
    """An absolute due time (ms, the server's clock) as nack's arguments.

    A due time further ahead than a nack's delay may go is held to it (12
    hours): the http:// store sends its client's due time, and the two
    clocks may differ by a little."""
    if due == 0:
        return {}
    now = ctx.log.clock()
    if due <= now:
        return {"back": True}
    # + 0.5 ms: the core turns seconds back into whole milliseconds by truncation.
    return {"delay": min((due - now + 0.5) / 1000, MAX_VISIBILITY_S)}


async def nack(request: Request) -> Response:
    """Available again: at the front (default), at the back, after `delay` s, or
    at `due` (ms); one `receipt`, or many `receipts` in one store transaction."""
    ctx, topic, group, body = await _settle_body(request, {"receipt", "receipts", "back", "delay", "due"})
    tokens = _one_or_many(body)
    back = field(body, "back", bool, default=False)
    delay = number_field(body, "delay", default=None)
    due = int_field(body, "due", 0, default=None)
    if sum((back, delay is not None, due is not None)) > 1:
        raise InvalidRequest("send at most one of 'back', 'delay' and 'due'")
    if delay is not None:
        check_seconds("delay", delay, MAX_VISIBILITY_S)
    if due is not None:
        check_time_ms("due", due)
    options: dict[str, Any] = {"back": back, "delay": delay} if due is None else _due_to_nack(ctx, due)
    if isinstance(tokens, str):
        r = receipts.decode(tokens, group, topic)
        queue = await _existing(ctx, topic, group)
        await ctx.run(lambda: queue.nack(receipts.delivery(r), **options))
        return json_response({"released": True})
    queue = await _existing(ctx, topic, group)
    done, failed = await ctx.run(_settle_many, queue, tokens, lambda ds: queue.nack_many(ds, **options))
    return json_response({"released": len(done), "failed": failed})


async def extend(request: Request) -> Response:
    """Push the lease out to `seconds` from now, or to `deadline` (ms, the
    server's clock, held to 12 hours ahead as `due` is); one `receipt`, or
    many `receipts` in one store transaction."""
    ctx, topic, group, body = await _settle_body(request, {"receipt", "receipts", "seconds", "deadline"})
    tokens = _one_or_many(body)
    if ("seconds" in body) == ("deadline" in body):
        raise InvalidRequest("send exactly one of 'seconds' and 'deadline'")
    if "seconds" in body:
        seconds = check_seconds("seconds", number_field(body, "seconds"), MAX_VISIBILITY_S)
    else:
        deadline = check_time_ms("deadline", int_field(body, "deadline", 0))
        seconds = min(max(0.0, (deadline - ctx.log.clock() + 0.5) / 1000), MAX_VISIBILITY_S)
    if isinstance(tokens, str):
        r = receipts.decode(tokens, group, topic)
        queue = await _existing(ctx, topic, group)
        d = await ctx.run(queue.extend, receipts.delivery(r), seconds)
        return json_response({"lease_deadline": d.lease_deadline})
    queue = await _existing(ctx, topic, group)
    done, failed = await ctx.run(_settle_many, queue, tokens, lambda ds: queue.extend_many(ds, seconds))
    deadline_out = done[0].lease_deadline if done else None
    return json_response({"extended": len(done), "lease_deadline": deadline_out, "failed": failed})


async def reject(request: Request) -> Response:
    """Straight to the dead-letter topic, with headers naming where it came from."""
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    body = await read_model(request, ctx.settings.max_body, Reject)
    r = receipts.decode(body.receipt, group, topic)
    reason = "rejected" if body.reason is None else body.reason
    queue = await _existing(ctx, topic, group)

    def do() -> int:
        rows = ctx.log.read(r.topic, r.partition, after=r.offset - 1, limit=1) if r.offset else []
        if not rows or rows[0].offset != r.offset:
            raise LeaseLost(f"record {r.topic!r}/{r.partition} offset {r.offset} no longer exists")
        return queue.reject(receipts.delivery(r, rows[0]), reason)

    offset = await ctx.run(do)
    ctx.metrics.dead_letters.labels(queue.topic, queue.group).inc()
    return json_response({"dead_letter": queue.dead_letter, "offset": offset})


async def stats(request: Request) -> Response:
    """The group's figures; a read: it opens (registers) no group."""
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    s = await ctx.run(queue_stats, ctx.log, topic, group)
    return json_response({"topic": topic, "group": group, **s._asdict()})


async def list_queues(request: Request) -> Response:
    """The queue groups of the log, or of `?topic=`, oldest first on each topic."""
    ctx = ctx_of(request)
    raw = request.query_params.get("topic")
    topic = check_name("topic", raw) if raw else None
    found = await ctx.run(ctx.log.queue_groups, topic)
    return json_response({"queues": [{"topic": t, "group": g} for t, g in found]})


async def peek_queue(request: Request) -> Response:
    """Up to `max` records the group holds for a receive, leasing nothing."""
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    limit = query_limit(request, "max", 10, MAX_PEEK)
    got = await ctx.run(peek, ctx.log, topic, group, limit)
    out = []
    for p in got:
        item = row_to_wire(topic, p.message.partition, p.message, raw_json)
        item.update(delivery_count=p.delivery_count, due=p.due, priority=p.priority, delayed=p.delayed)
        out.append(item)
    return json_response({"topic": topic, "group": group, "messages": out})


async def leased(request: Request) -> Response:
    """Up to `max` records the group has leased now, by partition and offset."""
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    limit = query_limit(request, "max", 100, 10_000)
    got = await ctx.run(in_flight, ctx.log, topic, group, limit)
    return json_response({"topic": topic, "group": group, "leases": [p._asdict() for p in got]})


async def purge_queue(request: Request) -> Response:
    """Finish every record the group holds now (waiting, delayed, in flight), in one transaction."""
    ctx = ctx_of(request)
    topic, group = topic_and_group(request)
    raw = await read_body(request, ctx.settings.max_body)
    if raw.strip():  # no body, or one with no fields
        decode(raw, Empty)
    purged = await ctx.run(purge, ctx.log, topic, group)
    return json_response({"topic": topic, "group": group, "purged": purged})


routes = [
    Route("/v1/queues", list_queues, methods=["GET"]),
    Route("/v1/queues/{topic}", open_queue, methods=["POST"]),
    Route("/v1/queues/{topic}/messages", send, methods=["POST"]),
    Route("/v1/queues/{topic}/receive", receive, methods=["POST"]),
    Route("/v1/queues/{topic}/ack", ack, methods=["POST"]),
    Route("/v1/queues/{topic}/nack", nack, methods=["POST"]),
    Route("/v1/queues/{topic}/extend", extend, methods=["POST"]),
    Route("/v1/queues/{topic}/reject", reject, methods=["POST"]),
    Route("/v1/queues/{topic}/stats", stats, methods=["GET"]),
    Route("/v1/queues/{topic}/peek", peek_queue, methods=["GET"]),
    Route("/v1/queues/{topic}/in-flight", leased, methods=["GET"]),
    Route("/v1/queues/{topic}/purge", purge_queue, methods=["POST"]),
]
