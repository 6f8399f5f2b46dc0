"""Network fronts over a Log: the HTTP server (`serve(url)` runs it, `create_app(log_or_url)`
builds the ASGI app, `ServerThread` runs it in a thread) and the Redis protocol (`resp`).

    runtime/  what the fronts share: the group-commit writer and the append wake-up hub
    http/     the Starlette app: routes per resource, the seeds' compat routes, run, thread
    resp/     the Redis protocol: server, commands, codec, `python -m tidelog.server.resp`

Needs the server extra: pip install 'tidelog[server]'.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError


def _need_extra() -> None:
    try:
        import granian  # noqa: F401
        import jinja2  # noqa: F401
        import orjson  # noqa: F401
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import swagger_ui_bundle  # noqa: F401
    except ImportError as e:
        raise ConfigurationError(
            f"the tidelog server needs {e.name}: pip install 'tidelog[server]'"
        ) from None


def create_app(log_or_url: Any, token: str | None = None, **kw: Any) -> Any:
    """The ASGI app over a Log or a store URL (see `tidelog.server.http.app.create_app`)."""
    _need_extra()
    from .http.app import create_app as _create_app

    return _create_app(log_or_url, token, **kw)


def serve(
    url: Any,
    host: str = "127.0.0.1",
    port: int = 7070,
    token: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    max_body: int = 8 << 20,
    **kw: Any,
) -> None:
    """Serve the log at `url` (blocking) until SIGINT or SIGTERM; see `tidelog.server.http.run.serve`."""
    _need_extra()
    from .http.run import serve as _serve

    _serve(url, host, port, token, tls_cert, tls_key, max_body, **kw)


def __getattr__(name: str) -> Any:
    # ServerThread needs the extra; import it when asked for, not with tidelog.server.
    if name == "ServerThread":
        _need_extra()
        from .http.thread import ServerThread

        return ServerThread
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ServerThread", "create_app", "serve"]
