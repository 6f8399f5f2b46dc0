"""Bearer-token auth for every route but /healthz, compared in constant time.

WebSockets carry it in the Authorization header or, since browsers cannot
set headers there, as `?token=`.
"""

from __future__ import annotations

import hmac
from urllib.parse import unquote_to_bytes

from .errors import error_body

OPEN_PATHS = frozenset({"/healthz"})


class BearerAuth:
    def __init__(self, app, token: str):
        self.app = app
        self.expected = b"Bearer " + token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
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
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: a 403 handshake
            return
        message = (
            "missing Authorization header: send 'Authorization: Bearer <token>'"
            if not given
            else "wrong token in the Authorization header"
        )
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
            }
        )
        await send({"type": "http.response.body", "body": error_body("unauthorized", message)})
