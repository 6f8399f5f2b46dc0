"""The PostgreSQL store: one log shared by many processes and machines.

psycopg 3 with its connection pool; every connection is in autocommit, so a
send or a fetch is one statement and one round trip, and the few writes that
need several statements open a transaction of their own.

Offsets come from a counter on each partition row (`last_offset`): an append
bumps it with `UPDATE ... RETURNING` and inserts its records in the same
statement, so appenders to one partition queue on that row's lock until the
one before them commits, and offsets stay dense under any number of
connections. Appends `pg_notify` in their transaction; `watch` LISTENs on a
connection of its own (channel `tidelog`, the schema as payload), so a
long-poll on one machine wakes when another
appends.

The partition row also counts the records and bytes the partition holds:
appends add to them and retention's deletes subtract, each in the statement
that changes the records (any new code that deletes records must do the
same). Stream group membership and retention live in the mixins
`postgres_groups` and `postgres_retention`.

Tables live in the first schema of the connection's search_path (set it in
the URL: `?options=-csearch_path%3Dmyschema`).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import repeat
from operator import contains, itemgetter
from typing import Any

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

try:
    import psycopg
    from psycopg import sql as psql

    from .pool import Pool
except ImportError:  # pragma: no cover - exercised by a test that hides the driver
    raise ConfigurationError(
        "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'tidelog[postgres]'"
    ) from None

POOL_MAX = 8  # connections per store; each thread in a call holds one
CONNECT_TIMEOUT_S = 10
LISTEN_TICK_S = 0.25  # how often the listener looks whether the store was closed
RECONNECT_S = 1.0

# Append one batch to one partition in one statement: take the partition's
# row lock and its next offsets, insert the records, notify listeners. No row
# comes back when the partition is gone (its topic was deleted).
# A notification's payload is the log's schema, a slash, and the token of the
# store that appended (set on its connections as tidelog.origin): a listener
# skips its own store's appends, which its Log announced already.
# The partition row also counts the records and the bytes it holds (value and
# meta octets, as `_size` computes them), so describe needs no scan.
_APPEND = """
WITH p AS (
    UPDATE tidelog_partitions
    SET last_offset = last_offset + %(n)s, records = records + %(n)s, bytes = bytes + %(size)s
    WHERE id = %(pid)s
    RETURNING last_offset - %(n)s AS before
), r AS (
    INSERT INTO tidelog_records (pid, "offset", ts, value, text, meta)
    SELECT %(pid)s, p.before + v.i, %(ts)s, v.value, v.text, v.meta
    FROM p, unnest(%(values)b::bytea[], %(texts)b::text[], %(metas)b::bytea[])
         WITH ORDINALITY AS v(value, text, meta, i)
)
SELECT before + 1,
       pg_notify('tidelog', current_schema() || '/' || coalesce(current_setting('tidelog.origin', true), ''))
FROM p
"""

_APPEND_ONE = """
WITH p AS (
    UPDATE tidelog_partitions SET last_offset = last_offset + 1, records = records + 1, bytes = bytes + %s
    WHERE id = %s
    RETURNING id, last_offset
), r AS (
    INSERT INTO tidelog_records (pid, "offset", ts, value, text, meta)
    SELECT id, last_offset, %s, %s::bytea, %s::text, %s::bytea FROM p
)
SELECT last_offset,
       pg_notify('tidelog', current_schema() || '/' || coalesce(current_setting('tidelog.origin', true), ''))
