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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import repeat
from typing import Any, NamedTuple

from ...errors import (
    ConfigurationError,
    OffsetOutOfRange,
    StoreError,
    StoreFull,
    UnknownTopic,
)
from .. import schema
from ..base import AppendBatch, TopicInfo
from ..pids import PartitionIds

OFFSET_BITS = 40
OFFSET_SPAN = 1 << OFFSET_BITS
BUSY_TIMEOUT_S = 60.0
MMAP_BYTES = 1 << 30
WATCH_TICK_S = 0.02  # how often appends by other processes are looked for, when idle
# ...and how often while they come: after a change the watch looks again this soon and
# doubles its pause on each look that finds none, back to WATCH_TICK_S. A steady stream
# from another process (1,000 records/s) is then seen within ~1-2 ms, not 20.
WATCH_BUSY_TICK_S = 0.001

# The last offset of a partition, computed in SQL from the row-id range and
# the partition's base offset (what retention removed). ?1 = pid << 40.
_LAST_ID = "max(coalesce((SELECT max(id) FROM records WHERE id BETWEEN ?1 AND ?1 + 1099511627775), ?1), ?1 + p.base_offset)"


# One statement in autocommit: SQLite takes the write lock before it reads
# the last offset, so concurrent appenders never collide. A VALUES row, not
# INSERT ... SELECT: an INSERT whose SELECT reads the table it inserts into
# first copies the SELECT's rows to a temporary table (so it cannot read its
# own writes), which cost more than the insert itself. When the partition is
# gone (its topic was deleted) the id is a text that an INTEGER PRIMARY KEY
# refuses (SQLITE_MISMATCH) and nothing is inserted; a NULL id would let SQLite
# pick one in another partition's range. A record without meta binds no NULL
# for it: sqlite3 looks for an adapter for every parameter that is not an int,
# float or str, None included.
_NEXT_ID = f"coalesce((SELECT {_LAST_ID} + 1 FROM partitions p WHERE p.id = ?2), 'partition gone')"
_APPEND_ONE = f"INSERT INTO records(id, ts, value) VALUES ({_NEXT_ID}, ?3, ?4)"
_APPEND_ONE_META = f"INSERT INTO records(id, ts, value, meta) VALUES ({_NEXT_ID}, ?3, ?4, ?5)"
# A wire batch's id is its first record's: offsets are never reused, so a
# row there already is one whose records are gone; this one replaces it.
_KEEP_WIRE = "INSERT OR REPLACE INTO wire_batches(id, last, data, size) VALUES (?, ?, ?, ?)"
SQLITE_MISMATCH = 20  # "datatype mismatch": the id of an append to a partition that is gone

# A batch's records go in ROWS_PER_INSERT at a time: one statement of that
# many VALUES rows, the first id and the timestamp bound once (?1, ?2), the
# values (and metas) after them. Against executemany's statement a row it
# costs about 40% less a record (1.6 s against 2.8 s a million in a bare
# loop): the sqlite3 module's work per execution (binding, reset, and
# letting the GIL go and taking it back around each step) is paid once a
# hundred rows. The GIL matters as much as the time: a thread that wants it
# back after every row waits up to the switch interval whenever another
# thread of the process is busy in Python (the Spark sink's receiver).
# What is left goes ROWS_PER_SMALL_INSERT at a time, then a row a statement:
# a batch split where its timestamps change (a Kafka producer's batch
# spanning a millisecond: two runs of, say, 69 and 31 records) costs about
# 30% more a record than a whole one when its parts go a row a statement.
ROWS_PER_INSERT = 100
ROWS_PER_SMALL_INSERT = 10


def _rows(table: str, n: int, meta: bool) -> str:
    if meta:
        rows = ", ".join(f"(?1 + {k}, ?2, ?{k + 3}, ?{k + 3 + n})" for k in range(n))
        return f"INSERT INTO {table}(id, ts, value, meta) VALUES {rows}"
    rows = ", ".join(f"(?1 + {k}, ?2, ?{k + 3})" for k in range(n))
    return f"INSERT INTO {table}(id, ts, value) VALUES {rows}"


