"""The bounds every front of `tidelog serve` holds to: one object, one set of defaults.

Each field is a documented setting (docs/operations/limits.md) with a safe
default, read by every front that has the thing it bounds: the HTTP server
(granian and the Starlette app), the Redis front and, when it exists, the
Kafka listener. Anchors: Redis's `maxclients`, `timeout` and
`client-query-buffer-limit`, nginx's `client_header_timeout` and
`keepalive_timeout`, PostgreSQL's `authentication_timeout`, Kafka's
`max.connections`, `connections.max.idle.ms` and `socket.request.max.bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import check_int
from ..errors import ConfigurationError

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_MAX_HOLD_S = 60.0
DEFAULT_MAX_REQUEST = 64 << 20
DEFAULT_MAX_ARGS = 1 << 20
DEFAULT_MAX_INVALID_COMMANDS = 16
DEFAULT_WRITE_TIMEOUT_S = 30.0
DEFAULT_MAX_BATCH_INFLATED = 32 << 20
DEFAULT_FETCH_MAX_BYTES = 55 << 20  # Kafka's fetch.max.bytes
DEFAULT_AUTH_FREE_FAILURES = 10
DEFAULT_AUTH_WAIT_S = 1.0
DEFAULT_AUTH_MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class Limits:
    """What one server process allows a client, on every front.

    max_connections: open connections a front accepts in one server process;
        a connection past it is refused at once (closed, or answered 503 where
        the protocol has a word for it), never queued.
    idle_timeout: seconds a connection may stay silent with no request in
        flight before it is closed (0: never). A blocked read (a long-poll,
        XREAD BLOCK, a subscriber waiting for a record) is not idle.
    handshake_timeout: seconds a new connection has to send a whole request
        head (HTTP) or to authenticate (RESP AUTH when a token is set, Kafka
        SASL); then it is closed.
    max_hold: seconds a record pushed to a subscriber (WebSocket, HTTP/2
        POST /subscribe, RESP SUBSCRIBE) stays leased while the subscriber
        says nothing (no ack, nack, extend or ping); then the lease is
        released and the record goes to another consumer.
    max_request: the largest request a stream protocol takes (RESP, Kafka),
        checked against the lengths a client announces before anything is
        allocated for them.
    max_args: the most arguments one RESP command may announce.
    max_batch_inflated: the most bytes one compressed Kafka record batch may
        inflate to; a batch past it is refused (CORRUPT_MESSAGE) having held
        no more than this, whatever its codec.
    fetch_max_bytes: the most record bytes one Kafka Fetch answer holds,
        whatever the request asks (Kafka's `fetch.max.bytes`); one record
        goes out all the same when the first partition's is larger (KIP-74).
    write_timeout: seconds an answer may wait for a client to take it (Kafka,
        Redis): a client that stops reading is closed then and its slot freed.
        Before authentication the handshake deadline bounds writes too.
    max_invalid_commands: a subscriber (WebSocket, POST /subscribe) that sends
        this many invalid commands in a row is closed: each is answered with
        its error, the last with the reason it is closed. A client that sends
        junk costs a bounded amount of work, however much it sent before it
        hung up; a valid command starts the count again.
    auth_free_failures: wrong tokens (HTTP bearer, console login, Redis AUTH,
        Kafka SASL, all counted together) a client address may send before it
        must wait between tries (server/throttle.py).
    auth_wait: the wait after the first failure past those, doubled after
        each next one ...
    auth_max_wait: ... up to this. While an address waits, its tries are
        refused unread (HTTP 429 with Retry-After), the right token too.
    """

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT_S
    max_hold: float = DEFAULT_MAX_HOLD_S
    max_request: int = DEFAULT_MAX_REQUEST
    max_args: int = DEFAULT_MAX_ARGS
    max_invalid_commands: int = DEFAULT_MAX_INVALID_COMMANDS
    write_timeout: float = DEFAULT_WRITE_TIMEOUT_S
    max_batch_inflated: int = DEFAULT_MAX_BATCH_INFLATED
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    auth_free_failures: int = DEFAULT_AUTH_FREE_FAILURES
    auth_wait: float = DEFAULT_AUTH_WAIT_S
    auth_max_wait: float = DEFAULT_AUTH_MAX_WAIT_S

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """ConfigurationError naming the first setting out of range."""
        try:
            check_int("max_connections", self.max_connections, 1, 1 << 20)
            check_int("max_request", self.max_request, 1024, 1 << 31)
            check_int("max_args", self.max_args, 16, 1 << 24)
            check_int("max_invalid_commands", self.max_invalid_commands, 1, 1 << 20)
            check_int("max_batch_inflated", self.max_batch_inflated, 1024, 1 << 31)
            check_int("fetch_max_bytes", self.fetch_max_bytes, 1024, (1 << 31) - 1)
            check_int("auth_free_failures", self.auth_free_failures, 0, 1 << 20)
        except Exception as e:
            raise ConfigurationError(str(e)) from None
        for name in (
            "idle_timeout",
            "handshake_timeout",
            "max_hold",
            "write_timeout",
            "auth_wait",
            "auth_max_wait",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 86_400:
                raise ConfigurationError(f"{name} must be between 0 and 86400 seconds, got {value!r}")
        if self.handshake_timeout == 0 or self.max_hold == 0 or self.write_timeout == 0:
            raise ConfigurationError(
                "handshake_timeout, max_hold and write_timeout must be more than 0 seconds"
            )
        if self.auth_wait > self.auth_max_wait:
            raise ConfigurationError(
                f"auth_wait ({self.auth_wait:g} s) must not be more than auth_max_wait ({self.auth_max_wait:g} s)"
            )
