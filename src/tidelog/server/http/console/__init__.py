"""The console: the web pages `tidelog serve` serves at / and /console/ for a
person watching and operating the log (topics, groups, lag, dead letters).

    routes.py    pages (GET), their live figures (/console/api/...), login
    actions.py   produce a test record, reset a group's offsets, redrive
    pages.py     what each page shows, built once for the HTML and the refresh
    figures.py   the figures, read from the log through the core API
    history.py   figures sampled on an interval and kept in memory (charts)
    render.py    Jinja2 templates (templates/, autoescaped) and notices
    text.py      how figures and payloads are written
    static/      the stylesheet and the one small script (refresh, charts)

Server-rendered HTML with one script of its own: no framework, no CDN, no
build step. The console adds no semantics: every action is a core call with
the validation `/v1` applies.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.routing import Mount, Route

from ..context import Context
from .figures import overview, sample_values
from .history import DEFAULT_INTERVAL_S, DEFAULT_WINDOW_S, History, Sampler
from .routes import console_routes, root


def start_history(ctx: Context, interval: float, window: float) -> tuple[History, Sampler | None]:
    """The history the charts read, and its sampler (None when `interval` is 0: no charts)."""
    history = History(interval or DEFAULT_INTERVAL_S, max(window, interval or DEFAULT_INTERVAL_S))
    if not interval:
        return history, None

    async def sample() -> None:
        ov = await ctx.run(overview, ctx.log, history)
        history.record(ctx.log.clock(), sample_values(ov))
        history.latest = (time.monotonic(), ov)

    return history, Sampler(interval, sample)


def routes() -> list[Any]:
    return [Route("/", root, methods=["GET"]), Mount("/console", routes=console_routes)]


__all__ = ["DEFAULT_INTERVAL_S", "DEFAULT_WINDOW_S", "History", "routes", "start_history"]
