"""The console's sessions and its login throttle, both in memory and bounded.

A login makes a session: a random id (the cookie's value, 256 bits) kept
here with its CSRF token, so a logout revokes it and two logins never
share a cookie. A session ends after `idle` seconds without a request or
`lifetime` seconds in all, and the table keeps at most `max_sessions`
(the least recently used goes first). Only a digest of each id is kept,
so the table is no list of valid cookies. Under several server processes
every console request is served by the first (home.py), so one table
holds every session; a restart of that process ends them (log in again).

The throttle bounds how fast one client address may try tokens: `burst`
wrong tokens at once, then one every `refill` seconds (a token bucket, as
nginx's limit_req with a burst). It remembers at most `max_clients`
addresses, forgetting the least recently seen; an IPv6 client counts by
its /64, which one host usually holds whole.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_SESSIONS = 1000
SESSION_IDLE_S = 8 * 3600.0  # a working day without a request
SESSION_LIFETIME_S = 24 * 3600.0
LOGIN_BURST = 10  # wrong tokens a client address may send at once ...
LOGIN_REFILL_S = 6.0  # ... then one every this many seconds (10 a minute)
MAX_CLIENTS = 4096


@dataclass
class Session:
    csrf: str  # the token every form of this session carries
    created: float
    seen: float


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


class Sessions:
    def __init__(
        self,
        max_sessions: int = MAX_SESSIONS,
        idle: float = SESSION_IDLE_S,
        lifetime: float = SESSION_LIFETIME_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_sessions, self.idle, self.lifetime, self.clock = max_sessions, idle, lifetime, clock
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()  # least recently used first
        # The forms' CSRF token when no session stands behind a page (a server without a token).
        self.anonymous_csrf = secrets.token_urlsafe(32)

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self) -> str:
        """A new session; returns its id, the cookie's value."""
        now = self.clock()
        self._expire(now)
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        self._sessions[_digest(session_id)] = Session(secrets.token_urlsafe(32), now, now)
        return session_id

    def find(self, session_id: str) -> Session | None:
        """The live session of this id (its use counts as activity), or None."""
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self.clock()
        if self._expired(session, now):
            del self._sessions[key]
            return None
        session.seen = now
        self._sessions.move_to_end(key)
        return session

    def close(self, session_id: str) -> bool:
        """End a session (a logout); False when there was none."""
        return self._sessions.pop(_digest(session_id), None) is not None

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.seen > self.idle or now - session.created > self.lifetime

    def _expire(self, now: float) -> None:
        for key, session in list(self._sessions.items()):
            if self._expired(session, now):
                del self._sessions[key]


def client_key(address: str) -> str:
    """What the throttle counts by: the address, or an IPv6 address's /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class LoginThrottle:
    def __init__(
        self,
        burst: int = LOGIN_BURST,
        refill: float = LOGIN_REFILL_S,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.burst, self.refill, self.max_clients, self.clock = burst, refill, max_clients, clock
        self._tries: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tries left, when)

    def __len__(self) -> int:
        return len(self._tries)

    def _left(self, key: str, now: float) -> float:
        left, when = self._tries.get(key, (float(self.burst), now))
        return min(float(self.burst), left + (now - when) / self.refill)

    def wait(self, address: str) -> float:
        """Seconds before `address` may try a token again (0: now)."""
        left = self._left(client_key(address), self.clock())
        return 0.0 if left >= 1 else (1 - left) * self.refill

    def failed(self, address: str) -> None:
        """`address` sent a wrong token."""
        key, now = client_key(address), self.clock()
        left = self._left(key, now)
        self._tries[key] = (max(0.0, left - 1), now)
        self._tries.move_to_end(key)
        while len(self._tries) > self.max_clients:
            self._tries.popitem(last=False)
