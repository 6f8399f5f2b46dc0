"""The ASGI app: routes, error handlers, auth and metrics around one Log."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware

from ...config import parse_duration_ms
from ...log import Log
from ..limits import Limits
from . import compat, console, duplex, jobs, members, operate, ops, queues, retention, stream, subscribe, v1
from .auth import BearerAuth, console_page
from .connections import ConnectionTracking
from .context import DEFAULT_CLEAN_INTERVAL_S, DEFAULT_MAX_BODY, MAX_WAIT_S, Context, Settings
from .errors import HANDLERS
from .home import HomeForward, member_route
from .hot import HotPublish
from .metrics import MetricsMiddleware
from .sessions import Sessions


def create_app(
    log_or_url: Log | str,
    token: str | None = None,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    max_wait: float = MAX_WAIT_S,
    keepalive: float = 15.0,
    clock: Callable[[], int] | None = None,
    clean_interval: float = DEFAULT_CLEAN_INTERVAL_S,
    console_interval: float = console.DEFAULT_INTERVAL_S,
    console_window: float = console.DEFAULT_WINDOW_S,
    auto_create: bool | None = None,
    default_partitions: int | None = None,
    txn_window: int | str | None = "7d",
    lean_routes: bool = True,
    member_home: str | None = None,
    limits: Limits | None = None,
) -> Starlette:
    """An ASGI app serving `log_or_url` (a Log, or a store URL the app opens and closes).

    Topics follow the one policy of every front: a produce route creates a
    missing topic when `auto_create` is on (`default_partitions`
    partitions; /api makes one-partition topics), and answers 404 when it is
    off; reads never create. Unset, both come from the given Log (a URL:
    on, and one partition). `clock` (ms since epoch) replaces the wall
    clock of a log opened from a URL (tests). A background cleaner applies
    retention every `clean_interval` seconds (0: never; `POST /v1/clean`
    still cleans on demand), and forgets idempotent-write ids older than
    `txn_window` ("7d"; None keeps them). The console's charts sample the
    log every `console_interval` seconds and keep `console_window` seconds
    (0: no sampling, no charts). `lean_routes` (on) serves the common case
    of POST /publish/{topic} without the framework (see hot.py); the same
    answers either way. `member_home`, the Unix socket of another server
    process, forwards the stream-group member routes and the console there (see home.py).
    `limits`: the bounds every front holds to (server/limits.py; defaults).
    """
    from ... import open as open_log

    if isinstance(log_or_url, Log):
        log, owns = log_or_url, False  # the caller closes it
        if auto_create is not None or default_partitions is not None:
            log = log.view(auto_create=auto_create, default_partitions=default_partitions)
    else:
        log = open_log(
            log_or_url,
            auto_create=True if auto_create is None else auto_create,
            default_partitions=default_partitions or 1,
            clock=clock,
        )
        owns = True
    if max_body < 1:
        raise ValueError("max_body must be at least 1 byte")
    if not clean_interval >= 0:
        raise ValueError("clean_interval must be 0 (off) or a number of seconds")
    if not console_interval >= 0 or not console_window > 0:
        raise ValueError(
            "console_interval must be 0 (off) or a number of seconds, console_window more than 0"
        )
    ctx = Context(
        log,
        Settings(
            max_body=max_body,
            max_wait=min(max_wait, MAX_WAIT_S),
            keepalive=keepalive,
            clean_interval=clean_interval,
            txn_window_ms=None if txn_window is None else parse_duration_ms("txn_window", txn_window),
            limits=limits or Limits(),
        ),
        owns,
    )

    # Under several processes the console is served by the home (home.py): only it samples.
    history, sampler = console.start_history(ctx, 0 if member_home else console_interval, console_window)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await ctx.start()
        if sampler is not None:
            sampler.start()
        try:
            yield
        finally:
            if sampler is not None:
                await sampler.stop()
            await ctx.stop()

    sessions = Sessions()
    middleware = [Middleware(MetricsMiddleware, metrics=ctx.metrics)]
    if lean_routes:  # first: it passes on what it does not serve through the rest
        middleware.insert(0, Middleware(HotPublish, ctx=ctx, token=token))
    if member_home:  # before auth: the home holds the console's sessions, and checks them
        middleware.append(Middleware(HomeForward, socket_path=member_home, forwards=console_page))
    # Outermost: every request counts as its connection's activity (connections.py).
    middleware.insert(0, Middleware(ConnectionTracking, connections=ctx.connections))
    if token:
        middleware.append(Middleware(BearerAuth, token=token, sessions=sessions, throttle=ctx.throttle))
    if member_home:  # last: only an authenticated request is forwarded
        middleware.append(Middleware(HomeForward, socket_path=member_home, forwards=member_route))
    app = Starlette(
        routes=[
            *ops.routes,
            *compat.routes,
            *v1.routes,
            *members.routes,
            *retention.routes,
            *queues.routes,
            *operate.routes,
            *jobs.routes,
            *stream.routes,
            *subscribe.routes,
            *duplex.routes,
            *console.routes(),
        ],
        middleware=middleware,
        exception_handlers=HANDLERS,
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.console_history = history
    app.state.console_token = token or None
    app.state.console_sessions = sessions
    app.state.console_throttle = ctx.throttle  # one throttle for every front (server/throttle.py)
    # Pages refresh their figures about as often as the history samples, every 0.5 to 3 s.
    app.state.console_refresh_ms = int(min(3.0, max(0.5, console_interval or 3.0)) * 1000)
    return app