FROM p
"""

# Reads come in three shapes. A partition whose records were all sent as
# bytes (or all as text) is read with one value column, so the rows come out
# of psycopg in Message layout; a NULL in it means some record is of the other
# kind, and the read is done again with both columns. The store remembers per
# partition which shape fit last.
#
# The range has an upper bound as well: offsets become visible in order (an
# appender waits for the one before it to commit) and are dense but for what
# retention and compaction removed, so the next records start at the first one
# held past `after` (one index probe) and the next `limit` of them lie within
# `limit` offsets of it (fewer when compaction left gaps there: the reader
# gets fewer and goes on from the last). With both bounds every plan touches
# at most `limit` rows; with only `offset > after`, a table without fresh
# statistics gets a bitmap scan of the whole partition and a sort.
_RANGE = """
FROM tidelog_records WHERE pid = %(pid)s AND "offset" > %(after)s AND "offset" <= %(limit)s + coalesce(
    (SELECT min("offset") - 1 FROM tidelog_records WHERE pid = %(pid)s AND "offset" > %(after)s), %(after)s
)
ORDER BY "offset" LIMIT %(limit)s
"""
_READ_BYTES = 'SELECT "offset", ts, CASE WHEN text IS NULL THEN value END, meta' + _RANGE
_READ_TEXT = 'SELECT "offset", ts, CASE WHEN value IS NULL THEN text END, meta' + _RANGE
_READ_ANY = 'SELECT "offset", ts, value, text, meta' + _RANGE

# Commit and seek check the bound and write in one statement; the partition's
# last offset comes back (none when the partition is gone) to tell a refused
# offset from a done one. A commit never moves the offset back.
_COMMIT = """
WITH p AS (SELECT last_offset FROM tidelog_partitions WHERE id = %(pid)s), c AS (
    INSERT INTO tidelog_offsets (grp, pid, committed)
    SELECT %(grp)s, %(pid)s, %(offset)s::bigint FROM p WHERE %(offset)s::bigint <= p.last_offset
    ON CONFLICT (grp, pid) DO UPDATE SET committed = excluded.committed
    WHERE tidelog_offsets.committed < excluded.committed
)
SELECT last_offset FROM p
"""

# The common commit, a step forward on an offset row that exists: one UPDATE.
_COMMIT_FORWARD = """
UPDATE tidelog_offsets SET committed = %(offset)s
WHERE grp = %(grp)s AND pid = %(pid)s AND committed < %(offset)s
  AND %(offset)s <= (SELECT last_offset FROM tidelog_partitions WHERE id = %(pid)s)
"""

# A seek also refuses an offset retention removed (0 excepted: "from the first").
_SEEK = """
WITH p AS (SELECT last_offset, removed_through FROM tidelog_partitions WHERE id = %(pid)s), c AS (
    INSERT INTO tidelog_offsets (grp, pid, committed)
    SELECT %(grp)s, %(pid)s, %(offset)s::bigint FROM p WHERE %(offset)s::bigint <= p.last_offset
        AND NOT (0 < %(offset)s::bigint AND %(offset)s::bigint < p.removed_through)
    ON CONFLICT (grp, pid) DO UPDATE SET committed = excluded.committed
)
SELECT last_offset, removed_through FROM p
"""

_TOPIC_COLUMNS = "SELECT name, partitions, config, created FROM tidelog_topics"

# A row with the value in `value` (bytes) or `text` (str): the store's rows
# carry whichever was set, as `tidelog.records` expects. PostgreSQL text
# cannot hold NUL, so a str with one is kept as UTF-8 in `value` with `text`
# set to '' to mark it.
_blobs = itemgetter(2)
_texts = itemgetter(3)
_bytes_row = itemgetter(0, 1, 2, 4)
_text_row = itemgetter(0, 1, 3, 4)


def stored(blob: bytes | None, text: str | None) -> bytes | str:
    if text is None:
        return blob  # type: ignore[return-value]
    return text if blob is None else blob.decode()


def _columns(value: bytes | str) -> tuple[bytes | None, str | None]:
    """(value, text) columns for one stored value."""
    if isinstance(value, bytes):
        return value, None
    if "\x00" in value:
        return value.encode(), ""
    return None, value


def _size(blob: bytes | None, text: str | None, meta: bytes | None) -> int:
    """A record's bytes in its partition's count: the octets of its stored
    value and meta, as PostgreSQL's octet_length counts them."""
    n = 0 if meta is None else len(meta)
    if blob is not None:
        n += len(blob)
    if text:
        n += len(text) if text.isascii() else len(text.encode())
    return n


