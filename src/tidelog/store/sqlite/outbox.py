"""Appends inside the application's own transaction on SQLite (the outbox).

The application holds a `sqlite3.Connection` to the log's file and does its
own writes on it; records appended on that connection in the same
transaction commit or roll back with them. SQLite lets one connection write
at a time, so from the first write to the commit nobody else can take an
offset: offsets stay dense, and a rollback leaves no gap. Other processes
see the commit as any other (`watch` reads `PRAGMA data_version`).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...errors import InvalidRequest, StoreError, UnknownTopic
from ..base import AppendBatch
from .base import SQLiteBase


class SQLiteOutbox(SQLiteBase):
    """Mixed into SQLiteStore: `Transactional` on the caller's connection."""

    def _check_connection(self, conn: Any) -> None:
        if not isinstance(conn, sqlite3.Connection):
            raise InvalidRequest(
                f"a transaction on this log needs a sqlite3.Connection to {self.path!r}, "
                f"not {type(conn).__name__}"
            )
        if self.memory:
            raise InvalidRequest("an in-memory log cannot share a transaction: open it on a file")
        try:
            rows = conn.execute("PRAGMA database_list").fetchall()
        except sqlite3.Error as e:
            raise InvalidRequest(f"the connection cannot be used: {e}") from None
        main = next((row[2] for row in rows if row[1] == "main"), "")
        if not main or not os.path.exists(main) or not os.path.samefile(main, self.path):
            raise InvalidRequest(
                f"the connection is to {main or 'a private database'!r}, not this log's file {self.path!r}"
            )

    @contextmanager
    def transaction(self, conn: Any) -> Iterator[None]:
        self._check_connection(conn)
        if conn.in_transaction:
            yield  # the caller's transaction: the caller commits or rolls back
            return
        try:
            conn.execute("BEGIN IMMEDIATE")  # the write lock now: offsets cannot move under us
        except sqlite3.Error as e:
            raise StoreError(f"cannot begin a transaction: {e}") from None
        try:
            yield
        except BaseException:
            conn.rollback()
            raise
        try:
            conn.commit()
        except sqlite3.Error as e:
            conn.rollback()
            raise StoreError(f"the transaction did not commit: {e}") from None

    def append_in(self, conn: Any, batches: Sequence[AppendBatch]) -> list[int]:
        if not isinstance(conn, sqlite3.Connection) or not conn.in_transaction:
            raise InvalidRequest("append_in needs the connection's transaction open (see transaction())")
        firsts = []
        try:
            for batch in batches:
                first = self._append_in(conn, self._pid(batch.topic, batch.partition), batch)
                if first is None:
                    raise UnknownTopic(f"topic {batch.topic!r} does not exist")
                firsts.append(first)
        except sqlite3.Error as e:
            raise StoreError(f"append failed: {e}") from None
        return firsts
