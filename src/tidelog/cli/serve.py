"""`tidelog serve`: the HTTP server (the `server` extra) and, beside it, the
Redis protocol front (the `resp` extra) and the Kafka listener (the `kafka`
extra) on the same log."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable

import click
from click.core import ParameterSource

from tidelog.config import parse_size_bytes
from tidelog.errors import InvalidRequest
from tidelog.logs import LOG_FORMATS, LOG_LEVELS, log_to_stderr
from tidelog.server.http.workers import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_RESTART_WINDOW_S,
    Restarts,
    default_workers,
)
from tidelog.server.limits import (
    DEFAULT_AUTH_FREE_FAILURES,
    DEFAULT_AUTH_MAX_WAIT_S,
    DEFAULT_AUTH_WAIT_S,
    DEFAULT_FETCH_MAX_BYTES,
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_BATCH_INFLATED,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HOLD_S,
    DEFAULT_MAX_INVALID_COMMANDS,
    DEFAULT_WRITE_TIMEOUT_S,
    Limits,
)
from tidelog.store import LOCAL_SCHEMES, scheme_of

from .context import Session, common_options, pass_session, topic_policy_options


def _size(name: str, low: int, high: int, words: str) -> Callable[[click.Context, click.Parameter, str], int]:
    """A click callback reading a SIZE option (8MiB, 64KiB, bytes) within [low, high]."""

    def check(ctx: click.Context, param: click.Parameter, value: str) -> int:
        try:
            size = parse_size_bytes(name, value)
        except InvalidRequest as e:
            raise click.BadParameter(str(e)) from None
        if not low <= size <= high:
            raise click.BadParameter(f"must be {words}, got {value!r}")
        return size

    return check


_body_size = _size("--max-body", 1, 1 << 62, "at least 1 byte")
_request_size = _size("--max-request", 1024, 1 << 31, "between 1KiB and 2GiB")
_batch_size = _size("--max-batch-inflated", 1024, 1 << 31, "between 1KiB and 2GiB")
_fetch_size = _size("--fetch-max-bytes", 1024, (1 << 31) - 1, "between 1KiB and 2GiB")


MAX_TOKEN_FILE = 4096  # a token is a line, not a file's worth


def read_token_file(path: str) -> tuple[str, int]:
    """The token in the file at `path` (its first line, without the line
    end), and the file's permission bits.

    A file keeps the token out of the process list (`ps` shows --token's
    value) and out of the environment other processes of the user may read.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_FILE + 1)
            mode = os.fstat(f.fileno()).st_mode
    except OSError as e:
        raise click.BadParameter(f"cannot read {path!r}: {e.strerror}", param_hint="--token-file") from None
    if len(raw) > MAX_TOKEN_FILE:
        raise click.BadParameter(
            f"{path!r} is over {MAX_TOKEN_FILE} bytes: a token is one line", param_hint="--token-file"
        )
    try:
        token = raw.decode().splitlines()[0].strip() if raw.strip() else ""
    except UnicodeDecodeError:
        raise click.BadParameter(f"{path!r} is not UTF-8 text", param_hint="--token-file") from None
    if not token:
        raise click.BadParameter(
            f"{path!r} holds no token (its first line is empty)", param_hint="--token-file"
        )
    return token, stat.S_IMODE(mode)


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind: loopback unless told; 0.0.0.0 (or this machine's address) to serve other"
    " machines, with --token or --token-file, and TLS off a trusted network.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=7070,
    show_default=True,
    help="The HTTP port (the API, /metrics, /docs and the console); 0: a free port the kernel picks.",
)
@click.option(
    "--token",
    envvar="TIDELOG_TOKEN",
    show_envvar=True,
    help="Require 'Authorization: Bearer TOKEN' on every route but /healthz. Visible in the process"
    " list: prefer --token-file or the environment variable.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="Read the token from the first line of this file (instead of --token; over TIDELOG_TOKEN).",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    help="Serve TLS with this certificate (PEM): HTTP, and the Kafka port (SSL, or SASL_SSL with a token).",
)
@click.option(
    "--tls-key", type=click.Path(exists=True, dir_okay=False), help="The certificate's private key (PEM)."
)
@click.option(
    "--resp-port",
    type=click.IntRange(0, 65535),
    default=7379,
    show_default=True,
    help="Also serve the Redis protocol on this port (same host and token); 0 turns it off.",
)
@click.option(
    "--kafka-port",
    type=click.IntRange(0, 65535),
    default=9092,
    show_default=True,
    envvar="TIDELOG_KAFKA_PORT",
    show_envvar=True,
    help="Also serve Kafka's protocol on this port (same host and token, SASL PLAIN; TLS with --tls-cert);"
    " 0 turns it off.",
)
@click.option(
    "--kafka-advertised-host",
    metavar="HOST",
    help="The host Kafka clients are told to connect to (default: --host).",
)
@click.option(
    "--resp-subscribe",
    type=click.Choice(["miniqueue", "redis"]),
    default="miniqueue",
    show_default=True,
    help="How Redis SUBSCRIBE frames its messages on RESP2: miniqueue's (the value as a bulk string) or"
    " Redis's pub/sub frames (RESP3 connections always get those).",
)
@click.option(
    "--clean-interval",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="Seconds between background cleanings (retention, compaction); 0 turns them off.",
)
@click.option(
    "--txn-window",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="How long the background cleaning remembers an idempotent write's id (7d, 12h, ...).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS),
    default="info",
    show_default=True,
    help="What the server logs.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    help="text, or json: one JSON object a line for a log shipper.",
)
@click.option("--access-log", is_flag=True, help="Also log every HTTP request.")
@click.option(
    "--max-body",
    default="8MiB",
    show_default=True,
    metavar="SIZE",
    callback=_body_size,
    help="The largest request body served (413 above it): 8MiB, 64KiB, or bytes.",
)
@click.option(
    "--workers",
    type=click.IntRange(0, 256),
    default=0,
    show_default=True,
    metavar="N",
    help="Server processes sharing the port and the store (Linux). 0 (the default) picks: one a"
    " core on PostgreSQL; one on SQLite (its writers share one lock and wake each other on a"
    " 20 ms tick, so one process serves more), for :memory: and for --port 0. Stream-group"
    " members over HTTP are served by the first; the others forward their routes to it.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 1 << 20),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    help="Open connections a front (HTTP, Redis, Kafka) accepts in one server process; more are refused.",
)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(0, 86_400),
    default=DEFAULT_IDLE_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Close a connection silent this long with no request in flight (0: never).",
)
@click.option(
    "--handshake-timeout",
    type=click.FloatRange(0, 86_400, min_open=True),
    default=DEFAULT_HANDSHAKE_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Close a new connection that has not sent a request head (HTTP) or authenticated (Redis AUTH,"
    " Kafka SASL) by then.",
)
@click.option(
    "--max-hold",
    type=click.FloatRange(0, 86_400, min_open=True),
    default=DEFAULT_MAX_HOLD_S,
    show_default=True,
    metavar="SECONDS",
    help="Release a record pushed to a subscriber that says nothing (no ack, nack, extend) for this long.",
)
@click.option(
    "--max-request",
    default="64MiB",
    show_default=True,
    metavar="SIZE",
    callback=_request_size,
    help="The largest request on the Redis and Kafka protocols (Kafka's socket.request.max.bytes),"
    " checked against announced lengths before reading.",
)
@click.option(
    "--max-batch-inflated",
    default=f"{DEFAULT_MAX_BATCH_INFLATED >> 20}MiB",
    show_default=True,
    metavar="SIZE",
    callback=_batch_size,
    help="The most one compressed Kafka record batch may inflate to (any codec); a larger one is refused"
    " having held no more than this.",
)
@click.option(
    "--fetch-max-bytes",
    default=f"{DEFAULT_FETCH_MAX_BYTES >> 20}MiB",
    show_default=True,
    metavar="SIZE",
    callback=_fetch_size,
    help="The most record bytes one Kafka Fetch answer holds, whatever it asks (Kafka's fetch.max.bytes).",
)
@click.option(
    "--write-timeout",
    type=click.FloatRange(0, 86_400, min_open=True),
    default=DEFAULT_WRITE_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Close a Redis or Kafka connection whose answers the client has not taken this long (it"
    " stopped reading); before authentication the --handshake-timeout bounds writes too.",
)
@click.option(
    "--max-invalid-commands",
    type=click.IntRange(1, 1 << 20),
    default=DEFAULT_MAX_INVALID_COMMANDS,
    show_default=True,
    metavar="N",
    help="Close a subscriber (WebSocket, POST /subscribe) after N invalid commands in a row (each"
    " answered, the last with why it closes).",
)
@click.option(
    "--auth-free-failures",
    type=click.IntRange(0, 1 << 20),
    default=DEFAULT_AUTH_FREE_FAILURES,
    show_default=True,
    metavar="N",
    help="Wrong tokens a client address may send (every front counted together) before it waits"
    " between tries.",
)
@click.option(
    "--auth-wait",
    type=click.FloatRange(0, 86_400),
    default=DEFAULT_AUTH_WAIT_S,
    show_default=True,
    metavar="SECONDS",
    help="The wait after the first failure past --auth-free-failures, doubled after each next one.",
)
@click.option(
    "--auth-max-wait",
    type=click.FloatRange(0, 86_400),
    default=DEFAULT_AUTH_MAX_WAIT_S,
    show_default=True,
    metavar="SECONDS",
    help="The longest wait between tries of an address that keeps failing (its tries are refused"
    " unread meanwhile, the right token too).",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(0, 1000),
    default=DEFAULT_MAX_RESTARTS,
    show_default=True,
    help="Restarts of one dead worker within --restart-window; its next death stops the server"
    " (a crash loop). 0: never restart.",
)
@click.option(
    "--restart-window",
    type=click.FloatRange(0, 86_400, min_open=True),
    default=DEFAULT_RESTART_WINDOW_S,
    show_default=True,
    metavar="SECONDS",
    help="The seconds over which a worker's deaths are counted for --max-restarts.",
)
@common_options
@topic_policy_options
@pass_session
def serve(
    session: Session,
    host: str,
    port: int,
    token: str | None,
    token_file: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    resp_port: int,
    kafka_port: int,
    kafka_advertised_host: str | None,
    resp_subscribe: str,
    clean_interval: float,
    txn_window: str,
    log_level: str,
    log_format: str,
    access_log: bool,
    max_body: int,
    workers: int,
    max_connections: int,
    idle_timeout: float,
    handshake_timeout: float,
    max_hold: float,
    max_request: int,
    max_batch_inflated: int,
    fetch_max_bytes: int,
    write_timeout: float,
    max_invalid_commands: int,
    auth_free_failures: int,
    auth_wait: float,
    auth_max_wait: float,
    max_restarts: int,
    restart_window: float,
) -> None:
    """Serve the log over HTTP, the Redis protocol and Kafka's until interrupted.

    Each front shares the log, the host and the token; --resp-port 0 and
    --kafka-port 0 turn the Redis and Kafka fronts off.
    """
    warnings = []
    on_command_line = click.get_current_context().get_parameter_source("token") == ParameterSource.COMMANDLINE
    if token_file is not None:
        if token is not None and on_command_line:
            raise click.UsageError("give the token once: --token or --token-file")
        # Over TIDELOG_TOKEN, which a shell may export for the clients.
        token, mode = read_token_file(token_file)
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(
                f"the token file {token_file} can be read by other users (mode {mode:o}): chmod 600 it"
            )
    elif token and on_command_line:
        warnings.append("--token shows the token in the process list: prefer --token-file or TIDELOG_TOKEN")
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    if resp_port and resp_port == port:
        raise click.UsageError("--resp-port must differ from --port")
    if kafka_port and kafka_port in (port, resp_port):
        raise click.UsageError("--kafka-port must differ from --port and --resp-port")
    # Imported here: the server's dependencies are an optional extra (one line naming it when missing).
    import tidelog.server as server

    server.need_extra(resp=bool(resp_port), kafka=bool(kafka_port))
    if workers == 0:
        # A private in-memory log, or a port the kernel picks, is one process's. On SQLite one
        # process is the faster server too (measured: docs/benchmarks.md): N processes
        # contend for one write lock and see each other's appends only on the watch tick.
        on_sqlite = scheme_of(session.url) in LOCAL_SCHEMES
        workers = 1 if on_sqlite or port == 0 else default_workers()
    # The command's logs (and granian's) on stderr: where it listens, what it serves.
    log_to_stderr(log_level, log_format, ("tidelog", "_granian", "granian.access"))
    for warning in warnings:
        logging.getLogger("tidelog.server").warning("%s", warning)
    # A port in use, a crash loop: a TidelogError, one line and exit 1 (cli/app.py).
    server.serve(
        session.url,
        host=host,
        port=port,
        token=token,
        tls_cert=tls_cert,
        tls_key=tls_key,
        resp_port=resp_port,
        resp_subscribe=resp_subscribe,
        kafka_port=kafka_port,
        kafka_advertised_host=kafka_advertised_host,
        clean_interval=clean_interval,
        txn_window=txn_window,
        auto_create=session.auto_create,
        default_partitions=session.default_partitions,
        log_level=log_level,
        log_access=access_log,
        max_body=max_body,
        workers=workers,
        limits=Limits(
            max_connections=max_connections,
            idle_timeout=idle_timeout,
            handshake_timeout=handshake_timeout,
            max_hold=max_hold,
            max_request=max_request,
            max_invalid_commands=max_invalid_commands,
            write_timeout=write_timeout,
            max_batch_inflated=max_batch_inflated,
            fetch_max_bytes=fetch_max_bytes,
            auth_free_failures=auth_free_failures,
            auth_wait=auth_wait,
            auth_max_wait=auth_max_wait,
        ),
        restarts=Restarts(max_restarts=max_restarts, window=restart_window),
    )
