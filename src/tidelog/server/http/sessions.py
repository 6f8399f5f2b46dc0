"""The console's sessions, in memory and bounded (its login form is throttled
with every other front's authentication: server/throttle.py).

A login makes a session: a random id (the cookie's value, 256 bits) kept
here with its CSRF token, so a logout revokes it and two logins never
share a cookie. A session ends after `idle` seconds without a request or
`lifetime` seconds in all, and the table keeps at most `max_sessions`
(the least recently used goes first). Only a digest of each id is kept,
so the table is no list of valid cookies. Under several server processes
every console request is served by the first (home.py), so one table
holds every session; a restart of that process ends them (log in again).

"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_SESSIONS = 1000
SESSION_IDLE_S = 8 * 3600.0  # a working day without a request
SESSION_LIFETIME_S = 24 * 3600.0


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
