"""A streamed append on SQLite that gets on with its work while another writer holds the lock.

SQLite has one writer. When two streamed appends begin together (two
Spark tasks of one write), the second used to wait in BEGIN IMMEDIATE
for the first's whole transaction, idle, and then did all of its work
inside the lock, one after the other. Here a stream that finds the lock
taken stages each batch in a temporary table of its own connection (which
takes no lock on the file), tries the lock again at every batch, and once
it holds it copies the staged rows in with one INSERT ... SELECT a
partition (SQLite's own loop, no Python a row) and appends the rest
directly. The lock is held while rows are copied, not while they are
built; the transaction is still one, all or nothing, idempotent by txn.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from ...errors import InvalidRequest, StoreError, UnknownTopic
from ..base import AppendBatch, Replayed
from . import txns
from .base import BUSY_TIMEOUT_S, OFFSET_BITS, RowInserts, SQLiteBase

STAGED = RowInserts.into("temp.staged")
LOCK_POLL_S = 0.002  # between tries for the lock once every batch is staged
# A stream's transaction is as large as a Spark task's share; a page cache
# that holds it spills no dirty page to the WAL before the commit (SQLite's
# default is 2 MiB). Its own connection, so only while it streams.
STREAM_CACHE_KIB = 64 * 1024


class _Staged(NamedTuple):
    """A batch that waits in the staging table: its rows are `pid << 40` + k0 ..."""

    topic: str
    partition: int
    pid: int
    k0: int
    rows: int


def append_stream(log: SQLiteBase, batches: Iterable[AppendBatch], txn: str) -> list[int] | Replayed:
    """`SQLiteLog.append_stream`, over what every SQLite role shares (connections,
    the lock, the partition ids and the append in `base.py`)."""
    if log._closed:
        raise StoreError("the store is closed")
    with log._read() as conn:
        if (done := txns.replayed(conn, txn)) is not None:
            return done  # recorded before we began: no batch drawn
    if log.memory:
        # The one connection, held for the stream; nobody else can have
        # the write lock of a private in-memory database, so nothing stages.
        with log._lock:
            return _Stream(log, log._db, txn).run(batches)
    conn = log._connect()
    try:
        conn.execute("PRAGMA busy_timeout=0")  # a taken lock answers at once; we wait our own way
        conn.execute(f"PRAGMA cache_size=-{STREAM_CACHE_KIB}")
        return _Stream(log, conn, txn).run(batches)
    finally:
        conn.close()


class _Stream:
    def __init__(self, log: SQLiteBase, conn: sqlite3.Connection, txn: str):
        self.log, self.conn, self.txn = log, conn, txn
        self.locked = False
        self.staged: list[_Staged] = []
        self.per_pid: dict[int, int] = {}  # rows staged so far, by pid
        self.firsts: list[int] = []
        self.done: list[list[Any]] = []  # topic, partition, first offset, count: what the txn records
        self.topic: str | None = None
        self.stamp: int | None = None  # the first batch's: what the txn records

    def run(self, batches: Iterable[AppendBatch]) -> list[int] | Replayed:
        try:
            for batch in batches:
                if self.stamp is None:
                    self.topic, self.stamp = batch.topic, batch.timestamp
                elif batch.topic != self.topic:
                    raise InvalidRequest(
                        f"a streamed write goes to one topic: {self.topic!r}, then {batch.topic!r}"
                    )
                if not self.locked and self._lock(wait=False) and (done := self._begin()) is not None:
                    return done
                if self.locked:
                    self._append(batch)
                else:
                    self._stage(batch)
            if not self.locked:
                if not self.staged:
                    return []  # no batch: nothing to write, nothing to record
                self._lock(wait=True)
                if (done := self._begin()) is not None:
                    return done
            if self.firsts:
                txns.record(self.conn, self.txn, self.stamp, self.done)
            self.conn.execute("COMMIT")
            return self.firsts
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def _lock(self, wait: bool) -> bool:
        """BEGIN IMMEDIATE: False when another writer holds the lock and
        `wait` is False; with `wait`, tries every LOCK_POLL_S (SQLite's own
        busy wait sleeps up to 100 ms a try, which a waiting task would
        lose after every commit) until BUSY_TIMEOUT_S."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                if getattr(e, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
                if not wait:
                    return False
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"a streamed write waited {BUSY_TIMEOUT_S:.0f} s for SQLite's write lock"
                    ) from None
                time.sleep(LOCK_POLL_S)
                continue
            self.locked = True
            return True

    def _begin(self) -> Replayed | None:
        """Just locked: a txn recorded meanwhile (by the same write run
        elsewhere) is a replay; otherwise the staged rows go in."""
        if (done := txns.replayed(self.conn, self.txn)) is not None:
            self.conn.execute("ROLLBACK")
            return done
        self._copy_staged()
        return None

    def _append(self, batch: AppendBatch) -> None:
        log = self.log
        first = log._append_in(self.conn, log._pid(batch.topic, batch.partition), batch)
        if first is None:  # deleted since we cached its id: look once more
            first = log._append_in(self.conn, log._pid(batch.topic, batch.partition, refresh=True), batch)
            if first is None:
                raise UnknownTopic(f"topic {batch.topic!r} does not exist")
        self.firsts.append(first)
        self.done.append([batch.topic, batch.partition, first, len(batch.values)])

    def _stage(self, batch: AppendBatch) -> None:
        if not self.staged:
            self.conn.execute("PRAGMA temp.journal_mode=OFF")  # a failed stream drops the table whole
            self.conn.execute(
                "CREATE TEMP TABLE staged (id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, value NOT NULL, meta)"
            )
        pid = self.log._pid(batch.topic, batch.partition)
        k0 = self.per_pid.get(pid, 0)
        STAGED.run(self.conn, (pid << OFFSET_BITS) + k0, batch.timestamp, batch.values, batch.metas)
        self.per_pid[pid] = k0 + len(batch.values)
        self.staged.append(_Staged(batch.topic, batch.partition, pid, k0, len(batch.values)))

    def _copy_staged(self) -> None:
        """Under the lock: each partition's staged rows after its last offset, in one statement."""
        firsts: dict[int, int] = {}  # staged pid -> the offset its first staged row gets
        for s in self.staged:
            if s.pid in firsts:
                continue
            pid = s.pid
            last = self.log._last_id(self.conn, pid)
            if last is None:  # deleted (and maybe made again) while we staged
                pid = self.log._pid(s.topic, s.partition, refresh=True)
                last = self.log._last_id(self.conn, pid)
                if last is None:
                    raise UnknownTopic(f"topic {s.topic!r} does not exist")
            lo = s.pid << OFFSET_BITS  # the staged rows' ids: lo + k
            self.conn.execute(
                "INSERT INTO main.records(id, ts, value, meta) "
                "SELECT id + ?1, ts, value, meta FROM temp.staged WHERE id BETWEEN ?2 AND ?3",
                (last + 1 - lo, lo, lo + self.per_pid[s.pid] - 1),
            )
            firsts[s.pid] = last + 1 - (pid << OFFSET_BITS)
        for s in self.staged:
            first = firsts[s.pid] + s.k0
            self.firsts.append(first)
            self.done.append([s.topic, s.partition, first, s.rows])
        # The staging table goes with the connection, after the commit:
        # dropping it here would free its pages inside the lock.
