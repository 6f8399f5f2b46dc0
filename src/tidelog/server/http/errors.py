"""Errors to HTTP: the one table of status codes, and the error body.

Every error answer is `{"error": {"code": ..., "message": ...}}`; the code
is the `code` of the `tidelog.errors` class, so a client maps it back.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ...errors import (
    Closed,
    ConfigurationError,
    Conflict,
    GroupError,
    InvalidRequest,
    MessageTooLarge,
    NotFound,
    OffsetOutOfRange,
    StoreError,
    StoreFull,
    TidelogError,
)

log = logging.getLogger("tidelog.server")

CLIENT_CLOSED = 499  # nginx's status for a request whose client went away before the answer


class Unauthorized(TidelogError):
    code = "unauthorized"


class Forbidden(TidelogError):
    """A console form that did not come from the console's own page (its
    Origin, or its CSRF token, is not this server's)."""

    code = "forbidden"


class TooManyRequests(TidelogError):
    """A client tried too many wrong tokens at the console's login; `retry_after` seconds to wait."""

    code = "too_many_requests"

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(TidelogError):
    """Another server process this request needs did not answer (home.py)."""

    code = "unavailable"


class BodyTooLarge(MessageTooLarge):
    code = "body_too_large"


class MethodNotAllowed(InvalidRequest):
    code = "method_not_allowed"


# The most specific class in an error's MRO decides its status.
STATUS: dict[type[BaseException], int] = {
    Unauthorized: 401,
    Forbidden: 403,
    TooManyRequests: 429,
    MessageTooLarge: 413,
    MethodNotAllowed: 405,
    OffsetOutOfRange: 400,
    InvalidRequest: 400,
    NotFound: 404,
    Conflict: 409,
    GroupError: 409,
    Closed: 503,
    Unavailable: 503,
    StoreFull: 507,  # Insufficient Storage: the write may succeed once space is freed
    StoreError: 503,
    ConfigurationError: 500,
    TidelogError: 500,
}


def status_for(exc: BaseException) -> int:
    for cls in type(exc).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


def error_body(code: str, message: str, **extra: Any) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message, **extra}})


def error_response(exc: TidelogError) -> Response:
    extra = {}
    if isinstance(exc, OffsetOutOfRange):
        extra = {"first": exc.first, "last": exc.last}
    status = status_for(exc)
    if status >= 500:
        log.error("request failed: %s: %s", type(exc).__name__, exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(error_body(exc.code, str(exc), **extra), status, headers, "application/json")


async def on_tidelog_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TidelogError)
    return error_response(exc)


async def on_http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own 404 (no route) and 405 (wrong method), in our shape.
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = {
        404: f"no route for {request.method} {request.url.path}; see /openapi.json",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    return Response(error_body(code, message), exc.status_code, exc.headers, "application/json")


async def on_client_gone(request: Request, exc: Exception) -> Response:
    # A client that hangs up mid-body is no server error: one debug line and
    # a count, not a traceback and not a 500 in the request series. Nobody
    # reads the answer; its status (nginx's 499) is for the metrics.
    log.debug("client went away during %s %s", request.method, request.url.path)
    request.app.state.ctx.metrics.disconnects.inc()
    return Response(b"", CLIENT_CLOSED)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return Response(
        error_body("internal", f"internal error: {type(exc).__name__}"), 500, None, "application/json"
    )


HANDLERS = {
    TidelogError: on_tidelog_error,
    HTTPException: on_http_error,
    ClientDisconnect: on_client_gone,
    Exception: on_unexpected,
}
