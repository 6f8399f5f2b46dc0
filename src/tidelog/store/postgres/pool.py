"""The PostgreSQL store's connection pool: psycopg_pool's, through an outage.

When the server goes away (a restart, a failover) psycopg_pool replaces each
broken connection in the background, retrying after 1 s, then 2, 4, 8 ...
without bound until `reconnect_timeout`: after an outage of T seconds its
next try may come T seconds after the server is back, and every request
waits for it. Measured with tests/test_postgres_restart.py's private
cluster down for 8.4 s: no answer for 14.5 s, the first 201 6.2 s after
PostgreSQL was back. Here:

- a retry comes 0.1 s after the first failure, then at most every
  `RETRY_MAX_S`: connections are back within about a second of the server;
- a request waits at most `WAIT_S` for a connection, then fails with a
  StoreError (503 over HTTP) instead of hanging through the outage; once
  a wait failed or a connection was found broken, requests wait only
  `WAIT_DOWN_S` until one is had again. A server's writes go through one
  group-commit writer, one after the other: at 5 s each, the requests
  queued behind the first waited 15 s and more for their 503;
- a connection found broken makes the pool check its idle ones at once
  (`lost()`), so that after the server's return requests do not meet, one
  by one, connections that died with the old server.

The first two lean on psycopg_pool's retry object (AttemptWithBackoff,
documented in its source), overridden in one place.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

WAIT_S = 5.0  # the longest a request waits for a pooled connection ...
WAIT_DOWN_S = 0.5  # ... while the server seems away
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 1.0


class _Retry(AttemptWithBackoff):
    INITIAL_DELAY = RETRY_FIRST_S

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RETRY_MAX_S)


class Pool(ConnectionPool):
    def __init__(self, conninfo: str, **kwargs: Any):
        kwargs.setdefault("timeout", WAIT_S)
        super().__init__(conninfo, **kwargs)
        self.reached = True  # False from a failed wait or a broken connection to the next connection had

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        if timeout is None:
            timeout = WAIT_S if self.reached else WAIT_DOWN_S
        try:
            conn = super().getconn(timeout)
        except PoolTimeout:
            self.reached = False
            raise
        self.reached = True
        return conn

    def lost(self) -> None:
        """A connection was found broken: the server went away, and its other connections with it."""
        self.reached = False
        self.check()

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        super()._add_connection(attempt or _Retry(timeout=self.reconnect_timeout), growing)
