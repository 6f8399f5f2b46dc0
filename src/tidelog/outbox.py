"""Sending inside the application's own transaction (the outbox pattern).

    with log.transaction(conn) as tx:        # conn: the application's connection
        conn.execute("UPDATE orders SET state = 'paid' WHERE id = ?", (42,))
        tx.send("emails", {"order": 42})

The record exists if and only if the application's change committed: both
are written on `conn`, in one transaction that the block begins and commits
(or joins, when `conn` already has one open: then its owner commits). A
rollback leaves no record and no gap in the offsets. Receivers in this
process are woken when the block ends; in other processes by the store's
own wake-ups, which follow the commit.

On SQLite `conn` is a `sqlite3.Connection` to the log's file; on
PostgreSQL a psycopg connection to the log's database and schema. Topics
must exist before the transaction: creating one would need the log's own
connection, which on SQLite waits for the write lock the block holds.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from .core import Core
from .errors import ConfigurationError, InvalidRequest
from .producer import Producer
from .queues import queue_headers
from .records import BatchSent, Prepared, Sent
from .store.base import AppendBatch, Transactional

if TYPE_CHECKING:
    from contextlib import AbstractContextManager


class Transaction:
    """Sends that commit with the application's own transaction on `conn`.

    Use it once, as a context manager (`Log.transaction`)."""

    def __init__(self, log: Core, conn: Any):
        if not isinstance(log.store, Transactional):
            raise ConfigurationError(
                "this store cannot send inside an application's transaction: use the SQLite or "
                "PostgreSQL store (an http:// log has no connection to share)"
            )
        self.log = log
        self.store: Transactional = log.store
        self.conn = conn
        self._state = "new"
        self._block: AbstractContextManager[None] | None = None
        self._sent: list[BatchSent] = []

    def __enter__(self) -> Transaction:
        if self._state != "new":
            raise InvalidRequest("a transaction is used once: open a new one with log.transaction(conn)")
        block = self.store.transaction(self.conn)
        block.__enter__()
        self._block, self._state = block, "open"
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._state = "ended"
        assert self._block is not None
        swallowed = self._block.__exit__(kind, error, tb)
        if kind is None:
            # Committed (or handed to the caller's own commit): wake this process's waiters.
            for s in self._sent:
                self.log.notifier.notify(s.topic, s.partition, s.last_offset)
        return swallowed

    def _check_open(self) -> None:
        if self._state == "new":
            raise InvalidRequest("send inside the block: with log.transaction(conn) as tx: tx.send(...)")
        if self._state == "ended":
            raise InvalidRequest("this transaction ended: open a new one with log.transaction(conn)")

    def send(
        self,
        topic: str,
        value: Any,
        *,
        key: Any = None,
        headers: Any = None,
        partition: int | None = None,
        delay: float = 0,
        priority: int = 0,
    ) -> Sent:
        """Append one record in the transaction; visible once it commits.
        `delay` and `priority` are a queue send's (see `Queue.send`)."""
        sent = self.send_batch(
            topic, [value], key=key, headers=headers, partition=partition, delay=delay, priority=priority
        )
        return Sent(sent.topic, sent.partition, sent.first_offset, sent.timestamp)

    def send_batch(
        self,
        topic: str,
        values: list[Any],
        *,
        key: Any = None,
        headers: Any = None,
        partition: int | None = None,
        delay: float = 0,
        priority: int = 0,
    ) -> BatchSent:
        """Append records in the transaction, with consecutive offsets."""
        self._check_open()
        now = self.log.clock()
        headers = queue_headers(headers, now, delay=delay, priority=priority)
        self.log.catalog.shape(topic)  # UnknownTopic now: see the module's docstring
        prepared: Prepared = Producer(self.log).prepare(
            topic, values, key=key, partition=partition, headers=headers
        )
        batch = AppendBatch(prepared.topic, prepared.partition, now, prepared.values, prepared.metas)
        (first,) = self.store.append_in(self.conn, [batch])
        sent = BatchSent(prepared.topic, prepared.partition, first, len(prepared.values), now)
        self._sent.append(sent)
        return sent
