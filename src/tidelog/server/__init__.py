"""Network fronts over a Log: the HTTP server (`serve(url)` runs it, `create_app(log_or_url)`
builds the ASGI app, `ServerThread` runs it in a thread) and the Redis protocol (`resp`).

    runtime/  what the fronts share: the group-commit writer and the append wake-up hub
    http/     the Starlette app: routes per resource, the seeds' compat routes, run, thread
    resp/     the Redis protocol: server, commands, codec, `python -m tidelog.server.resp`

Needs the server extra: pip install 'tidelog[server]'.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import ConfigurationError
from . import rundir
from .listeners import bind_all, server_ports


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
    """Serve the log at `url` (blocking) until SIGINT or SIGTERM; see `tidelog.server.http.run.serve`.

    The ports come first: each is bound (server/listeners.py) before the
    store is opened or a file made, so a port another program holds raises
    PortInUse naming it, and nothing else happens.
    """
    listeners = bind_all(host, server_ports(port, kw.get("resp_port", 0), kw.get("kafka_port", 0)))
    runtime_dir = None
    try:
        if kw.get("workers", 1) > 1:
            runtime_dir = rundir.make()
            _share_metrics(runtime_dir)  # before the server's modules load prometheus_client
        _need_extra()
        from .http.run import serve as _serve

        _serve(
            url,
            host,
            port,
            token,
            tls_cert,
            tls_key,
            max_body,
            listeners=listeners,
            runtime_dir=runtime_dir,
            **kw,
        )
    finally:
        for sock in listeners.values():
            sock.close()
        if runtime_dir:
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").startswith(runtime_dir):
                os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            rundir.remove(runtime_dir)


def _share_metrics(runtime_dir: str) -> None:
    """Several server processes count into one place, so /metrics sums them.

    prometheus_client's multiprocess mode (each process's counters in files
    of one directory) is chosen when the library is first imported, so the
    directory is named before that; when the library was already loaded
    (serve() called from a program that uses it), each process counts its own.
    """
    if "prometheus_client" in sys.modules or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.path.join(runtime_dir, "metrics")


def __getattr__(name: str) -> Any:
    # ServerThread needs the extra; import it when asked for, not with tidelog.server.
    if name == "ServerThread":
        _need_extra()
        from .http.thread import ServerThread

        return ServerThread
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ServerThread", "create_app", "serve"]
