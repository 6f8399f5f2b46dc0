"""`serve()`: the app on granian, HTTP/1.1 and HTTP/2 (h2c, and TLS with ALPN).

granian was chosen by measurement (see README, Server): on this machine a
trivial Starlette endpoint answered more requests a second under granian
than under uvicorn, and granian also speaks HTTP/2, which uvicorn does not.
granian's embedded server runs the app object in this process's event loop,
so `serve()` needs no import string and the Log is opened once.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ... import __version__
from ...errors import ConfigurationError
from ...log import Log
from .. import rundir
from ..limits import Limits
from ..listeners import BACKLOG, bind_all, bind_unix, server_ports
from .app import create_app
from .context import DEFAULT_CLEAN_INTERVAL_S, DEFAULT_MAX_BODY
from .home import home_listener
from .workers import Restarts, run_workers, supports_workers

# Container allocations between young-generation collections in the server
# (CPython's default is 700). Each request allocates a few hundred objects,
# almost none of them in cycles; at 700 the collector ran every few requests
# and took 11% of the publish path's GIL time (issue 15's profile).
GC_GEN0_THRESHOLD = 50_000
NEVER_S = 86_400.0  # hyper wants some header read timeout: idle_timeout 0 ("never") is a day


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a long-running server.

    Called once start-up has loaded every module and built the app:
    `gc.freeze()` moves everything alive now (modules, classes, the route
    table, the store's caches) to a permanent generation the collector never
    scans again, and a higher generation-0 threshold makes young collections
    rarer. Cycles are still collected; only how often the collector looks
    changes.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def _not_experimental_notice(record: logging.LogRecord) -> bool:
    # granian labels its embedded server experimental at every start; we
    # chose it knowingly (see the module docstring) and test it.
    return "Embedded server is experimental" not in record.getMessage()


def granian_socket(sock: socket.socket) -> Any:
    """`sock` as granian's SocketHolder, which its worker accepts on.

    A duplicate of the descriptor: granian's listener closes its own when
    it stops, and `sock` stays open for a restarted worker. granian takes
    this path itself where it has no SO_REUSEPORT; the holder's constructor
    is (fd, uds, backlog) on Linux and FreeBSD, (fd, uds) elsewhere.
    """
    from granian._granian import SocketHolder

    holder: Any = SocketHolder  # its stub declares no constructor
    fd = os.dup(sock.fileno())
    uds = sock.family == getattr(socket, "AF_UNIX", None)
    try:
        return holder(fd, uds, BACKLOG)
    except TypeError:
        return holder(fd, uds)


def accept_on(server: Any, sock: socket.socket) -> None:
    """Make granian's embedded `server` accept on `sock` instead of binding
    its own socket (an SO_REUSEPORT one on Linux: see server/listeners.py)."""

    def init_shared_socket() -> None:
        server._ssp = None
        server._shd = granian_socket(sock)
        server._sfd = server._shd.get_fd()

    server._init_shared_socket = init_shared_socket


def build_server(
    app: Any,
    host: str,
    port: int,
    tls_cert: str | None,
    tls_key: str | None,
    sock: socket.socket | None = None,
    **kw: Any,
) -> Any:
    """granian's embedded server for `app`: on `sock`, a listening socket
    bound beforehand (listeners.py), else on host:port as granian binds it
    (with SO_REUSEPORT on Linux: for the benches; ServerThread binds its own);
    with what granian itself can hold of the app's Limits. The app's
    connection guard holds the rest (connections.py), once told the port here."""
    from granian.constants import HTTPModes, Interfaces, SSLProtocols
    from granian.http import HTTP1Settings
    from granian.server.embed import Server

    granian_log = logging.getLogger("_granian")
    if _not_experimental_notice not in granian_log.filters:
        granian_log.addFilter(_not_experimental_notice)

    if bool(tls_cert) != bool(tls_key):
        raise ConfigurationError("TLS needs both a certificate and a key (tls_cert and tls_key)")
    for path in (tls_cert, tls_key):
        if path and not Path(path).is_file():
            raise ConfigurationError(f"TLS file {path!r} does not exist")
    options: dict[str, Any] = {
        "address": host,
        "port": port,
        "interface": Interfaces.ASGI,  # with lifespan: the writer and the hub start there
        "http": HTTPModes.auto,  # HTTP/1.1, and HTTP/2 by ALPN over TLS or prior knowledge (h2c)
        "websockets": True,  # /subscribe/{topic}
        "log_enabled": kw.pop("log_enabled", True),
        "log_level": kw.pop("log_level", "warning"),
        "backlog": BACKLOG,
    }
    ctx = getattr(getattr(app, "state", None), "ctx", None)
    if ctx is not None:
        limits: Limits = ctx.settings.limits
        # granian's cap on the connections it serves at once (one process):
        # past it, connections wait in the backlog, where the guard finds
        # them and makes room or refuses them.
        options["backpressure"] = limits.max_connections
        # hyper's header read timeout covers a request head and, on HTTP/1.1,
        # the wait for the next one on a kept-alive connection: that wait is
        # idle_timeout (the guard bounds the first request by handshake_timeout).
        options["http1_settings"] = HTTP1Settings(
            header_read_timeout=int((limits.idle_timeout or NEVER_S) * 1000)
        )
        unix = sock is not None and sock.family == getattr(socket, "AF_UNIX", None)
        if not unix and "uds" not in kw:  # the member home's Unix socket is the server's own
            ctx.connections.serve_on(port, tls=bool(tls_cert))
    if tls_cert and tls_key:
        options.update(
            ssl_cert=Path(tls_cert),
            ssl_key=Path(tls_key),
            ssl_protocol_min=SSLProtocols.tls12,
        )
    options.update(kw)
    server = Server(app, **options)
    if sock is not None:
        accept_on(server, sock)
    return server


def server_tls(tls_cert: str | None, tls_key: str | None) -> ssl.SSLContext | None:
    """The TLS context of the fronts asyncio serves (Kafka) from serve's certificate and
    key, TLS 1.2 at the least as granian's HTTP; None without them."""
    if not (tls_cert and tls_key):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls_cert, tls_key)
    return context


