"""Network fronts over a Log: the HTTP server (`serve(url)` runs it, `create_app(log_or_url)`
builds the ASGI app, `ServerThread` runs it in a thread) and the Redis protocol (`resp`).

    runtime/  what the fronts share: the group-commit writer and the append wake-up hub
    http/     the Starlette app: routes per resource, the seeds' compat routes, run, thread
    resp/     the Redis protocol: server, commands, codec, `python -m tidelog.server.resp`

Needs the server extra: pip install 'tidelog[server]'.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from ..errors import ConfigurationError
from . import rundir
from .listeners import bind_all, server_ports

# The modules each front imports that the standard library lacks, looked up (find_spec)
# rather than imported: prometheus_client must not load before serve() names its
# multiprocess directory. tests/test_extras.py holds these against the fronts' imports
# and against the server extra in pyproject.toml.
HTTP_MODULES = (
    "granian",
    "httpx",
    "jinja2",
    "msgspec",
    "orjson",
    "prometheus_client",
    "starlette",
    "swagger_ui_bundle",
)
RESP_MODULES = ("hiredis",)
KAFKA_MODULES = ("cramjam", "crc32c", "kio")


def need_extra(*, resp: bool = True, kafka: bool = True) -> None:
    """Raise ConfigurationError naming the server extra when a front's library is missing."""
    wanted = HTTP_MODULES + (RESP_MODULES if resp else ()) + (KAFKA_MODULES if kafka else ())
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            f"tidelog serve needs the server extra ({', '.join(missing)} missing):"
            " pip install 'tidelog[server]'"
        )


def create_app(log_or_url: Any, token: str | None = None, **kw: Any) -> Any:
    """The ASGI app over a Log or a store URL (see `tidelog.server.http.app.create_app`)."""
    need_extra(resp=False, kafka=False)
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
        need_extra(resp=bool(kw.get("resp_port")), kafka=bool(kw.get("kafka_port")))
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
        need_extra(resp=False, kafka=False)
        from .http.thread import ServerThread

        return ServerThread
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ServerThread", "create_app", "need_extra", "serve"]
