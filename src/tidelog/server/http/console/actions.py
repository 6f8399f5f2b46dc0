"""The console's actions: produce a test record, reset a stream group's
offsets, and on a queue group's page what `tidelog queues` does from the
shell: send, receive (shown with Ack and Nack), ack, nack, purge, and
redrive or purge dead letters. What changes or removes records in bulk
(reset, purge, redrive, dead-letter purge) first shows what it will do and
asks; the confirmed form carries exactly what was shown.

Each goes through the core call and the validation `/v1` uses (a form
becomes the same wire record `/v1` reads; reset, redrive and purge are the
same core functions; receipts are `/v1`'s tokens). On success the browser
is sent back to the page with a notice; on bad input the page is shown
again with the error, and nothing changed. Each form is checked to come
from the console's own page first (forms.py: its Origin and CSRF token).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from ....bounds import MAX_PRIORITY, check_priority, check_visibility_timeout
from ....config import check_name
from ....deadletters import MAX_REDRIVE, purge, redrive
from ....errors import InvalidRequest, TidelogError
from ....queues import purge as purge_queue
from ....queues import queue_stats
from ....resets import TARGETS, plan_reset, reset_offsets
from ....wire import record_in
from .. import receipts
from ..errors import status_for
from ..responses import ctx_of
from . import figures, pages, text
from .forms import read_form
from .render import done, page


async def _again(
    request: Request, template: str, build: Any, *args: Any, error: TidelogError, **extra: Any
) -> Response:
    """The page the action came from, with the error, showing the log as it is (unchanged)."""
    ctx = ctx_of(request)
    try:
        context = await ctx.run(build, ctx.log, *args)
    except TidelogError as e:
        return page(request, "error.html", status_for(e), problem=f"{error} ({e})")
    return page(request, template, status_for(error), error=str(error), **context, **extra)


def _headers(raw: str) -> dict[str, str] | None:
    """Headers typed one a line as `name: value`."""
    out: dict[str, str] = {}
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise InvalidRequest(f"header line {n} must read 'name: value', not {line!r}")
        out[name.strip()] = value.strip()
    return out or None


def record_from_form(form: FormData) -> dict[str, Any]:
    """The produce form as a `/v1` wire record."""
    fmt = str(form.get("format", "json"))
    raw = str(form.get("value", ""))
    item: dict[str, Any] = {"format": fmt}
    if fmt == "json":
        try:
            item["value"] = json.loads(raw)
        except ValueError as e:
            raise InvalidRequest(
                f"the value is not valid JSON ({e}); choose the text format to send it as is"
            ) from None
    else:
        item["value"] = raw
    key = str(form.get("key", ""))
    if key:
        item["key"] = key
    headers = _headers(str(form.get("headers", "")))
    if headers:
        item["headers"] = headers
    partition = str(form.get("partition", "")).strip()
    if partition:
        try:
            item["partition"] = int(partition)
        except ValueError:
            raise InvalidRequest(f"partition must be a whole number, not {partition!r}") from None
    return item


async def produce(request: Request) -> Response:
    ctx = ctx_of(request)
    name = request.path_params["topic"]
    form = await read_form(request)
    args = {"partition": str(form.get("partition", "") or "0")}
    try:
        check_name("topic", name)
        value, partition, key = record_in(record_from_form(form), "the record")
        producer = ctx.producer(None)
        sent = await ctx.writer.write(lambda: [producer.prepare(name, [value], key=key, partition=partition)])
    except TidelogError as e:
        return await _again(
            request, "topic.html", pages.topic, request.app.state.console_history, name, args, error=e
        )
    s = sent[0]
    return done(
        f"/console/topics/{name}?partition={s.partition}",
        f"Produced a record to {name}/{s.partition} at offset {s.first_offset}.",
    )


def _reset_args(form: FormData) -> tuple[str, str, int | None, int | None]:
    topic = str(form.get("topic", ""))
    to = str(form.get("to", ""))
    if to not in TARGETS:
        raise InvalidRequest(f"reset to one of {', '.join(TARGETS)}, not {to!r}")
    value: int | None = None
    if to == "offset":
        raw = str(form.get("offset", "")).strip()
        try:
            value = int(raw)
        except ValueError:
            raise InvalidRequest(f"the offset must be a whole number, not {raw!r}") from None
    elif to == "time":
        value = pages.parse_time(str(form.get("time", "")), "the time")
    raw_partition = str(form.get("partition", "")).strip()
    try:
        partition = int(raw_partition) if raw_partition else None
    except ValueError:
        raise InvalidRequest(f"partition must be a whole number, not {raw_partition!r}") from None
    return topic, to, value, partition


async def reset(request: Request) -> Response:
    """First the plan and a confirmation; with `confirm`, the reset."""
    ctx = ctx_of(request)
    group = request.path_params["group"]
    form = await read_form(request)
    history = request.app.state.console_history
    try:
        topic, to, value, partition = _reset_args(form)
        if form.get("confirm") != "yes":
            plan = await ctx.run(plan_reset, ctx.log, group, topic, to, value, partition)
            return page(
                request,
                "confirm_reset.html",
                group=group,
                topic=topic,
                plan=plan,
                form={k: str(v) for k, v in form.items()},
            )
        rows = await ctx.run(reset_offsets, ctx.log, group, topic, to, value, partition)
    except TidelogError as e:
        return await _again(request, "group.html", pages.stream_group, history, group, error=e)
    moved = ", ".join(f"{r.topic}/{r.partition} → {r.committed}" for r in rows)
    return done(f"/console/groups/{group}", f"Reset the committed offsets of {group}: {moved}.")


def _number(form: FormData, name: str, label: str, default: str) -> float:
    raw = str(form.get(name, "") or default).strip()
    try:
        return float(raw)
    except ValueError:
        raise InvalidRequest(f"{label} must be a number, not {raw!r}") from None


async def _queue_again(request: Request, error: TidelogError, **extra: Any) -> Response:
    topic, group = request.path_params["topic"], request.path_params["group"]
    history = request.app.state.console_history
    return await _again(request, "queue.html", pages.queue_group, history, topic, group, error=error, **extra)


def _queue_page(topic: str, group: str, anchor: str = "") -> str:
    return f"/console/queues/{topic}/{group}" + (f"#{anchor}" if anchor else "")


async def queue_send(request: Request) -> Response:
    """Send one message to the queue's topic, with a delay and a priority."""
    ctx = ctx_of(request)
    topic, group = request.path_params["topic"], request.path_params["group"]
    form = await read_form(request)
    try:
        check_name("topic", topic)
        item = record_from_form(form)
        item.pop("partition", None)
        value, _, key = record_in(item, "the message")
        delay = _number(form, "delay", "the delay", "0")
        raw_priority = str(form.get("priority", "0") or "0")
        try:
            priority = check_priority(int(raw_priority))
        except ValueError:
            raise InvalidRequest(
                f"priority is a whole number from 0 to {MAX_PRIORITY}, not {raw_priority!r}"
            ) from None
        queue = await ctx.run(figures.queue_handle, ctx.log, topic, group)
        sent = await ctx.writer.write(
            lambda: [queue.prepare([value], key=key, delay=delay, priority=priority)]
        )
    except TidelogError as e:
        return await _queue_again(request, e)
    s = sent[0]
    return done(
        _queue_page(topic, group, "waiting-h"),
        f"Sent a message to {topic}/{s.partition} at offset {s.first_offset}"
        + (f", due in {delay:g} s." if delay else "."),
    )