DRIVER_ERROR = psycopg.Error  # what the store turns into tidelog errors (failures.py)
DISK_FULL = "53100"  # SQLSTATE disk_full: the server could not extend a file


def store_failure(e: psycopg.Error, doing: str = "") -> StoreError:
    """psycopg's error as the tidelog error a user sees (raise it `from e`)."""
    where = f"{doing}: " if doing else ""
    text = " ".join(str(e).split())
    if getattr(e, "sqlstate", None) == DISK_FULL:
        return StoreFull(
            f"{where}the PostgreSQL server is out of disk space ({text}); nothing of this write was kept "
            "and reads still work: free space on the server, or let retention remove records, then write again"
        )
    return StoreError(f"{where}PostgreSQL failed: {text}")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _redact(url: str) -> str:
    """The URL without its password, for error messages."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


MAX_OFFSET = (1 << 63) - 1
# A record's stored size, as the partitions' byte counters count it.
_SIZE = "coalesce(octet_length(value), 0) + coalesce(octet_length(text), 0) + coalesce(octet_length(meta), 0)"


class _PartitionGone(Exception):
    """A cached partition id no longer exists (its topic was deleted)."""


def _append_all(conn: psycopg.Connection, params: list[dict[str, Any]]) -> list[int]:
    """Append each batch in the caller's transaction; the first offset of each."""
    # Partitions are locked in pid order, so two group commits over the
    # same partitions never wait for each other in a cycle; a partition
    # named twice gets its batches in the order given.
    order = sorted(range(len(params)), key=lambda i: params[i]["pid"])
    firsts = [0] * len(params)
    cursors = [(i, conn.execute(_APPEND, params[i])) for i in order]
    for i, cur in cursors:
        row = cur.fetchone()
        if row is None:
            raise _PartitionGone(i)  # rolls the whole transaction back
        firsts[i] = row[0]
    return firsts


def _append_params(batch: AppendBatch) -> dict[str, Any]:
    """Statement parameters for one batch: bytes and text values in their own arrays."""
    values = batch.values if isinstance(batch.values, list) else list(batch.values)
    kinds = set(map(type, values))
    blobs: list[Any] | None
    texts: list[Any] | None
    if kinds == {bytes}:
        blobs, texts = values, None
        size = sum(map(len, values))
    elif kinds == {str} and not any(map(contains, values, repeat("\x00"))):
        blobs, texts = None, values
        joined = "".join(values)  # type: ignore[arg-type]  # all str: kinds says so
        size = len(joined) if joined.isascii() else len(joined.encode())
    else:
        columns = list(map(_columns, values))
        blobs, texts = [c[0] for c in columns], [c[1] for c in columns]
        size = sum(_size(b, t, None) for b, t in columns)
    metas = batch.metas
    if metas is not None and not isinstance(metas, list):
        metas = list(metas)
    if metas is not None:
        size += sum(map(len, filter(None, metas)))
    return {
        "n": len(values),
        "size": size,
        "pid": 0,
        "ts": batch.timestamp,
        "values": blobs,
        "texts": texts,
        "metas": metas,
    }


