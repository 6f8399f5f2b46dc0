"""The SQLite store: the embedded default, standard library only.

WAL with a busy timeout, `BEGIN IMMEDIATE` for every multi-statement write, so
several processes can share one file and no "database is locked" reaches a
user. Within a process one writer connection (behind a lock) does the writes
and each thread reads through its own connection, which WAL lets run beside
the writer.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import repeat
from typing import Any

from ..errors import (
    ConfigurationError,
    InvalidValue,
    OffsetOutOfRange,
    StoreError,
    TopicConflict,
    UnknownPartition,
    UnknownTopic,
)
from . import schema
from .base import AppendBatch, GroupOffset, PartitionInfo, Replayed, TopicInfo
from .sqlite_consumers import SQLiteConsumers
from .sqlite_groups import SQLiteGroups
from .sqlite_queues import SQLiteQueues
from .sqlite_retention import SQLiteRetention

OFFSET_BITS = 40
OFFSET_SPAN = 1 << OFFSET_BITS
BUSY_TIMEOUT_S = 60.0
MMAP_BYTES = 1 << 30
WATCH_TICK_S = 0.02  # how often appends by other processes are looked for

# The last offset of a partition, computed in SQL from the row-id range and
# the partition's base offset (what retention removed). ?1 = pid << 40.
_LAST_ID = "max(coalesce((SELECT max(id) FROM records WHERE id BETWEEN ?1 AND ?1 + 1099511627775), ?1), ?1 + p.base_offset)"


# One statement in autocommit: SQLite takes the write lock before it reads
# the last offset, so concurrent appenders never collide. No row is inserted
# when the partition is gone (its topic was deleted).
_APPEND_ONE = f"INSERT INTO records(id, ts, value, meta) SELECT {_LAST_ID} + 1, ?3, ?4, ?5 FROM partitions p WHERE p.id = ?2"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _statements(script: str) -> Iterator[str]:
    """Split a schema file into statements (comments may hold semicolons)."""
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            yield buf
            buf = ""
    if buf.strip() and not all(ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()):
        raise ConfigurationError(f"schema file ends in an incomplete statement: {buf[:80]!r}")


def path_from_url(url: str) -> str:
    """`sqlite:///rel.db`, `sqlite:////abs.db`, `:memory:` or a plain path."""
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if not rest.startswith("/"):
            raise ConfigurationError(f"bad SQLite URL {url!r}: use sqlite:///path/to/file.db")
        return rest[1:] or ":memory:"
    return url


_COMMIT = (
    "INSERT INTO offsets(grp, pid, committed) SELECT ?3, ?2, ?4 FROM partitions p "
    f"WHERE p.id = ?2 AND ?4 <= {_LAST_ID} - ?1 "
    "ON CONFLICT(grp, pid) DO UPDATE SET committed = max(committed, excluded.committed)"
)


class _PartitionGone(Exception):
    """A cached partition id no longer exists (its topic was deleted)."""


class SQLiteStore(SQLiteQueues, SQLiteConsumers, SQLiteGroups, SQLiteRetention):
    """Store protocol on one SQLite file (or :memory:)."""

    dialect = "sqlite"

    def __init__(self, path: str, durability: str = "normal"):
        self.path = path
        self.memory = path == ":memory:" or path == ""
        self._synchronous = "FULL" if durability == "full" else "NORMAL"
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._closed = False
        # topic name -> (topic_id, tuple of pids); partitions never shrink, so
        # a cached pid stays valid until the topic is deleted.
        self._pids: dict[str, tuple[int, tuple[int, ...]]] = {}
        if not self.memory:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise ConfigurationError(f"directory {parent!r} for the database does not exist")
        self._db = self._connect()
        self._migrate()

    # connections -----------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path or ":memory:",
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,
                cached_statements=256,
            )
            if not self.memory:
                if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
                    # A new file: only now, before WAL and the first table,
                    # can it be told to give freed pages back to the file system.
                    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
                self._retry_busy(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA foreign_keys=OFF")
            if not self.memory:
                # Reads go through a memory map instead of read() calls and a
                # copy into each connection's page cache.
                conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open SQLite database {self.path!r}: {e}") from None
        return conn

    @staticmethod
    def _retry_busy(fn: Any) -> Any:
        # Switching to WAL needs a moment of exclusive access; when several
        # processes open a new file at once one of them may find it busy.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _reader(self) -> sqlite3.Connection:
        if self.memory:
            return self._db
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        if self.memory:
            with self._lock:
                yield self._db
        else:
            yield self._reader()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction on the writer connection."""
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as db:
            current = db.execute("PRAGMA user_version").fetchone()[0]
            latest = schema.latest(self.dialect)
            if current > latest:
                raise ConfigurationError(
                    f"database {self.path!r} has schema version {current}, newer than this "
                    f"tidelog understands ({latest}); upgrade tidelog"
                )
            for version, sql in schema.migrations(self.dialect):
                if version > current:
                    for statement in _statements(sql):
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version={int(version)}")

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback()` when another connection commits to the file.

        SQLite has no cross-process notification, so a daemon thread reads
        `PRAGMA data_version` on a short tick; appends made through this
        process's Log wake waiters directly and do not wait for it.
        """
        if self.memory:
            return  # nobody else can write to a private in-memory database
        # The watch thread owns its connection and closes it itself: closing a
        # connection while another thread is inside execute() can crash
        # the interpreter.
        conn = self._connect()

        def poll() -> None:
            last = None
            try:
                while not self._closed:
                    try:
                        version = conn.execute("PRAGMA data_version").fetchone()[0]
                    except sqlite3.Error:
                        return
                    if last is not None and version != last:
                        callback()
                    last = version
                    time.sleep(WATCH_TICK_S)
            finally:
                conn.close()

        threading.Thread(target=poll, name="tidelog-sqlite-watch", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for conn in self._readers:
                conn.close()
            self._db.close()

    # topics ----------------------------------------------------------------

    @staticmethod
    def _topic_info(row: tuple) -> TopicInfo:
        return TopicInfo(name=row[0], partitions=row[1], config=json.loads(row[2]), created=row[3])

    def _load_pids(self, conn: sqlite3.Connection, name: str) -> tuple[int, tuple[int, ...]] | None:
        row = conn.execute("SELECT id FROM topics WHERE name = ?", (name,)).fetchone()
        if row is None:
            self._pids.pop(name, None)
            return None
        pids = tuple(
            r[0]
            for r in conn.execute(
                "SELECT id FROM partitions WHERE topic_id = ? ORDER BY partition", (row[0],)
            )
        )
        entry = (row[0], pids)
        self._pids[name] = entry
        return entry

    def _pid(self, topic: str, partition: int, refresh: bool = False) -> int:
        entry = None if refresh else self._pids.get(topic)
        if entry is None or partition >= len(entry[1]):
            with self._read() as conn:
                entry = self._load_pids(conn, topic)
            if entry is None:
                raise UnknownTopic(f"topic {topic!r} does not exist")
        pids = entry[1]
        if partition < 0 or partition >= len(pids):
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(pids) - 1}; partition {partition} does not exist"
            )
        return pids[partition]

    def create_topic(self, name: str, partitions: int, config: dict[str, Any]) -> tuple[TopicInfo, bool]:
        with self._write() as db:
            row = db.execute(
                "SELECT name, partitions, config, created FROM topics WHERE name = ?", (name,)
            ).fetchone()
            if row is not None:
                info = self._topic_info(row)
                if info.partitions != partitions:
                    raise TopicConflict(
                        f"topic {name!r} exists with {info.partitions} partitions, not {partitions}; "
                        "use add_partitions to grow it"
                    )
                return info, False
            created = _now_ms()
            cur = db.execute(
                "INSERT INTO topics(name, partitions, config, created) VALUES (?, ?, ?, ?)",
                (name, partitions, json.dumps(config, sort_keys=True), created),
            )
            topic_id = cur.lastrowid
            db.executemany(
                "INSERT INTO partitions(topic_id, partition) VALUES (?, ?)",
                zip(repeat(topic_id), range(partitions)),
            )
            self._pids.pop(name, None)
            return TopicInfo(name, partitions, dict(config), created), True

    def topic(self, name: str) -> TopicInfo | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT name, partitions, config, created FROM topics WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else self._topic_info(row)

    def topics(self) -> list[TopicInfo]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT name, partitions, config, created FROM topics ORDER BY name"
            ).fetchall()
        return [self._topic_info(r) for r in rows]

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        with self._write() as db:
            row = db.execute("SELECT id, partitions FROM topics WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise UnknownTopic(f"topic {name!r} does not exist")
            topic_id, current = row
            if partitions > current:
                db.executemany(
                    "INSERT INTO partitions(topic_id, partition) VALUES (?, ?)",
                    zip(repeat(topic_id), range(current, partitions)),
                )
                db.execute("UPDATE topics SET partitions = ? WHERE id = ?", (partitions, topic_id))
            self._pids.pop(name, None)
            row = db.execute(
                "SELECT name, partitions, config, created FROM topics WHERE id = ?", (topic_id,)
            ).fetchone()
        return self._topic_info(row)

    def delete_topic(self, name: str) -> bool:
        with self._write() as db:
            row = db.execute("SELECT id FROM topics WHERE name = ?", (name,)).fetchone()
            if row is None:
                return False
            pids = [r[0] for r in db.execute("SELECT id FROM partitions WHERE topic_id = ?", (row[0],))]
            for pid in pids:
                lo = pid << OFFSET_BITS
                db.execute("DELETE FROM records WHERE id BETWEEN ? AND ?", (lo, lo + OFFSET_SPAN - 1))
                db.execute("DELETE FROM offsets WHERE pid = ?", (pid,))
                db.execute("DELETE FROM queue_cursors WHERE pid = ?", (pid,))
                db.execute(
                    "DELETE FROM queue_state WHERE grp IN (SELECT grp FROM queue_groups) AND pid = ?", (pid,)
                )
            db.execute("DELETE FROM queue_groups WHERE topic_id = ?", (row[0],))
            db.execute(
                "DELETE FROM group_assignment WHERE grp IN (SELECT grp FROM group_state) AND topic = ?",
                (name,),
            )
            db.execute("DELETE FROM partitions WHERE topic_id = ?", (row[0],))
            db.execute("DELETE FROM topics WHERE id = ?", (row[0],))
            self._pids.pop(name, None)
        return True

    def partitions(self, topic: str) -> list[PartitionInfo]:
        self._pid(topic, 0, refresh=True)
        _, pids = self._pids[topic]
        out = []
        with self._read() as conn:
            for partition, pid in enumerate(pids):
                lo = pid << OFFSET_BITS
                first, last, count, size = conn.execute(
                    "SELECT min(id), max(id), count(*), coalesce(sum(length(value) + coalesce(length(meta), 0)), 0) "
                    "FROM records WHERE id BETWEEN ? AND ?",
                    (lo + 1, lo + OFFSET_SPAN - 1),
                ).fetchone()
                base_offset, removed = conn.execute(
                    "SELECT base_offset, removed_through FROM partitions WHERE id = ?", (pid,)
                ).fetchone() or (0, 0)
                if count:
                    last_offset = max(last - lo, base_offset)
                    out.append(PartitionInfo(partition, first - lo, last_offset, count, size))
                else:
                    out.append(PartitionInfo(partition, base_offset + 1, base_offset, 0, 0))
        return out

    # records ---------------------------------------------------------------

    def append_one(
        self, topic: str, partition: int, timestamp: int, value: bytes | str, meta: bytes | None = None
    ) -> int:
        entry = self._pids.get(topic)
        for attempt in (0, 1):
            if entry is None or attempt or partition >= len(entry[1]):
                pid = self._pid(topic, partition, refresh=attempt == 1)
            else:
                pid = entry[1][partition]
            lo = pid << OFFSET_BITS
            with self._lock:
                if self._closed:
                    raise StoreError("the store is closed")
                try:
                    cur = self._db.execute(_APPEND_ONE, (lo, pid, timestamp, value, meta))
                except UnicodeEncodeError:
                    raise InvalidValue("value is not valid Unicode (it holds a lone surrogate)") from None
                except sqlite3.Error as e:
                    raise StoreError(f"append to {topic!r}/{partition} failed: {e}") from None
                if cur.rowcount == 1:
                    return cur.lastrowid - lo
            # The partition row is gone: the topic was deleted (and maybe
            # recreated) by another process since we cached its pids.
        raise UnknownTopic(f"topic {topic!r} does not exist")

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        values: Sequence[bytes | str],
        metas: Sequence[bytes | None] | None = None,
    ) -> int:
        return self.append_many([AppendBatch(topic, partition, timestamp, values, metas)])[0]

    def append_many(self, batches: Sequence[AppendBatch], txn: str | None = None) -> list[int] | Replayed:
        gone = batches[0]
        for attempt in (0, 1):
            pids = [self._pid(b.topic, b.partition, refresh=attempt == 1) for b in batches]
            try:
                with self._write() as db:
                    if txn is not None:
                        row = db.execute("SELECT result FROM txns WHERE id = ?", (txn,)).fetchone()
                        if row is not None:
                            ts, done = json.loads(row[0])
                            return Replayed(ts, [tuple(b) for b in done])
                    firsts = []
                    for batch, pid in zip(batches, pids):
                        first = self._append_in(db, pid, batch)
                        if first is None:
                            gone = batch
                            raise _PartitionGone  # rolls the whole transaction back
                        firsts.append(first)
                    if txn is not None:
                        done = [[b.topic, b.partition, f, len(b.values)] for b, f in zip(batches, firsts)]
                        db.execute(
                            "INSERT INTO txns(id, result, created) VALUES (?, ?, ?)",
                            (txn, json.dumps([batches[0].timestamp, done]), _now_ms()),
                        )
                return firsts
            except _PartitionGone:
                continue  # our cached pids were stale: look them up again once
            except UnicodeEncodeError:
                raise InvalidValue("a value is not valid Unicode (it holds a lone surrogate)") from None
            except sqlite3.Error as e:
                raise StoreError(f"append failed: {e}") from None
        raise UnknownTopic(f"topic {gone.topic!r} does not exist")

    @staticmethod
    def _append_in(db: sqlite3.Connection, pid: int, batch: AppendBatch) -> int | None:
        lo = pid << OFFSET_BITS
        row = db.execute(f"SELECT {_LAST_ID} FROM partitions p WHERE p.id = ?2", (lo, pid)).fetchone()
        if row is None:
            return None
        first = row[0] + 1
        n = len(batch.values)
        ids = range(first, first + n)
        if batch.metas is None:
            db.executemany(
                "INSERT INTO records(id, ts, value) VALUES (?, ?, ?)",
                zip(ids, repeat(batch.timestamp, n), batch.values),
            )
        else:
            db.executemany(
                "INSERT INTO records(id, ts, value, meta) VALUES (?, ?, ?, ?)",
                zip(ids, repeat(batch.timestamp, n), batch.values, batch.metas),
            )
        return first - lo

    def read(self, topic: str, partition: int, after: int, limit: int) -> list[tuple]:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id - ?1, ts, value, meta FROM records WHERE id > ?2 AND id < ?3 ORDER BY id LIMIT ?4",
                (lo, lo + after, lo + OFFSET_SPAN, limit),
            ).fetchall()
            if not rows or rows[0][0] != after + 1:
                # A gap: compaction (fine) or retention removed what was asked for.
                self.check_start(conn, topic, partition, pid, after)
        if not rows:
            # An idle read is the moment to notice a topic deleted elsewhere.
            self._pid(topic, partition, refresh=True)
        return rows

    def read_before(self, topic: str, partition: int, before: int, limit: int) -> list[tuple]:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._read() as conn:
            return conn.execute(
                "SELECT id - ?1, ts, value, meta FROM records WHERE id > ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3",
                (lo, lo + min(before, OFFSET_SPAN), limit),
            ).fetchall()

    def trim(self, topic: str, partition: int, before: int) -> int:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._write() as db:
            cur = db.execute("DELETE FROM records WHERE id > ? AND id < ?", (lo, lo + before))
            removed = cur.rowcount
            if removed:
                # Offsets never repeat, even when the partition is now empty.
                db.execute(
                    "UPDATE partitions SET base_offset = max(base_offset, ?) WHERE id = ?", (before - 1, pid)
                )
                db.execute("DELETE FROM queue_state WHERE pid = ? AND offset < ?", (pid, before))
        return removed

    # stream group offsets ----------------------------------------------------

    def _bounds_check(
        self, conn: sqlite3.Connection, topic: str, partition: int, pid: int, offset: int
    ) -> None:
        lo = pid << OFFSET_BITS
        row = conn.execute(f"SELECT {_LAST_ID} FROM partitions p WHERE p.id = ?2", (lo, pid)).fetchone()
        last = (row[0] - lo) if row else 0
        if offset > last:
            raise OffsetOutOfRange(
                f"offset {offset} is past the end of {topic!r}/{partition} (last offset {last})",
                last=last,
            )

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        pid = self._pid(topic, partition)
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._commit_in(self._db, group, topic, partition, pid, offset)

    def _commit_in(
        self, db: sqlite3.Connection, group: str, topic: str, partition: int, pid: int, offset: int
    ) -> None:
        lo = pid << OFFSET_BITS
        # Bounds check and monotonic upsert in one statement.
        cur = db.execute(_COMMIT, (lo, pid, group, offset))
        if cur.rowcount == 1:
            return
        self._bounds_check(db, topic, partition, pid, offset)
        raise UnknownTopic(f"topic {topic!r} does not exist")

    def committed(self, group: str, topic: str, partition: int) -> int:
        pid = self._pid(topic, partition)
        with self._read() as conn:
            row = conn.execute(
                "SELECT committed FROM offsets WHERE grp = ? AND pid = ?", (group, pid)
            ).fetchone()
        return row[0] if row else 0

    def seek(self, group: str, topic: str, partition: int, offset: int) -> None:
        pid = self._pid(topic, partition)
        with self._write() as db:
            self._bounds_check(db, topic, partition, pid, offset)
            self.check_start(db, topic, partition, pid, offset)
            db.execute(
                "INSERT INTO offsets(grp, pid, committed) VALUES (?, ?, ?) "
                "ON CONFLICT(grp, pid) DO UPDATE SET committed = excluded.committed",
                (group, pid, offset),
            )

    def ensure_group(self, group: str, mode: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO groups(name, mode, config, created) VALUES (?, ?, '{}', ?)",
                (group, mode, _now_ms()),
            )

    def group_offsets(self, group: str) -> list[GroupOffset]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT o.grp, t.name, p.partition, o.committed FROM offsets o "
                "JOIN partitions p ON p.id = o.pid JOIN topics t ON t.id = p.topic_id "
                "WHERE o.grp = ? ORDER BY t.name, p.partition",
                (group,),
            ).fetchall()
        return [GroupOffset(*r) for r in rows]

    def groups(self) -> list[str]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT name FROM groups UNION SELECT DISTINCT grp FROM offsets ORDER BY 1"
            ).fetchall()
        return [r[0] for r in rows]
