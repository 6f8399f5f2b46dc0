"""Stream-group members and the console under several server processes: one home.

A remote member's handle (its fetch positions, its view of the group) lives
in the process that served its join (members.py). With `--workers N` the
kernel spreads connections over the processes, so a member's next request
may land anywhere. The first worker is the members' home: it also serves
the app on a private Unix socket, and every other worker forwards the
member routes there, as Kafka's REST proxy keeps a consumer instance on one
proxy node. The console's pages go there too, before any authentication:
its sessions, login throttle and charts live in memory, in one process.
Everything else (produce, reads, queue groups, long-polls) is served where
it lands: its state is in the store.

A forwarded member route has had its bearer token checked; the request goes
on with its headers, so the home checks it again (and a console page's
session cookie) and counts the records it serves. The forwarding worker
names the client's address and scheme in two headers that only the home's
socket listener believes (`home_listener`), so the login throttle counts
the client, not the worker. The socket lives in a directory only this
user can enter, bound by the supervisor before it forks the workers.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from .context import MAX_WAIT_S
from .errors import Unavailable, error_body

# The routes whose answer depends on a member's handle (members.py, and the
# fenced commit in v1.py, which a plain group's commit shares a path with).
MEMBER_ROUTE = re.compile(r"/v1/groups/[^/]+/(join|heartbeat|poll|release|leave|commit)")
# Not forwarded: they describe one hop, not the request. (Host is: the console checks Origin against it.)
HOP_HEADERS = {b"connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"te", b"trailer"}
# Who the client is, as the forwarding worker saw it: believed on the home's socket only.
CLIENT_HEADER = b"x-tidelog-client"
SCHEME_HEADER = b"x-tidelog-scheme"
FORWARDED = {CLIENT_HEADER, SCHEME_HEADER}
# A forwarded long-poll waits up to MAX_WAIT_S at the home; the hop must outlast it.
TIMEOUT = httpx.Timeout(5.0, read=MAX_WAIT_S + 10.0)


def member_route(scope: Scope) -> bool:
    return (
        scope["type"] == "http"
        and scope["method"] == "POST"
        and MEMBER_ROUTE.fullmatch(scope["path"]) is not None
    )


class HomeForward:
    """ASGI middleware: the requests `forwards` picks go to the home process, all else is passed on."""

    def __init__(self, app: ASGIApp, socket_path: str, forwards: Callable[[Scope], bool] = member_route):
        self.app = app
        self.forwards = forwards
        self.client = httpx.AsyncClient(
            # A few connect retries cover the home still starting up.
            transport=httpx.AsyncHTTPTransport(uds=socket_path, retries=3),
            base_url="http://tidelog-home",
            timeout=TIMEOUT,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.forwards(scope):
            await self.app(scope, receive, send)
            return
        await self._forward(scope, receive, send)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        headers = [(k, v) for k, v in scope["headers"] if k not in HOP_HEADERS and k not in FORWARDED]
        client = scope.get("client")
        if client:
            headers.append((CLIENT_HEADER, str(client[0]).encode("latin-1")))
        headers.append((SCHEME_HEADER, scope.get("scheme", "http").encode("latin-1")))
        method = scope["method"]
        target = scope.get("root_path", "") + scope["path"]
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        request = self.client.build_request(method, target, headers=headers, content=body())
        try:
            answer = await self.client.send(request, stream=True)
        except httpx.TransportError as e:
            message = f"the server process holding group members and the console is unreachable ({type(e).__name__}); retry"
            await _answer(send, 503, error_body(Unavailable.code, message))
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": answer.status_code,
                    "headers": [(k, v) for k, v in answer.headers.raw if k.lower() not in HOP_HEADERS],
                }
            )
            async for chunk in answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await answer.aclose()


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def home_listener(app: ASGIApp) -> ASGIApp:
    """`app` for the home's second listener, its Unix socket: the client's
    address and scheme are those the forwarding worker names, and the
    lifespan (the writer, the hub, the cleaner) already runs under the first."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        named = {k: v.decode("latin-1") for k, v in scope.get("headers", ()) if k in FORWARDED}
        if named:
            scope = dict(scope)
            if CLIENT_HEADER in named:
                scope["client"] = (named[CLIENT_HEADER], 0)
            if named.get(SCHEME_HEADER) in ("http", "https"):
                scope["scheme"] = named[SCHEME_HEADER]
        await app(scope, receive, send)

    return serve