def one(cur: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """The row of a statement that always returns one (an aggregate, RETURNING of an upsert)."""
    row: tuple[Any, ...] | None = cur.fetchone()
    if row is None:
        raise StoreError("a statement that always returns a row returned none")
    return row


class PostgresBase(PartitionIds):
    """The pool, transactions and the partition-id cache every role module builds on."""

    dialect = "postgres"

    def __init__(self, url: str, durability: str = "normal"):
        self.url = url
        self._closed = False
        self._full = durability == "full"
        # topic name -> (topic_id, tuple of pids), as in the SQLite store.
        self._pids: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._shapes: dict[int, str] = {}  # pid -> the read query that fit last
        self._origin = secrets.token_hex(8)  # names this store's appends in notifications
        with self._connect() as conn:
            self._migrate(conn)
        self._pool = Pool(
            url,
            min_size=1,
            max_size=POOL_MAX,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            configure=self._configure,
            name="tidelog",
            num_workers=2,
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as e:
            self._pool.close()
            raise StoreError(f"cannot open a connection pool to {_redact(url)}: {e}") from None

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as e:
            raise StoreError(f"cannot connect to PostgreSQL at {_redact(self.url)}: {e}") from None

    def _configure(self, conn: psycopg.Connection) -> None:
        conn.execute("SELECT set_config('tidelog.origin', %s, false)", (self._origin,))
        if self._full:
            conn.execute("SET synchronous_commit = on")

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection]:
        """A pooled connection. getconn/putconn rather than pool.connection():
        that one also runs a COMMIT step, which autocommit does not need."""
        if self._closed:
            raise StoreError("the store is closed")
        try:
            conn = self._pool.getconn()
        except psycopg.Error as e:
            raise store_failure(e, "no PostgreSQL connection") from e
        broken = False
        try:
            yield conn
        except psycopg.Error as e:
            broken = conn.broken
            raise store_failure(e) from e
        finally:
            self._pool.putconn(conn)
            if broken:  # the server went away: its other connections went with it (pool.py)
                self._pool.lost()

    def _create_schema(self, conn: psycopg.Connection) -> None:
        """Create the first schema of the search_path when it does not exist.

        A URL naming a schema (options=-csearch_path=...) starts a log there,
        as it does in a database without tidelog tables. A role that may not
        create schemas is told what to run.
        """
        if one(conn.execute("SELECT current_schema()"))[0] is not None:
            return
        first = str(one(conn.execute("SHOW search_path"))[0]).split(",")[0].strip().strip('"')
        if not first or first == "$user":
            raise ConfigurationError(
                f"{_redact(self.url)} names no schema to put the tables in: set search_path in the URL "
                "(?options=-csearch_path%3Dmyschema)"
            )
        try:
            conn.execute(psql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psql.Identifier(first)))
        except psycopg.errors.InsufficientPrivilege:
            raise ConfigurationError(
                f"schema {first!r} does not exist and this role may not create it: run "
                f'CREATE SCHEMA "{first}" AUTHORIZATION <this role>; as a role that may'
            ) from None

    def _migrate(self, conn: psycopg.Connection) -> None:
        latest = schema.latest(self.dialect)
        try:
            self._create_schema(conn)
            current = self._schema_version(conn)
            if current < latest:
                with conn.transaction():
                    # Processes opening a new database at once take turns.
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext('tidelog schema ' || current_schema()))"
                    )
                    conn.execute("CREATE TABLE IF NOT EXISTS tidelog_version (version integer NOT NULL)")
                    current = self._schema_version(conn)
                    for version, sql in schema.migrations(self.dialect):
                        if version > current:
                            conn.execute(sql)
                            conn.execute("INSERT INTO tidelog_version (version) VALUES (%s)", (version,))
                    current = max(current, latest)
        except psycopg.errors.InvalidSchemaName:
            raise ConfigurationError(
                f"{_redact(self.url)} names no schema that exists: create it, or set search_path "
                "in the URL (?options=-csearch_path%3Dmyschema)"
            ) from None
        except psycopg.Error as e:
            raise StoreError(f"cannot set up the tidelog schema in {_redact(self.url)}: {e}") from None
        if current > latest:
            raise ConfigurationError(
                f"database {_redact(self.url)} has tidelog schema version {current}, newer than this "
                f"tidelog understands ({latest}); upgrade tidelog"
            )

    @staticmethod
    def _schema_version(conn: psycopg.Connection) -> int:
        if one(conn.execute("SELECT to_regclass('tidelog_version')"))[0] is None:
            return 0
        return int(one(conn.execute("SELECT coalesce(max(version), 0) FROM tidelog_version"))[0])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # the listener thread sees it within LISTEN_TICK_S
        self._pool.close()

    @staticmethod
    def _topic_info(row: tuple[Any, ...]) -> TopicInfo:
        return TopicInfo(name=row[0], partitions=row[1], config=row[2], created=row[3])

    def _load_pids(self, name: str) -> tuple[int, tuple[int, ...]] | None:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT t.id, p.id FROM tidelog_topics t JOIN tidelog_partitions p ON p.topic_id = t.id "
                "WHERE t.name = %s ORDER BY p.partition",
                (name,),
            ).fetchall()
        if not rows:
            self._pids.pop(name, None)
            return None
        entry = (rows[0][0], tuple(r[1] for r in rows))
        self._pids[name] = entry
        return entry

    def _fetch_pids(self, topic: str) -> tuple[int, tuple[int, ...]] | None:
        return self._load_pids(topic)

    def _commit_in(
        self, conn: psycopg.Connection, group: str, topic: str, partition: int, pid: int, offset: int
    ) -> None:
        """A commit inside the caller's transaction (a fenced group commit)."""
        # An offset past bigint is past every end: the statement sees the
        # largest one (and refuses it), the error names the one asked for.
        row = conn.execute(_COMMIT, {"grp": group, "pid": pid, "offset": min(offset, MAX_OFFSET)}).fetchone()
        if row is None:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        self._check_offset(topic, partition, offset, row[0])

    @staticmethod
    def _check_offset(topic: str, partition: int, offset: int, last: int, removed: int = 0) -> None:
        """OffsetOutOfRange when `offset` is past the end, or (for a seek)
        before what retention kept; 0 is never before it."""
        if offset > last:
            raise OffsetOutOfRange(
                f"offset {offset} is past the end of {topic!r}/{partition} (last offset {last})",
                last=last,
            )
        if 0 < offset < removed:
            raise OffsetOutOfRange(
                f"offset {offset + 1} of {topic!r}/{partition} was removed by retention; "
                f"the first available offset is {removed + 1}",
                first=removed + 1,
                last=last,
            )

    def _set_offset(self, sql: str, group: str, topic: str, partition: int, offset: int) -> None:
        params = {"grp": group, "offset": min(offset, MAX_OFFSET)}  # as in _commit_in
        for attempt in (0, 1):
            params["pid"] = self._pid(topic, partition, refresh=attempt == 1)
            with self._conn() as conn:
                row = conn.execute(sql, params).fetchone()
            if row is not None:
                self._check_offset(topic, partition, offset, *row)
                return
        raise UnknownTopic(f"topic {topic!r} does not exist")

    def _topic_pids(self, topic: str, refresh: bool = False) -> tuple[int, tuple[int, ...]]:
        """(topic_id, pids in partition order); UnknownTopic when it does not exist."""
        entry = None if refresh else self._pids.get(topic)
        if entry is None:
            entry = self._load_pids(topic)
            if entry is None:
                raise UnknownTopic(f"topic {topic!r} does not exist")
        return entry

    @staticmethod
    def removed_through(conn: psycopg.Connection, pid: int) -> int | None:
        """The highest offset retention removed; None when the partition is gone."""
        row = conn.execute("SELECT removed_through FROM tidelog_partitions WHERE id = %s", (pid,)).fetchone()
        return None if row is None else row[0]

    def check_start(self, conn: psycopg.Connection, topic: str, partition: int, pid: int, after: int) -> bool:
        """OffsetOutOfRange when `after` lies before what retention kept;
        False when the partition is gone (its topic was deleted).

        0 means "before the first record", whichever that is now: never out of range.
        """
        removed = self.removed_through(conn, pid)
        if removed is None:
            return False
        if 0 < after < removed:
            raise OffsetOutOfRange(
                f"offset {after + 1} of {topic!r}/{partition} was removed by retention; "
                f"the first available offset is {removed + 1}",
                first=removed + 1,
            )
        return True
