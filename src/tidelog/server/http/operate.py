"""Operating on consumers over HTTP: redrive or purge dead letters (each with
a dry run), reset a stream group's offsets. Thin translations of
`tidelog.deadletters.redrive` and `purge` and `tidelog.resets.reset_offsets`
(the console calls the same core functions)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...config import check_name
from ...deadletters import Purged, Redriven, purge, redrive
from ...log import GroupLag
from ...resets import reset_offsets
from .bodies import field, int_field, json_object, no_unknown
from .responses import ctx_of, json_response


def redriven_out(result: Redriven) -> dict[str, Any]:
    return {
        "dead_letter": result.dead_letter,
        "moved": [m._asdict() for m in result.moved],
        "skipped": result.skipped,
        "dry_run": result.dry_run,
    }


def purged_out(result: Purged) -> dict[str, Any]:
    return result._asdict()


async def _dead_letter_body(request: Request) -> tuple[list[Any] | None, str | None, bool]:
    """A redrive's or purge's body: which dead letters (`offsets`, `origin`), and `dry_run`."""
    ctx = ctx_of(request)
    body = await json_object(request, ctx.settings.max_body) if await request.body() else {}
    no_unknown(body, {"offsets", "origin", "dry_run"})
    offsets = field(body, "offsets", list, default=None)
    origin = field(body, "origin", str, default=None)
    dry_run = field(body, "dry_run", bool, default=False)
    return offsets, origin, dry_run


def lag_out(rows: list[GroupLag]) -> list[dict[str, Any]]:
    return [r._asdict() for r in rows]


async def redrive_topic(request: Request) -> Response:
    """Move dead letters of this dead-letter topic back to their origin topics."""
    ctx = ctx_of(request)
    dead_letter = check_name("topic", request.path_params["topic"])
    offsets, origin, dry_run = await _dead_letter_body(request)
    result = await ctx.run(lambda: redrive(ctx.log, dead_letter, offsets, origin=origin, dry_run=dry_run))
    return json_response(redriven_out(result))


async def purge_topic(request: Request) -> Response:
    """Remove dead letters of this dead-letter topic without moving them."""
    ctx = ctx_of(request)
    dead_letter = check_name("topic", request.path_params["topic"])
    offsets, origin, dry_run = await _dead_letter_body(request)
    result = await ctx.run(lambda: purge(ctx.log, dead_letter, offsets, origin=origin, dry_run=dry_run))
    return json_response(purged_out(result))


async def reset_group(request: Request) -> Response:
    """Reset a stream group's committed offsets on a topic; refused (409) while it has live members."""
    ctx = ctx_of(request)
    group = check_name("group", request.path_params["group"])
    body = await json_object(request, ctx.settings.max_body)
    no_unknown(body, {"topic", "to", "value", "partition"})
    topic = check_name("topic", field(body, "topic", str))
    to = field(body, "to", str)
    value = int_field(body, "value", 0, default=None)
    partition = int_field(body, "partition", 0, default=None)
    rows = await ctx.run(reset_offsets, ctx.log, group, topic, to, value, partition)
    return json_response({"group": group, "topic": topic, "partitions": lag_out(rows)})


routes = [
    Route("/v1/topics/{topic}/redrive", redrive_topic, methods=["POST"]),
    Route("/v1/topics/{topic}/purge", purge_topic, methods=["POST"]),
    Route("/v1/groups/{group}/reset", reset_group, methods=["POST"]),
]