class RowInserts(NamedTuple):
    """The INSERTs that put a batch's rows into one table (`records`, or a
    streamed append's staging table): ROWS_PER_INSERT rows a statement,
    then ROWS_PER_SMALL_INSERT, then a row a statement for what is left;
    each without and with meta."""

    rows: str
    rows_meta: str
    small: str
    small_meta: str
    one: str
    one_meta: str

    @classmethod
    def into(cls, table: str) -> RowInserts:
        return cls(
            _rows(table, ROWS_PER_INSERT, False),
            _rows(table, ROWS_PER_INSERT, True),
            _rows(table, ROWS_PER_SMALL_INSERT, False),
            _rows(table, ROWS_PER_SMALL_INSERT, True),
            f"INSERT INTO {table}(id, ts, value) VALUES (?, ?, ?)",
            f"INSERT INTO {table}(id, ts, value, meta) VALUES (?, ?, ?, ?)",
        )

    def run(
        self,
        db: sqlite3.Connection,
        first: int,
        ts: int,
        values: Sequence[bytes | str],
        metas: Sequence[bytes | None] | None,
    ) -> None:
        """Insert `values` (and `metas`) with ids `first`, `first` + 1, ..."""
        n = len(values)
        done = 0
        for size, plain, with_meta in (
            (ROWS_PER_INSERT, self.rows, self.rows_meta),
            (ROWS_PER_SMALL_INSERT, self.small, self.small_meta),
        ):
            whole = done + (n - done) // size * size
            if whole == done:
                continue
            cur = db.cursor()
            if metas is None:
                for i in range(done, whole, size):
                    cur.execute(plain, (first + i, ts, *values[i : i + size]))
            else:
                for i in range(done, whole, size):
                    j = i + size
                    cur.execute(with_meta, (first + i, ts, *values[i:j], *metas[i:j]))
            done = whole
        if done < n:
            ids = range(first + done, first + n)
            if metas is None:
                db.executemany(self.one, zip(ids, repeat(ts, n - done), values[done:]))
            else:
                db.executemany(self.one_meta, zip(ids, repeat(ts, n - done), values[done:], metas[done:]))


RECORDS = RowInserts.into("records")

SQLITE_FULL = 13  # "database or disk is full": the disk, or PRAGMA max_page_count


def store_failure(e: sqlite3.Error, doing: str = "") -> StoreError:
    """sqlite3's error as the tidelog error a user sees (raise it `from e`)."""
    code = getattr(e, "sqlite_errorcode", None)
    where = f"{doing}: " if doing else ""
    if (code is not None and code & 0xFF == SQLITE_FULL) or "is full" in str(e):
        return StoreFull(
            f"{where}the SQLite database is full ({e}); nothing of this write was kept and reads still "
            "work: free disk space, or let retention remove records, then write again"
        )
    return StoreError(f"{where}SQLite failed: {e}")


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