async def queue_receive(request: Request) -> Response:
    """Lease messages and show them with their receipts (Ack, Nack); no redirect: the page is the answer."""
    ctx = ctx_of(request)
    topic, group = request.path_params["topic"], request.path_params["group"]
    form = await read_form(request)
    try:
        check_name("topic", topic)
        raw = str(form.get("max", "1") or "1").strip()
        if not raw.isdigit() or not 1 <= int(raw) <= 10:
            raise InvalidRequest(f"how many must be a whole number from 1 to 10, not {raw!r}")
        visibility = check_visibility_timeout(
            _number(form, "visibility_timeout", "the visibility timeout", "30")
        )
        queue = await ctx.run(figures.queue_handle, ctx.log, topic, group)
        got = await ctx.run(queue.receive, int(raw), 0, visibility)
        history = request.app.state.console_history
        context = await ctx.run(pages.queue_group, ctx.log, history, topic, group)
    except TidelogError as e:
        return await _queue_again(request, e)
    context["received"] = [(d, receipts.encode(group, d)) for d in got]
    # The page's figures and charts go on refreshing, as on the page itself.
    context["live"] = f"/console/api/queues/{topic}/{group}"
    context["refresh_ms"] = request.app.state.console_refresh_ms
    return page(request, "queue.html", **context)


async def _settle(request: Request, verb: str) -> Response:
    ctx = ctx_of(request)
    topic, group = request.path_params["topic"], request.path_params["group"]
    form = await read_form(request)
    try:
        check_name("topic", topic)
        r = receipts.decode(str(form.get("receipt", "")), group, topic)
        queue = await ctx.run(figures.queue_handle, ctx.log, topic, group)
        d = receipts.delivery(r)
        await ctx.run(queue.ack if verb == "ack" else queue.nack, d)
    except TidelogError as e:
        return await _queue_again(request, e)
    said = "Acked" if verb == "ack" else "Handed out again (nack)"
    return done(_queue_page(topic, group, "work-h"), f"{said}: {topic}/{r.partition} offset {r.offset}.")


async def queue_ack(request: Request) -> Response:
    return await _settle(request, "ack")


async def queue_nack(request: Request) -> Response:
    return await _settle(request, "nack")


