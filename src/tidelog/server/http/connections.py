"""The HTTP front's connections, held to the server's Limits.

What granian offers does not bound a connection that sends nothing: with
HTTP/1.1 and HTTP/2 on one port, hyper first reads a few bytes to tell the
two apart, with no timer (hyperium/hyper#3756, #3962), and its header read
timeout only starts after that; hyper has no idle timeout for HTTP/2; and
granian's `backpressure` (its cap on connections) leaves the excess queued
in the kernel's backlog, where a flood of silent sockets kept /healthz
waiting for ever (issue 27). So granian gets the settings it has
(`backpressure` = max_connections, HTTP/1.1's header read timeout =
idle_timeout, see run.py), and beside it a guard, one thread a server
process, holds the rest, every `tick` seconds:

- handshake_timeout: a connection that has not made a request by then
  (silent, a partial request head, a TLS handshake and nothing after, an
  HTTP/2 preface and no stream) is shut down;
- idle_timeout: a connection with no request in flight (no long-poll, SSE
  stream or subscriber) and none for that long is shut down;
- max_connections: when granian holds that many and more wait in the
  backlog, each waiting one displaces the oldest connection that never made
  a request, then the longest idle one; when every connection has a request
  in flight, the waiting ones are refused (503 on plain HTTP, closed under
  TLS), not left queued.

What the app knows of a connection (requests in flight, when it last had
one) it learns from `ConnectionTracking`, keyed by the client's address;
what the kernel knows (which sockets are open, the backlog) the guard reads
through sockets.py. Shutting a socket down (not closing it: the descriptor
is granian's) makes granian read its end, close it and free its place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import Counter, Gauge

from ..limits import Limits
from . import sockets
from .errors import error_body

log = logging.getLogger("tidelog.server")

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
Peer = tuple[str, int]

MIN_TICK_S = 0.05
MAX_TICK_S = 0.25
SAY_EVERY_S = 10.0  # a flood is logged as one line this often, not a line a connection
ABORT_WAIT_S = 5.0  # how long an abort waits for its connection to show in a scan

REFUSED = error_body(
    "unavailable", "every connection of this server process is busy (max_connections); retry shortly"
)
REFUSED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"retry-after: 1\r\ncontent-length: " + str(len(REFUSED)).encode() + b"\r\n\r\n" + REFUSED
)


class Activity:
    """A connection as the app sees it: requests in flight, and when the last ended."""

    __slots__ = ("in_flight", "last")

    def __init__(self) -> None:
        self.in_flight = 0
        self.last = time.monotonic()


def peer_of(address: Any) -> Peer | None:
    """A client address as (host, port), the same from ASGI's scope and getpeername()."""
    if not address or len(address) < 2:
        return None
    host = str(address[0])
    if host.startswith("::ffff:") and "." in host:  # an IPv4 client of a dual-stack socket
        host = host[7:]
    return host, int(address[1])


class ConnectionTracking:
    """ASGI middleware, outermost: counts each connection's requests in
    flight (an HTTP/2 connection carries several), for the guard."""

    def __init__(self, app: ASGIApp, connections: Connections):
        self.app = app
        self.activity = connections.activity

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        peer = peer_of(scope.get("client")) if scope["type"] in ("http", "websocket") else None
        if peer is None:
            await self.app(scope, receive, send)
            return
        activity = self.activity.get(peer)
        if activity is None:
            activity = self.activity[peer] = Activity()
        activity.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            activity.in_flight -= 1
            activity.last = time.monotonic()


class ConnectionMetrics:
    def __init__(self, registry: Any):
        self.closed = Counter(
            "tidelog_http_connections_closed",
            "HTTP connections the server closed or refused, by reason",
            ["reason"],
            registry=registry,
        )
        self.open = Gauge(
            "tidelog_http_connections",
            "Open HTTP connections (seen by the connection guard)",
            registry=registry,
            multiprocess_mode="livesum",
        )


