"""What became of a job, over HTTP: /v1/jobs/{id}?queue=...

A thin translation of `tidelog.results`: the status (with the handler's
value or its failure), a cancel, and the two records a runner writes around
a run (start, finish), which the http:// store forwards so that a runner on
a client keeps the same states as one on the server's file. `queue` is the
job runner's queue (default "jobs"), `group` its queue group (default: the
queue's name).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import results
from ...config import check_name
from ...errors import InvalidRequest
from ...results import DONE, FAILED
from .bodies import field, int_field, no_unknown, parse_json, read_body
from .responses import ctx_of, json_response

DEFAULT_QUEUE = "jobs"
MAX_TTL_MS = int(results.MAX_RESULT_TTL_S * 1000)


def _job(request: Request) -> tuple[str, str, str]:
    """(queue topic, group, job id) of a request, each checked."""
    topic = check_name("queue", request.query_params.get("queue") or DEFAULT_QUEUE)
    group = check_name("group", request.query_params.get("group") or topic)
    job = request.path_params["job"]
    results.parse_job_id(job)
    return topic, group, job


async def _body(request: Request, allowed: set[str], optional: bool = False) -> dict[str, Any]:
    raw = await read_body(request, ctx_of(request).settings.max_body)
    if optional and not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    no_unknown(body, allowed)
    return body


def _row(row: Any) -> dict[str, Any]:
    return row._asdict()


async def job_status(request: Request) -> Response:
    """The job's status, attempts, and its result (done) or error (failed, dead-lettered)."""
    ctx = ctx_of(request)
    topic, group, job = _job(request)
    found = await ctx.run(results.info, ctx.log, topic, group, job)
    return json_response(found.to_json())


async def cancel_job(request: Request) -> Response:
    """Cancel a job that has not started (409 when it runs or has finished)."""
    ctx = ctx_of(request)
    topic, group, job = _job(request)
    await _body(request, set(), optional=True)
    ttl = int(results.DEFAULT_RESULT_TTL_S * 1000)
    found = await ctx.run(results.cancel, ctx.log, topic, group, job, ttl)
    return json_response(found.to_json())


async def start_job(request: Request) -> Response:
    """A runner's claim before it runs the job: the job's row after it (state running, or why not)."""
    ctx = ctx_of(request)
    topic, group, job = _job(request)
    body = await _body(request, {"attempts", "ttl_ms"})
    attempts = int_field(body, "attempts", 1, (1 << 31) - 1)
    ttl = int_field(body, "ttl_ms", 1, MAX_TTL_MS)
    row = await ctx.run(results.start, ctx.log, topic, group, job, attempts, ttl)
    return json_response(_row(row))


async def finish_job(request: Request) -> Response:
    """A runner's record of how a run ended: done with a result, failed or dead-lettered with an error."""
    ctx = ctx_of(request)
    topic, group, job = _job(request)
    body = await _body(request, {"state", "result", "error", "attempts", "ttl_ms"})
    state = field(body, "state", str)
    if state not in (DONE, FAILED, results.DEAD_LETTERED):
        raise InvalidRequest(f"state must be done, failed or dead-lettered, got {state[:40]!r}")
    attempts = int_field(body, "attempts", 1, (1 << 31) - 1)
    ttl = int_field(body, "ttl_ms", 1, MAX_TTL_MS)
    end = {k: body[k] for k in ("result", "error") if k in body}
    if "error" in end:
        field(body, "error", str)
    if state != DONE and "result" in end:
        raise InvalidRequest(f"a job that is {state} has an error, not a result")
    row = await ctx.run(results.finish, ctx.log, topic, group, job, state, end, attempts, ttl)
    return json_response(_row(row))


routes = [
    Route("/v1/jobs/{job}", job_status, methods=["GET"]),
    Route("/v1/jobs/{job}/cancel", cancel_job, methods=["POST"]),
    Route("/v1/jobs/{job}/start", start_job, methods=["POST"]),
    Route("/v1/jobs/{job}/finish", finish_job, methods=["POST"]),
]