class SQLiteBase(PartitionIds):
    """Connections, transactions and the partition-id cache every role module builds on.

    One writer connection behind a lock does the writes (`_write`: one
    IMMEDIATE transaction); each thread reads through its own connection
    (`_read`), which WAL lets run beside the writer.
    """

    dialect = "sqlite"

    def __init__(self, path: str, durability: str = "normal"):
        self.path = path
        self.memory = path == ":memory:" or path == ""
        self._synchronous = "FULL" if durability == "full" else "NORMAL"
        self._lock = threading.RLock()
        self._writing = False  # in `_write`'s transaction (the lock's holder alone reads it)
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
            if os.path.isdir(path):
                raise ConfigurationError(
                    f"{path!r} is a directory: name the database file (e.g. {os.path.join(path, 'tidelog.db')})"
                )
            if not os.path.exists(path) and not os.access(parent, os.W_OK):
                raise ConfigurationError(f"cannot create the database {path!r}: {parent!r} is not writable")
        self._db = self._connect()
        # One cursor for single statements on the writer (under the lock):
        # `Connection.execute` makes and registers a new cursor each call.
        self._db_cursor = self._db.cursor()
        self._migrate()

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
            hint = ""
            if not self.memory and "unable to open" in str(e):
                hint = f" (may this user create and write files in {os.path.dirname(os.path.abspath(self.path))!r}?)"
            raise StoreError(f"cannot open SQLite database {self.path!r}: {e}{hint}") from None
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

    def reads_wait_for_nothing(self) -> bool:
        # In memory there is one connection, behind the writer's lock.
        return not self.memory

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        if self.memory:
            with self._lock:
                yield self._db
        else:
            yield self._reader()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction on the writer connection. Inside another
        on the same thread, it joins that one (which commits or rolls back)."""
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            db = self._db
            if self._writing:
                yield db
                return
            db.execute("BEGIN IMMEDIATE")
            self._writing = True
            try:
                yield db
                db.execute("COMMIT")  # may fail too: a full disk shows here first
            except BaseException:
                # SQLite may have rolled back already (on a full disk it does);
                # a second ROLLBACK would hide the error that matters.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                self._writing = False

    def _migrate(self) -> None:
        latest = schema.latest(self.dialect)
        # Read without the write lock first: an up-to-date file (the usual
        # case) needs nothing more, and opening it must not wait for another
        # process's long write (a Spark task streaming its share), as a
        # BEGIN IMMEDIATE would. Only a file that needs a migration takes
        # the lock, and reads the version again under it.
        if self._db.execute("PRAGMA user_version").fetchone()[0] == latest:
            return
        with self._write() as db:
            current = db.execute("PRAGMA user_version").fetchone()[0]
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

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for conn in self._readers:
                conn.close()
            self._db.close()

    @staticmethod
    def _topic_info(row: tuple[Any, ...]) -> TopicInfo:
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

    def _fetch_pids(self, topic: str) -> tuple[int, tuple[int, ...]] | None:
        with self._read() as conn:
            return self._load_pids(conn, topic)

    @staticmethod
    def _last_id(db: sqlite3.Connection, pid: int) -> int | None:
        """The id of the partition's last offset (`pid << 40` when it never
        had one); None when the partition is gone (its topic was deleted)."""
        row = db.execute(
            f"SELECT {_LAST_ID} FROM partitions p WHERE p.id = ?2", (pid << OFFSET_BITS, pid)
        ).fetchone()
        return None if row is None else int(row[0])

    @staticmethod
    def _append_in(db: sqlite3.Connection, pid: int, batch: AppendBatch) -> int | None:
        last = SQLiteBase._last_id(db, pid)
        if last is None:
            return None
        RECORDS.run(db, last + 1, batch.timestamp, batch.values, batch.metas)
        if batch.wire is not None:
            end = last + len(batch.values)  # the id of the batch's last record
            first, wire = end - batch.wire.records + 1, batch.wire
            db.execute(_KEEP_WIRE, (first, end - (pid << OFFSET_BITS), wire.data, wire.size))
        return last + 1 - (pid << OFFSET_BITS)

    def _bounds_check(
        self, conn: sqlite3.Connection, topic: str, partition: int, pid: int, offset: int
    ) -> None:
        top = self._last_id(conn, pid)
        last = 0 if top is None else top - (pid << OFFSET_BITS)
        if offset > last:
            raise OffsetOutOfRange(
                f"offset {offset} is past the end of {topic!r}/{partition} (last offset {last})",
                last=last,
            )

    def _commit_in(
        self, db: sqlite3.Connection, group: str, topic: str, partition: int, pid: int, offset: int
    ) -> None:
        lo = pid << OFFSET_BITS
        if offset >= OFFSET_SPAN:  # past any partition's end, and past what SQLite's integers hold
            self._bounds_check(db, topic, partition, pid, offset)
        # Bounds check and monotonic upsert in one statement.
        cur = db.execute(_COMMIT, (lo, pid, group, offset))
        if cur.rowcount == 1:
            return
        self._bounds_check(db, topic, partition, pid, offset)
        raise UnknownTopic(f"topic {topic!r} does not exist")

    def _all_pids(self, topic: str) -> tuple[int, tuple[int, ...]]:
        self._pid(topic, 0, refresh=True)
        return self._pids[topic]

    def removed_through(self, conn: sqlite3.Connection, pid: int) -> int:
        row = conn.execute("SELECT removed_through FROM partitions WHERE id = ?", (pid,)).fetchone()
        return row[0] if row else 0

    def check_start(self, conn: sqlite3.Connection, topic: str, partition: int, pid: int, after: int) -> None:
        """OffsetOutOfRange when `after` lies before what retention kept.

        0 means "before the first record", whichever that is now: never out of range.
        """
        removed = self.removed_through(conn, pid)
        if 0 < after < removed:
            raise OffsetOutOfRange(
                f"offset {after + 1} of {topic!r}/{partition} was removed by retention; "
                f"the first available offset is {removed + 1}",
                first=removed + 1,
            )
