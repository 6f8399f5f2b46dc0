"""The console's actions: produce a test record, reset a stream group's
offsets (after a confirmation), redrive dead letters.

Each goes through the core call and the validation `/v1` uses (a form
becomes the same wire record `/v1` reads; reset and redrive are the same
core functions). On success the browser is sent back to the page with a
notice; on bad input the page is shown again with the error, and nothing
changed. Each form is checked to come from the console's own page first
(forms.py: its Origin and CSRF token).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from ....config import check_name
from ....deadletters import redrive
from ....errors import InvalidRequest, TidelogError
from ....resets import TARGETS, plan_reset, reset_offsets
from ....wire import record_in
from ..errors import status_for
from ..responses import ctx_of
from . import figures, pages
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


async def redrive_dead_letters(request: Request) -> Response:
    ctx = ctx_of(request)
    topic, group = request.path_params["topic"], request.path_params["group"]
    form = await read_form(request)
    history = request.app.state.console_history
    try:
        check_name("topic", topic)
        q = await ctx.run(figures.queue_group, ctx.log, topic, group)
        offsets = None
        if form.get("which") != "all":
            raw = form.getlist("offset")
            if not raw:
                raise InvalidRequest("select the dead letters to redrive (or redrive all)")
            try:
                offsets = [int(str(o)) for o in raw]
            except ValueError:
                raise InvalidRequest(f"dead-letter offsets are whole numbers, not {raw!r}") from None
        result = await ctx.run(redrive, ctx.log, q.dead_letter, offsets, origin=topic)
    except TidelogError as e:
        return await _again(request, "queue.html", pages.queue_group, history, topic, group, error=e)
    where = ", ".join(f"{m.topic}/{m.partition}@{m.offset}" for m in result.moved[:20])
    more = f" and {len(result.moved) - 20} more" if len(result.moved) > 20 else ""
    return done(
        f"/console/queues/{topic}/{group}",
        f"Redrove {len(result.moved)} dead letter(s) to {topic}" + (f": {where}{more}." if where else "."),
    )
