"""Appends inside the application's own transaction on PostgreSQL (the outbox).

The application holds a psycopg connection to the log's database (and
schema) and does its own writes on it; records appended there commit or
roll back with them, as pgmq's sends do by being SQL. The store's own append
statement runs on that connection: it takes the partition's row lock (so
offsets stay dense until the transaction ends, and a rollback takes them
back) and queues the NOTIFY that wakes other processes, which PostgreSQL
delivers only on commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from ...errors import InvalidRequest, StoreError, UnknownTopic
from ..base import AppendBatch
from .base import _APPEND, PostgresBase, _append_params, one

# Where a connection points: the same database, server and first schema as the store's.
_WHERE = "SELECT current_database(), current_schema(), inet_server_addr()::text, inet_server_port()"


class PostgresOutbox(PostgresBase):
    """Mixed into PostgresStore: `Transactional` on the caller's connection."""

    _where: tuple[Any, ...] | None = None

    def _check_connection(self, conn: Any) -> None:
        if self._where is None:
            with self._conn() as own:
                self._where = tuple(one(own.execute(_WHERE)))
        where = tuple(one(conn.execute(_WHERE)))
        if where != self._where:
            raise InvalidRequest(
                f"the connection is to database {where[0]!r} schema {where[1]!r}, not this log's "
                f"database {self._where[0]!r} schema {self._where[1]!r}"
            )

    @contextmanager
    def transaction(self, conn: Any) -> Iterator[None]:
        if not isinstance(conn, psycopg.Connection):
            raise InvalidRequest(
                f"a transaction on this log needs a psycopg Connection, not {type(conn).__name__}"
            )
        try:
            # Begins, or nests in (a savepoint) what the caller has open.
            with conn.transaction():
                self._check_connection(conn)
                yield
        except psycopg.Error as e:
            raise StoreError(f"the transaction failed: {e}") from None

    def append_in(self, conn: Any, batches: Sequence[AppendBatch]) -> list[int]:
        if not isinstance(conn, psycopg.Connection) or conn.info.transaction_status not in (
            psycopg.pq.TransactionStatus.INTRANS,
        ):
            raise InvalidRequest("append_in needs the connection's transaction open (see transaction())")
        firsts = []
        try:
            for batch in batches:
                params = _append_params(batch)
                params["pid"] = self._pid(batch.topic, batch.partition)
                row = conn.execute(_APPEND, params).fetchone()
                if row is None:
                    raise UnknownTopic(f"topic {batch.topic!r} does not exist")
                firsts.append(int(row[0]))
        except psycopg.Error as e:
            raise StoreError(f"append failed: {e}") from None
        return firsts
