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

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import results
from ...config import check_name
from ...errors import InvalidRequest
from ...results import DONE
from .bodies import decode, read_body, read_model
from .models import Empty, FinishJob, StartJob
from .responses import ctx_of, json_response

DEFAULT_QUEUE = "jobs"


def _job(request: Request) -> tuple[str, str, str]:
    """(queue topic, group, job id) of a request, each checked."""
    topic = check_name("queue", request.query_params.get("queue") or DEFAULT_QUEUE)
    group = check_name("group", request.query_params.get("group") or topic)
    job = request.path_params["job"]
    results.parse_job_id(job)
    return topic, group, job


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
    raw = await read_body(request, ctx.settings.max_body)
    if raw.strip():  # no body, or one with no fields
        decode(raw, Empty)
    ttl = int(results.DEFAULT_RESULT_TTL_S * 1000)
    found = await ctx.run(results.cancel, ctx.log, topic, group, job, ttl)
    return json_response(found.to_json())


async def start_job(request: Request) -> Response:
    """A runner's claim before it runs the job: the job's row after it (state running, or why not)."""
    ctx = ctx_of(request)
    topic, group, job = _job(request)
    body = await read_model(request, ctx.settings.max_body, StartJob)
    attempts, ttl = body.attempts, body.ttl_ms
    row = await ctx.run(results.start, ctx.log, topic, group, job, attempts, ttl)
    return json_response(_row(row))


async def finish_job(request: Request) -> Response:
    """A runner's record of how a run ended: done with a result, failed or dead-lettered with an error."""
    ctx = ctx_of(request)
    topic, group, job = _job(request)
    body = await read_model(request, ctx.settings.max_body, FinishJob)
    state, attempts, ttl = body.state, body.attempts, body.ttl_ms
    # Present or not is what counts: a handler's result may be null.
    end = {k: v for k, v in (("result", body.result), ("error", body.error)) if v is not UNSET}
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
