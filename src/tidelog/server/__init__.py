"""Network fronts over a Log: the HTTP server (`serve(url)` runs it, `create_app(log_or_url)`
builds the ASGI app) and the Redis protocol (resp.py).

Needs the server extra: pip install 'tidelog[server]'.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError


def _need_extra() -> None:
    try:
        import granian  # noqa: F401
        import orjson  # noqa: F401
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import swagger_ui_bundle  # noqa: F401
    except ImportError as e:
        raise ConfigurationError(
            f"the tidelog server needs {e.name}: pip install 'tidelog[server]'"
        ) from None


def create_app(log_or_url: Any, token: str | None = None, **kw: Any) -> Any:
    """The ASGI app over a Log or a store URL (see `tidelog.server.app.create_app`)."""
    _need_extra()
    from .app import create_app as _create_app

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
    """Serve the log at `url` (blocking) until SIGINT or SIGTERM; see `tidelog.server.run.serve`."""
    _need_extra()
    from .run import serve as _serve

    _serve(url, host, port, token, tls_cert, tls_key, max_body, **kw)


__all__ = ["create_app", "serve"]
