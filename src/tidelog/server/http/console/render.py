"""Pages from Jinja2 templates (package data), every value escaped.

Autoescape is on for every template: a name, key, header or value is text
on the page, whatever it holds (`<script>` included). Scripts on the page
write figures with `textContent`, never as HTML.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..auth import SESSION
from . import text

NOTICE_COOKIE = "tidelog_notice"

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("tidelog.server.http.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(
    count=text.count,
    size=text.size,
    duration=text.duration,
    rate=text.rate,
    when=text.when,
    retention=text.retention,
    bytes_text=text.bytes_text,
    preview=text.preview,
)


def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    """Render a page; a notice left by the action that redirected here is shown once."""
    notice = request.cookies.get(NOTICE_COOKIE)
    context.setdefault("notice", unquote(notice) if notice else None)
    context.setdefault("error", None)
    context.setdefault("banners", [])
    context.setdefault("live", None)
    # A session to end: never on the login page, nor for a bearer token (a client, not a person).
    context["authed"] = request.scope.get(SESSION) is not None
    context["csrf"] = csrf_token(request)
    response = HTMLResponse(_env.get_template(template).render(**context), status)
    if notice:
        response.delete_cookie(NOTICE_COOKIE, path="/console")
    return response


def csrf_token(request: Request) -> str:
    """The token this page's forms carry: its session's, or the server's own
    when no session stands behind the page (a server without a token)."""
    session = request.scope.get(SESSION)
    return session.csrf if session is not None else request.app.state.console_sessions.anonymous_csrf


def done(location: str, notice: str) -> Response:
    """Redirect after an action (so a reload does not repeat it), carrying what it did."""
    response = Response(status_code=303, headers={"location": location})
    response.set_cookie(
        NOTICE_COOKIE, quote(notice[:500]), max_age=60, path="/console", httponly=True, samesite="strict"
    )
    return response