class Connections:
    """The app's table of connections and the guard thread that holds them
    to `limits`. The guard starts once the server says which port it
    serves (`serve_on`) and the app starts."""

    def __init__(self, limits: Limits, registry: Any):
        self.limits = limits
        self.metrics = ConnectionMetrics(registry)
        # Written by ConnectionTracking on the event loop; the guard thread
        # only reads entries and removes those of connections gone (one dict
        # operation at a time, each atomic under the GIL).
        self.activity: dict[Peer, Activity] = {}
        self.port: int | None = None
        self.answer: bytes | None = REFUSED_RESPONSE
        # peer -> when to give up looking for it: an abort asked between two scans, or for a
        # connection the scan missed once, waits for the next rounds instead of being dropped.
        self._aborts: dict[Peer, float] = {}
        self._aborts_lock = threading.Lock()
        self._first_seen: dict[int, float] = {}  # inode -> when it began (by the kernel's quiet time)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._said = 0.0
        self._unsaid: dict[str, int] = {}
        timeouts = [t for t in (limits.handshake_timeout, limits.idle_timeout) if t > 0]
        self.tick = min(MAX_TICK_S, max(MIN_TICK_S, min(timeouts) / 4))

    def serve_on(self, port: int, tls: bool) -> None:
        """The port granian listens on (TLS: a refusal is a close, not a 503)."""
        self.port = port or None
        self.answer = None if tls else REFUSED_RESPONSE

    def abort(self, address: Any) -> None:
        """Shut the connection of this client down at the next tick (a
        subscriber that lost its message and whose socket does not drain)."""
        peer = peer_of(address)
        if peer is not None:
            with self._aborts_lock:
                self._aborts[peer] = time.monotonic() + ABORT_WAIT_S

    def start(self) -> None:
        if self.port is None or self._thread is not None:
            return
        if not sockets.supported():
            log.warning(
                "no /proc/self/fd here: silent and idle HTTP connections are not closed and"
                " max_connections queues instead of refusing (Linux only)"
            )
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(sockets.PortSockets(self.port),), name="tidelog-connections", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self, port: sockets.PortSockets) -> None:
        failed = 0.0
        while not self._stop.wait(self.tick):
            try:
                self.check(port)
            except Exception:  # noqa: BLE001 - the guard must outlive a surprise
                if time.monotonic() - failed >= SAY_EVERY_S:  # said once, not 4 times a second
                    failed = time.monotonic()
                    log.exception("the connection guard failed a round (it goes on)")

    # one round -----------------------------------------------------------------------

    def check(self, port: sockets.PortSockets) -> None:
        now = time.monotonic()
        listener, connections = port.scan()
        limits = self.limits
        first_seen = {c.inode: self._first_seen.get(c.inode, now - c.age) for c in connections}
        self._first_seen = first_seen
        with self._aborts_lock:
            self._aborts = aborts = {p: until for p, until in self._aborts.items() if until > now}
        live: list[sockets.Found] = []
        unspoken: list[tuple[float, sockets.Found]] = []  # (since, connection): no request yet
        idle: list[tuple[float, sockets.Found]] = []  # (since, connection): none in flight
        for c in connections:
            assert c.peer is not None
            activity = self.activity.get(c.peer)
            if c.peer in aborts:
                with self._aborts_lock:
                    self._aborts.pop(c.peer, None)
                self._close(c, "aborted")
            elif activity is None:
                since = first_seen[c.inode]
                if now - since >= limits.handshake_timeout:
                    self._close(c, "handshake_timeout")
                else:
                    live.append(c)
                    unspoken.append((since, c))
            elif activity.in_flight <= 0:
                if limits.idle_timeout and now - activity.last >= limits.idle_timeout:
                    self._close(c, "idle_timeout")
                else:
                    live.append(c)
                    idle.append((activity.last, c))
            else:
                live.append(c)
        self.metrics.open.set(len(live))
        if listener is not None:
            self._make_room(listener, len(live), unspoken, idle)
        self._forget(now, {c.peer for c in connections})
        self._say(now)

    def _make_room(
        self,
        listener: sockets.Found,
        held: int,
        unspoken: list[tuple[float, sockets.Found]],
        idle: list[tuple[float, sockets.Found]],
    ) -> None:
        """Connections wait in the backlog while granian holds max_connections:
        displace silent, then idle ones for them; refuse those there is no
        room for."""
        waiting = sockets.accept_queue(listener)
        if not waiting:
            return
        short = waiting - max(0, self.limits.max_connections - held)
        if short <= 0:
            return  # granian accepts them as its places free up
        candidates = [c for _, c in sorted(unspoken, key=_since)] + [c for _, c in sorted(idle, key=_since)]
        # Refuse first, while granian (full) accepts nothing: the ones refused
        # are those that waited longest, not whichever granian leaves over;
        # then each displaced connection lets one of the newest in.
        over = short - len(candidates)
        if over > 0:
            refused = sockets.refuse(listener, over, self.answer)
            if refused:
                self.metrics.closed.labels("refused").inc(refused)
                self._unsaid["refused"] = self._unsaid.get("refused", 0) + refused
        for c in candidates[:short]:
            self._close(c, "displaced")

    def _close(self, c: sockets.Found, reason: str) -> None:
        if sockets.shut(c):
            self.metrics.closed.labels(reason).inc()
            self._unsaid[reason] = self._unsaid.get(reason, 0) + 1

    def _forget(self, now: float, open_peers: set[Peer | None]) -> None:
        """Drop what the app knew of connections gone (a little after their
        last request: one may have opened and spoken since the scan)."""
        for peer in list(self.activity):
            activity = self.activity.get(peer)
            if (
                activity is not None
                and peer not in open_peers
                and activity.in_flight <= 0
                and now - activity.last > 2 * self.tick
            ):
                self.activity.pop(peer, None)

    def _say(self, now: float) -> None:
        """One line for what was closed since the last, at most every SAY_EVERY_S:
        info when the limit was reached (displaced, refused), else debug."""
        if not self._unsaid or now - self._said < SAY_EVERY_S:
            return
        crowded = any(reason in self._unsaid for reason in ("displaced", "refused"))
        log.log(
            logging.INFO if crowded else logging.DEBUG,
            "HTTP connections closed by the server's limits: %s",
            ", ".join(f"{n} {reason}" for reason, n in sorted(self._unsaid.items())),
        )
        self._unsaid = {}
        self._said = now


def _since(item: tuple[float, sockets.Found]) -> float:
    return item[0]
