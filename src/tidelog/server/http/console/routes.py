"""The console's routes: pages (GET), their live figures (/console/api/...),
login and logout. The actions (POST) are in `actions`."""

from __future__ import annotations

import functools
import hmac
import math
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ....errors import TidelogError
from ..auth import SESSION_COOKIE, session_cookie
from ..bodies import query_dict
from ..errors import Forbidden, TooManyRequests, status_for
from ..responses import ctx_of
from . import actions, pages
from .forms import read_form
from .history import History
from .render import page


def history_of(request: Request) -> History:
    return request.app.state.console_history


async def _build(request: Request, build: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    ctx = ctx_of(request)
    return await ctx.run(build, ctx.log, *args)


async def _page(
    request: Request, template: str, build: Callable[..., dict[str, Any]], *args: Any
) -> Response:
    try:
        context = await _build(request, build, *args)
    except TidelogError as e:
        return page(request, "error.html", status_for(e), problem=str(e))
    if "fields" in context:  # a page with live figures: its script refreshes them from the twin
        context["live"] = "/console/api" + request.url.path.removeprefix("/console")
        if request.url.query:
            context["live"] += "?" + request.url.query
        context["refresh_ms"] = request.app.state.console_refresh_ms
    return page(request, template, **context)


async def _api(request: Request, build: Callable[..., dict[str, Any]], *args: Any) -> Response:
    try:
        context = await _build(request, build, *args)
    except TidelogError as e:
        return JSONResponse({"error": str(e)}, status_for(e))
    return JSONResponse(
        {"fields": context["fields"], "charts": context["charts"], "banners": context.get("banners", [])}
    )


def _args(request: Request) -> dict[str, str]:
    return query_dict(request)  # undecodable text is refused, not searched for as U+FFFD


async def overview(request: Request) -> Response:
    return await _page(request, "overview.html", pages.overview, history_of(request))


def _topic_page(request: Request) -> Callable[..., dict[str, Any]]:
    """pages.topic with the request's query: a bad one is the page's error, as a bad name is."""

    def build(log: Any, history: History, name: str) -> dict[str, Any]:
        return pages.topic(log, history, name, _args(request))

    return build


async def topic(request: Request) -> Response:
    name = request.path_params["topic"]
    return await _page(request, "topic.html", _topic_page(request), history_of(request), name)


async def record(request: Request) -> Response:
    p = request.path_params
    return await _page(request, "record.html", pages.record, p["topic"], p["partition"], p["offset"])


async def stream_group(request: Request) -> Response:
    return await _page(
        request, "group.html", pages.stream_group, history_of(request), request.path_params["group"]
    )


async def queue_group(request: Request) -> Response:
    p = request.path_params
    return await _page(request, "queue.html", pages.queue_group, history_of(request), p["topic"], p["group"])


async def api_overview(request: Request) -> Response:
    return await _api(request, pages.overview, history_of(request), True)


async def api_topic(request: Request) -> Response:
    name = request.path_params["topic"]
    return await _api(request, _topic_page(request), history_of(request), name)


async def api_stream_group(request: Request) -> Response:
    return await _api(request, pages.stream_group, history_of(request), request.path_params["group"])


async def api_queue_group(request: Request) -> Response:
    p = request.path_params
    return await _api(request, pages.queue_group, history_of(request), p["topic"], p["group"])


async def login(request: Request) -> Response:
    """The login form; a right token opens a session (sessions.py), a wrong one
    counts against the client's address (too many: 429 until it refills)."""
    token = request.app.state.console_token
    if token is None:
        return RedirectResponse("/console/", 303)
    if request.method == "GET":
        return page(request, "login.html")
    throttle = request.app.state.console_throttle
    client = request.client.host if request.client else ""
    wait = throttle.wait(client, "console")
    if wait:
        seconds = math.ceil(wait)
        raise TooManyRequests(f"Too many wrong tokens from your address: try again in {seconds} s.", seconds)
    form = await read_form(request, csrf=False)  # no session yet: its Origin is checked
    given = str(form.get("token", ""))
    if not hmac.compare_digest(given.encode(), token.encode()):
        throttle.failed(client, "console")
        return page(request, "login.html", 401, error="That is not the server's token.")
    throttle.passed(client)
    response = RedirectResponse("/console/", 303)
    # No max-age: a session cookie, gone when the browser closes; Secure over TLS.
    response.set_cookie(
        SESSION_COOKIE,
        request.app.state.console_sessions.open(),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    """End the session server-side (the cookie no longer opens anything), then forget it."""
    await read_form(request)
    session_id = session_cookie(request.scope["headers"])
    if session_id:
        request.app.state.console_sessions.close(session_id)
    response = RedirectResponse("/console/login", 303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def refusals(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """A form's endpoint whose refusals (a foreign form, too many tries) are pages, not JSON."""

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except TooManyRequests as e:
            response = page(request, "login.html", 429, error=str(e))
            response.headers["retry-after"] = str(e.retry_after)
            return response
        except Forbidden as e:
            return page(request, "error.html", 403, problem=str(e))

    return guarded


async def root(request: Request) -> Response:
    return RedirectResponse("/console/", 303)


console_routes = [
    Route("/", overview, methods=["GET"]),
    Route("/login", refusals(login), methods=["GET", "POST"]),
    Route("/logout", refusals(logout), methods=["POST"]),
    Route("/topics/{topic}", topic, methods=["GET"]),
    Route("/topics/{topic}/produce", refusals(actions.produce), methods=["POST"]),
    Route("/topics/{topic}/partitions/{partition:int}/records/{offset:int}", record, methods=["GET"]),
    Route("/groups/{group}", stream_group, methods=["GET"]),
    Route("/groups/{group}/reset", refusals(actions.reset), methods=["POST"]),
    Route("/queues/{topic}/{group}", queue_group, methods=["GET"]),
    Route("/queues/{topic}/{group}/redrive", refusals(actions.redrive_dead_letters), methods=["POST"]),
    Route(
        "/queues/{topic}/{group}/purge-dead-letters", refusals(actions.purge_dead_letters), methods=["POST"]
    ),
    Route("/queues/{topic}/{group}/send", refusals(actions.queue_send), methods=["POST"]),
    Route("/queues/{topic}/{group}/receive", refusals(actions.queue_receive), methods=["POST"]),
    Route("/queues/{topic}/{group}/ack", refusals(actions.queue_ack), methods=["POST"]),
    Route("/queues/{topic}/{group}/nack", refusals(actions.queue_nack), methods=["POST"]),
    Route("/queues/{topic}/{group}/purge", refusals(actions.queue_purge), methods=["POST"]),
    Route("/api/", api_overview, methods=["GET"]),
    Route("/api/topics/{topic}", api_topic, methods=["GET"]),
    Route("/api/groups/{group}", api_stream_group, methods=["GET"]),
    Route("/api/queues/{topic}/{group}", api_queue_group, methods=["GET"]),
    Mount(
        "/static", StaticFiles(packages=[("tidelog.server.http.console", "static")]), name="console-static"
    ),
]