async def queue_purge(request: Request) -> Response:
    """First the counts and a confirmation; with `confirm`, the purge."""
    ctx = ctx_of(request)
    topic, group = request.path_params["topic"], request.path_params["group"]
    form = await read_form(request)
    try:
        check_name("topic", topic)
        await ctx.run(figures.queue_group, ctx.log, topic, group)  # UnknownGroup
        if form.get("confirm") != "yes":
            s = await ctx.run(queue_stats, ctx.log, topic, group)
            return page(
                request,
                "confirm.html",
                title=f"Purge {group}?",
                step="purge",
                back=_queue_page(topic, group),
                back_label=group,
                question=(
                    f"This finishes every record queue group {group} holds on {topic}: {s.available:,} "
                    f"available, {s.in_flight:,} in flight (their acks become no-ops), {s.delayed:,} delayed. "
                    f"The records stay in {topic} for its other groups; {group} gets what is appended "
                    "from now on."
                ),
                columns=[],
                rows=[],
                more=0,
                action=f"/console/queues/{topic}/{group}/purge",
                hidden=[],
                button=f"Purge {group}",
            )
        purged = await ctx.run(purge_queue, ctx.log, topic, group)
    except TidelogError as e:
        return await _queue_again(request, e)
    return done(_queue_page(topic, group), f"Purged {purged:,} record(s) of {group} on {topic}.")


PREVIEW_ROWS = 200  # dead letters a confirmation lists (it moves all it counted)


def _picked(form: FormData) -> list[int] | None:
    """The dead letters a form names: None for all, else the offsets ticked."""
    if form.get("which") == "all":
        return None
    raw = form.getlist("offset")
    if not raw:
        raise InvalidRequest("select the dead letters (or choose all)")
    if len(raw) > MAX_REDRIVE:
        raise InvalidRequest(f"select at most {MAX_REDRIVE} dead letters at once")
    try:
        return [int(str(o)) for o in raw]
    except ValueError:
        raise InvalidRequest(f"dead-letter offsets are whole numbers, not {raw[:5]!r}") from None


def _redrive_plan(
    log: Any, dead_letter: str, offsets: list[int] | None, topic: str
) -> tuple[list[int], list[list[str]]]:
    plan = redrive(log, dead_letter, offsets, origin=topic, dry_run=True)
    rows = [[f"{dead_letter}@{m.dead_letter_offset}", f"{m.topic}/{m.partition}"] for m in plan.moved]
    return [m.dead_letter_offset for m in plan.moved], rows


def _purge_plan(
    log: Any, dead_letter: str, offsets: list[int] | None, topic: str
) -> tuple[list[int], list[list[str]]]:
    plan = purge(log, dead_letter, offsets, origin=topic, dry_run=True)
    return plan.removed, [[f"{dead_letter}@{o}", "removed for good"] for o in plan.removed]


async def _dead_letters(request: Request, verb: str) -> Response:
    """Redrive or purge dead letters: first the plan (a dry run) and a
    confirmation naming each; confirmed, the exact offsets planned."""
    ctx = ctx_of(request)
    topic, group = request.path_params["topic"], request.path_params["group"]
    form = await read_form(request)
    redriving = verb == "redrive"
    try:
        check_name("topic", topic)
        q = await ctx.run(figures.queue_group, ctx.log, topic, group)
        offsets = _picked(form)
        if form.get("confirm") != "yes":
            plan = _redrive_plan if redriving else _purge_plan
            picked, rows = await ctx.run(plan, ctx.log, q.dead_letter, offsets, topic)
            if not picked:
                raise InvalidRequest(f"no dead letter from {topic} in {q.dead_letter} to {verb}")
            many = text.count(len(picked))
            return page(
                request,
                "confirm.html",
                title=f"Redrive {many} dead letter(s) to {topic}?"
                if redriving
                else f"Purge {many} dead letter(s) from {q.dead_letter}?",
                step=verb,
                back=_queue_page(topic, group, "dead-letters"),
                back_label=group,
                question=f"Each is appended to {topic} again (key, headers and the origin headers kept) and "
                f"removed from {q.dead_letter}; every group of {topic} reads it."
                if redriving
                else f"Each is removed from {q.dead_letter} for good; nothing is appended.",
                columns=["Dead letter", "Goes to"],
                rows=rows[:PREVIEW_ROWS],
                more=max(0, len(rows) - PREVIEW_ROWS),
                action=f"/console/queues/{topic}/{group}/"
                + ("redrive" if redriving else "purge-dead-letters"),
                hidden=[("offset", o) for o in picked],
                button="Redrive" if redriving else "Purge for good",
            )
        if not redriving:
            removed = await ctx.run(lambda: purge(ctx.log, q.dead_letter, offsets, origin=topic).removed)
            return done(
                _queue_page(topic, group, "dead-letters"),
                f"Purged {len(removed):,} dead letter(s) from {q.dead_letter}.",
            )
        moved = await ctx.run(lambda: redrive(ctx.log, q.dead_letter, offsets, origin=topic).moved)
    except TidelogError as e:
        return await _queue_again(request, e)
    where = ", ".join(f"{m.topic}/{m.partition}@{m.offset}" for m in moved[:20])
    more = f" and {len(moved) - 20} more" if len(moved) > 20 else ""
    return done(
        _queue_page(topic, group),
        f"Redrove {len(moved)} dead letter(s) to {topic}" + (f": {where}{more}." if where else "."),
    )


async def redrive_dead_letters(request: Request) -> Response:
    return await _dead_letters(request, "redrive")


async def purge_dead_letters(request: Request) -> Response:
    return await _dead_letters(request, "purge")