def stop_server(app: Any, server: Any) -> None:
    """On the server's loop: answer open long-polls and end streams, then stop.

    granian lets in-flight requests finish before it stops; a long-poll
    would otherwise hold shutdown for up to 30 s.
    """
    app.state.ctx.hub.close()
    server.stop()


def resp_log(app: Any) -> Log:
    """The app's log, for the Redis front beside it: the same store, topic
    policy and wake-ups, so an XADD wakes HTTP long-polls, an HTTP produce
    wakes a blocked XREAD, and XADD creates a stream exactly when an HTTP
    produce would create a topic."""
    log: Log = app.state.ctx.log
    return log


def redact(url: str) -> str:
    """A store URL without its password, fit for a log line."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def serve(
    url: str | Log,
    host: str = "127.0.0.1",
    port: int = 7070,
    token: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    resp_port: int = 0,
    tune_gc_after_start: bool = True,
    workers: int = 1,
    restarts: Restarts | None = None,
    listeners: dict[str, socket.socket] | None = None,
    runtime_dir: str | None = None,
    **kw: Any,
) -> None:
    """Serve the log at `url` until SIGINT or SIGTERM.

    Binds to loopback unless told otherwise. `token` (else the TIDELOG_TOKEN
    environment variable) makes every route but /healthz require
    `Authorization: Bearer <token>`. `resp_port` (0: off) also serves the
    Redis protocol on the same host, log and token (`tidelog serve` turns it
    on at 7379). `tune_gc_after_start` (on) freezes the start-up heap and
    raises the collector's first threshold (see `tune_gc`). `workers` > 1
    runs that many server processes on the ports (Linux; see workers.py),
    restarted as `restarts` says when one dies: the background cleaner runs
    in the first only, and every one serves HTTP and the Redis front, each
    waking on the others' appends through the store. Extra keywords go to
    `create_app` (max_wait, keepalive, clean_interval, auto_create,
    default_partitions) or to granian's server. `resp_subscribe`: SUBSCRIBE's
    frames on RESP2 ("miniqueue" or "redis", see server/resp/subscribe.py).

    Every port is bound before anything is opened (listeners.py): a port
    another program holds raises PortInUse and nothing is created.
    `listeners`, bound by the caller (`tidelog.server.serve`), and
    `runtime_dir` (rundir.py) are used as given and closed or removed at the end.
    """
    if token is None:
        token = os.environ.get("TIDELOG_TOKEN") or None
    if workers > 1 and not supports_workers():
        logging.getLogger("tidelog.server").warning("several workers need Linux: serving one")
        workers = 1
    if workers > 1:
        if not isinstance(url, str) or ":memory:" in url:
            raise ConfigurationError("several workers need a store they can share: a file or server URL")
        if port == 0:
            raise ConfigurationError("several workers share one port: give a port number, not 0")
    if listeners is None:
        listeners = bind_all(host, server_ports(port, resp_port, kw.get("kafka_port", 0)))
    try:
        if workers == 1:
            _serve_process(
                url, host, token, tls_cert, tls_key, max_body, tune_gc_after_start, listeners, **kw
            )
            return
        _serve_workers(
            url,
            host,
            token,
            tls_cert,
            tls_key,
            max_body,
            tune_gc_after_start,
            listeners,
            workers,
            restarts,
            runtime_dir,
            **kw,
        )
    finally:
        for sock in listeners.values():
            sock.close()


def _serve_workers(
    url: str | Log,
    host: str,
    token: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    max_body: int,
    tune_gc_after_start: bool,
    listeners: dict[str, socket.socket],
    workers: int,
    restarts: Restarts | None,
    runtime_dir: str | None,
    **kw: Any,
) -> None:
    from ... import open as open_log

    assert isinstance(url, str)
    # Create or migrate the schema once, before the workers race to.
    open_log(url).close()
    clean_interval = kw.pop("clean_interval", DEFAULT_CLEAN_INTERVAL_S)
    runtime_dir = runtime_dir or rundir.make()
    # The first worker is the home of stream-group members over HTTP
    # (home.py); the others reach it on this socket, which the supervisor
    # holds so that a restarted home listens on it at once.
    home = os.path.join(runtime_dir, rundir.SOCKET)
    home_socket = bind_unix(home)

    def worker(index: int) -> None:
        _serve_process(
            url,
            host,
            token,
            tls_cert,
            tls_key,
            max_body,
            tune_gc_after_start,
            listeners,
            worker=index,
            home=home,
            home_socket=home_socket if index == 0 else None,
            # One cleaner for the store, not one a process.
            clean_interval=clean_interval if index == 0 else 0,
            **kw,
        )

    try:
        run_workers(workers, worker, restarts, orphaned=lambda: rundir.remove(runtime_dir))
    finally:
        home_socket.close()
        rundir.remove(runtime_dir)


def _serve_process(
    url: str | Log,
    host: str,
    token: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    max_body: int,
    tune_gc_after_start: bool,
    listeners: dict[str, socket.socket],
    worker: int | None = None,
    home: str | None = None,
    home_socket: socket.socket | None = None,
    **kw: Any,
) -> None:
    """One server process: the app on granian (and the Redis front) until a signal.

    `listeners`: the bound sockets ("http"; "resp" and "kafka" for those fronts).
    `worker`: this process's index among several (None: alone). `home`: the
    Unix socket where the first of them serves member routes, on
    `home_socket` in that first one.
    """
    app_options = (
        "max_wait",
        "keepalive",
        "clean_interval",
        "auto_create",
        "default_partitions",
        "txn_window",
        "lean_routes",
        "limits",
    )
    app_kw = {k: kw.pop(k) for k in app_options if k in kw}
    resp_subscribe = kw.pop("resp_subscribe", "miniqueue")
    kafka_host = kw.pop("kafka_advertised_host", None)
    kw.pop("kafka_port", None)  # bound with the others: listeners["kafka"]
    app = create_app(url, token, max_body=max_body, member_home=None if home_socket else home, **app_kw)
    http = listeners["http"]
    port = http.getsockname()[1]
    server = build_server(app, host, port, tls_cert, tls_key, sock=http, **kw)
    home_server = None
    if home_socket is not None:  # the home also listens on its socket, with the same app (and token)
        home_server = build_server(home_listener(app), host, 0, None, None, sock=home_socket, **kw)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        resp = None
        if "resp" in listeners:
            from ..resp import start_resp_server

            resp_port = listeners["resp"].getsockname()[1]
            resp = await start_resp_server(
                resp_log(app),
                host,
                resp_port,
                token,
                hub=app.state.ctx.hub,
                limits=app.state.ctx.settings.limits,
                sock=listeners["resp"],
                subscribe_frames=resp_subscribe,
                throttle=app.state.ctx.throttle,
            )
            say("Redis protocol on %s:%s (redis-cli -p %s)", host, resp_port, resp_port)
        kafka = None
        if "kafka" in listeners:
            from ..kafka import start_kafka_server

            kafka_port = listeners["kafka"].getsockname()[1]
            kafka = await start_kafka_server(
                resp_log(app),
                host,
                kafka_port,
                token,
                hub=app.state.ctx.hub,
                writer=app.state.ctx.writer,
                limits=app.state.ctx.settings.limits,
                advertised_host=kafka_host,
                sock=listeners["kafka"],
                throttle=app.state.ctx.throttle,
                tls=server_tls(tls_cert, tls_key),
            )
            say(
                "Kafka protocol on %s:%s (bootstrap.servers=%s:%s, security.protocol=%s)",
                host,
                kafka_port,
                kafka_host or host,
                kafka_port,
                ("SASL_SSL" if token else "SSL")
                if tls_cert
                else ("SASL_PLAINTEXT" if token else "PLAINTEXT"),
            )
        stopping: list[asyncio.Task] = []

        async def stop() -> None:
            if kafka is not None:  # before the app: it uses the app's log, hub and writer
                from ..kafka import stop_kafka_server

                await stop_kafka_server(kafka)
            if resp is not None:  # first: it uses the log the app closes when it stops
                from ..resp import stop_resp_server

                await stop_resp_server(resp)
            stop_server(app, server)
            if home_server is not None:
                home_server.stop()

        def on_signal() -> None:
            if not stopping:
                stopping.append(loop.create_task(stop()))

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        base = f"{'https' if tls_cert else 'http'}://{host}:{port}"
        say(
            "HTTP on %s: /v1, /api, /publish, /subscribe (WebSocket, HTTP/2); console %s/, docs %s/docs, "
            "metrics %s/metrics",
            base,
            base,
            base,
            base,
        )
        served: Log = app.state.ctx.log
        say(
            "topics: %s; reads never create one",
            f"a write to a missing one creates it ({served.default_partitions} partition(s))"
            if served.auto_create
            else "created only explicitly (--no-auto-create)",
        )
        say("ready: stop with Ctrl-C (SIGINT) or SIGTERM")
        if tune_gc_after_start:
            tune_gc()
        if home_server is None:
            await server.serve()
        else:
            await asyncio.gather(server.serve(), home_server.serve())

    log = logging.getLogger("tidelog.server")
    # Among several workers the first speaks for all: one banner, not N.
    say = log.info if not worker else log.debug
    say(
        "tidelog %s serving %s; %s",
        __version__,
        redact(url) if isinstance(url, str) else "a Log",
        "requests need the bearer token"
        if token
        else "no token: anyone who reaches the port may read and write",
    )
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
