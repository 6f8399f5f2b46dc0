"""Bearer-token auth for every route but /healthz, compared in constant time.

WebSockets carry it in the Authorization header or, since browsers cannot
set headers there, as `?token=`.

A person's browser cannot send the header on a page it navigates to: the
console's login form takes the token once and opens a session
(console/sessions.py) whose random id is a cookie (gone when the browser
closes; HttpOnly, SameSite=Strict). The cookie counts only for the
console's pages and /docs; the API wants the header. How a request got in
is left in its scope (AUTHENTICATED_BY, and the session), for the
console's CSRF check: a request with the header needs none, since no
other site's page can make a browser send it.
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from urllib.parse import unquote_to_bytes

from ..throttle import AuthThrottle, retry_message
from .errors import error_body
from .sessions import Sessions

OPEN_PATHS = frozenset({"/healthz", "/console/login", "/favicon.ico"})
OPEN_PREFIXES = ("/console/static/",)  # the console's stylesheet and scripts hold nothing secret
SESSION_COOKIE = "tidelog_console"
# Scope keys (ASGI allows a server's own): "bearer" or "session", and the console session.
AUTHENTICATED_BY = "tidelog.authenticated_by"
SESSION = "tidelog.session"


def is_page(path: str) -> bool:
    """A path a browser opens by navigating (the console, /docs), where the cookie counts."""
    return (
        path in ("/", "/console", "/docs", "/openapi.json")
        or path.startswith("/console/")
        or path.startswith("/docs/")
    )


def console_page(scope) -> bool:
    """A page the console's session opens (static files aside): served by the
    members' home under several processes (home.py)."""
    path = scope.get("path", "")
    return is_page(path) and not path.startswith(OPEN_PREFIXES)


def session_cookie(headers) -> str | None:
    for name, value in headers:
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no session
                return None
            morsel = jar.get(SESSION_COOKIE)
            return morsel.value if morsel else None
    return None


def client_host(scope) -> str:
    """The client's address as the throttle counts it ("" when the server does not say)."""
    client = scope.get("client")
    return client[0] if client else ""


class BearerAuth:
    def __init__(self, app, token: str, sessions: Sessions, throttle: AuthThrottle):
        self.app = app
        self.expected = b"Bearer " + token.encode()
        self.sessions = sessions
        self.throttle = throttle

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] not in ("http", "websocket") or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and is_page(path):
            cookie = session_cookie(scope["headers"])
            session = self.sessions.find(cookie) if cookie else None
            if session is not None:
                scope[AUTHENTICATED_BY], scope[SESSION] = "session", session
                await self.app(scope, receive, send)
                return
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
                break
        if not given and scope["type"] == "websocket":
            # Browsers cannot set headers on a WebSocket: ?token= works there.
            for pair in scope.get("query_string", b"").split(b"&"):
                if pair.startswith(b"token="):
                    given = b"Bearer " + unquote_to_bytes(pair[6:])
        if given:
            # A token is tried: an address that failed too often waits, right token or wrong.
            host = client_host(scope)
            wait = self.throttle.wait(host, "http")
            if wait:
                await self._refuse(scope, send, 429, "too_many_requests", retry_message(wait), wait)
                return
            if hmac.compare_digest(given, self.expected):
                self.throttle.passed(host)
                scope[AUTHENTICATED_BY] = "bearer"
                await self.app(scope, receive, send)
                return
            self.throttle.failed(host, "http")
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: a 403 handshake
            return
        if not given and (path in ("/", "/console") or path.startswith("/console/")):
            # A person without a session: the login form, and nothing else.
            await send(
                {"type": "http.response.start", "status": 303, "headers": [(b"location", b"/console/login")]}
            )
            await send({"type": "http.response.body", "body": b""})
            return
        message = (
            "missing Authorization header: send 'Authorization: Bearer <token>'"
            if not given
            else "wrong token in the Authorization header"
        )
        await self._refuse(scope, send, 401, "unauthorized", message)

    @staticmethod
    async def _refuse(scope, send, status: int, code: str, message: str, retry: float = 0) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: a 403 handshake
            return
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        if retry:
            headers.append((b"retry-after", str(max(1, round(retry))).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": error_body(code, message)})
