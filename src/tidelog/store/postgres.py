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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import repeat
from operator import contains, itemgetter
from typing import Any

from ..errors import (
    ConfigurationError,
    OffsetOutOfRange,
    StoreError,
    TopicConflict,
    UnknownPartition,
    UnknownTopic,
)
from . import schema
from .base import AppendBatch, GroupOffset, PartitionInfo, Replayed, TopicInfo
from .postgres_consumers import PostgresConsumers
from .postgres_groups import PostgresGroups
from .postgres_queues import PostgresQueues
from .postgres_retention import PostgresRetention

try:
    import psycopg
    from psycopg.types.json import Jsonb
    from psycopg_pool import ConnectionPool
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


def _stored(blob: bytes | None, text: str | None) -> bytes | str:
    if text is None:
        return blob  # type: ignore[return-value]
    return text if blob is None else blob.decode()


def _columns(value: bytes | str) -> tuple[bytes | None, str | None]:
    """(value, text) columns for one stored value."""
    if type(value) is bytes:
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


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _redact(url: str) -> str:
    """The URL without its password, for error messages."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


class _PartitionGone(Exception):
    """A cached partition id no longer exists (its topic was deleted)."""


class PostgresStore(PostgresQueues, PostgresConsumers, PostgresGroups, PostgresRetention):
    """Store protocol on a PostgreSQL database."""

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
        self._pool = ConnectionPool(
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

    # connections -----------------------------------------------------------

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
            raise StoreError(f"no PostgreSQL connection: {e}") from None
        try:
            yield conn
        except psycopg.Error as e:
            raise StoreError(f"PostgreSQL: {e}") from None
        finally:
            self._pool.putconn(conn)

    def _migrate(self, conn: psycopg.Connection) -> None:
        latest = schema.latest(self.dialect)
        try:
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
        if conn.execute("SELECT to_regclass('tidelog_version')").fetchone()[0] is None:
            return 0
        return conn.execute("SELECT coalesce(max(version), 0) FROM tidelog_version").fetchone()[0]

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback()` when another connection appends to this log.

        LISTEN runs on a connection of its own, read by a daemon thread. The
        callback also runs once LISTEN is in place (and after a reconnect):
        anything appended before then was not announced to us.
        """
        conn: psycopg.Connection | None = None
        schema_name = None
        try:
            conn, schema_name = self._listen()
        except psycopg.Error:
            pass  # the thread keeps trying
        threading.Thread(
            target=self._receive, args=(callback, conn, schema_name), daemon=True, name="tidelog-pg-listen"
        ).start()
        if conn is not None:
            callback()

    def _listen(self) -> tuple[psycopg.Connection, str]:
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        conn.execute("LISTEN tidelog")
        schema_name = conn.execute("SELECT current_schema()").fetchone()[0]
        return conn, schema_name

    def _receive(
        self, callback: Callable[[], None], conn: psycopg.Connection | None, schema_name: str | None
    ) -> None:
        while not self._closed:
            try:
                if conn is None:
                    conn, schema_name = self._listen()
                    callback()
                for note in conn.notifies(timeout=LISTEN_TICK_S):
                    schema_of, _, origin = note.payload.rpartition("/")
                    if schema_of == schema_name and origin != self._origin:
                        callback()
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(RECONNECT_S)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # the listener thread sees it within LISTEN_TICK_S
        self._pool.close()

    # topics ----------------------------------------------------------------

    @staticmethod
    def _topic_info(row: tuple) -> TopicInfo:
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

    def _pid(self, topic: str, partition: int, refresh: bool = False) -> int:
        entry = None if refresh else self._pids.get(topic)
        if entry is None or partition >= len(entry[1]):
            entry = self._load_pids(topic)
            if entry is None:
                raise UnknownTopic(f"topic {topic!r} does not exist")
        pids = entry[1]
        if partition < 0 or partition >= len(pids):
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(pids) - 1}; partition {partition} does not exist"
            )
        return pids[partition]

    def create_topic(self, name: str, partitions: int, config: dict[str, Any]) -> tuple[TopicInfo, bool]:
        created = _now_ms()
        with self._conn() as conn:
            # One statement: the topic and its partitions appear together, and
            # of two processes creating one name, one creates and one finds it.
            row = conn.execute(
                """
                WITH t AS (
                    INSERT INTO tidelog_topics (name, partitions, config, created)
                    VALUES (%(name)s, %(n)s, %(config)s, %(created)s)
                    ON CONFLICT (name) DO NOTHING RETURNING id
                ), p AS (
                    INSERT INTO tidelog_partitions (topic_id, partition)
                    SELECT t.id, g FROM t, generate_series(0, %(n)s - 1) AS g
                )
                SELECT id FROM t
                """,
                {"name": name, "n": partitions, "config": Jsonb(config), "created": created},
            ).fetchone()
            if row is None:
                existing = conn.execute(_TOPIC_COLUMNS + " WHERE name = %s", (name,)).fetchone()
        self._pids.pop(name, None)
        if row is not None:
            return TopicInfo(name, partitions, dict(config), created), True
        if existing is None:  # created and deleted again between our two statements
            return self.create_topic(name, partitions, config)
        info = self._topic_info(existing)
        if info.partitions != partitions:
            raise TopicConflict(
                f"topic {name!r} exists with {info.partitions} partitions, not {partitions}; "
                "use add_partitions to grow it"
            )
        return info, False

    def topic(self, name: str) -> TopicInfo | None:
        with self._conn() as conn:
            row = conn.execute(_TOPIC_COLUMNS + " WHERE name = %s", (name,)).fetchone()
        return None if row is None else self._topic_info(row)

    def topics(self) -> list[TopicInfo]:
        with self._conn() as conn:
            rows = conn.execute(_TOPIC_COLUMNS + " ORDER BY name").fetchall()
        return [self._topic_info(r) for r in rows]

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        with self._conn() as conn, conn.transaction():
            # The topic's row lock makes concurrent growers take turns.
            row = conn.execute(
                "SELECT id, partitions FROM tidelog_topics WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if row is None:
                raise UnknownTopic(f"topic {name!r} does not exist")
            topic_id, current = row
            if partitions > current:
                conn.execute(
                    "INSERT INTO tidelog_partitions (topic_id, partition) "
                    "SELECT %s, generate_series(%s::integer, %s::integer - 1)",
                    (topic_id, current, partitions),
                )
                conn.execute(
                    "UPDATE tidelog_topics SET partitions = %s WHERE id = %s", (partitions, topic_id)
                )
            row = conn.execute(_TOPIC_COLUMNS + " WHERE id = %s", (topic_id,)).fetchone()
        self._pids.pop(name, None)
        return self._topic_info(row)

    def delete_topic(self, name: str) -> bool:
        with self._conn() as conn, conn.transaction():
            row = conn.execute("DELETE FROM tidelog_topics WHERE name = %s RETURNING id", (name,)).fetchone()
            if row is None:
                return False
            # Lock the partitions in pid order (as appends do): this waits for
            # appends in flight, and no append starts on them after this.
            pids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM tidelog_partitions WHERE topic_id = %s ORDER BY id FOR UPDATE", (row[0],)
                )
            ]
            conn.execute("DELETE FROM tidelog_partitions WHERE topic_id = %s", (row[0],))
            conn.execute("DELETE FROM tidelog_records WHERE pid = ANY(%s)", (pids,))
            conn.execute("DELETE FROM tidelog_offsets WHERE pid = ANY(%s)", (pids,))
        self._pids.pop(name, None)
        return True

    def partitions(self, topic: str) -> list[PartitionInfo]:
        # The partition row counts its records and bytes, so describing needs
        # no scan: one index probe for the oldest record held.
        with self._conn() as conn:
            rows = conn.execute(
                """
                SELECT p.partition, p.last_offset,
                       (SELECT min("offset") FROM tidelog_records WHERE pid = p.id), p.records, p.bytes
                FROM tidelog_topics t JOIN tidelog_partitions p ON p.topic_id = t.id
                WHERE t.name = %s ORDER BY p.partition
                """,
                (topic,),
            ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        return [
            PartitionInfo(partition, last + 1, last, 0, 0)
            if first is None
            else PartitionInfo(partition, first, last, records, size)
            for partition, last, first, records, size in rows
        ]

    # records ---------------------------------------------------------------

    def append_one(
        self, topic: str, partition: int, timestamp: int, value: bytes | str, meta: bytes | None = None
    ) -> int:
        blob, text = _columns(value)
        params = [_size(blob, text, meta), 0, timestamp, blob, text, meta]
        entry = self._pids.get(topic)
        for attempt in (0, 1):
            if entry is None or attempt or partition >= len(entry[1]):
                params[1] = self._pid(topic, partition, refresh=attempt == 1)
            else:
                params[1] = entry[1][partition]
            with self._conn() as conn:
                row = conn.execute(_APPEND_ONE, params).fetchone()
            if row is not None:
                return row[0]
            # The partition row is gone: the topic was deleted (and maybe
            # recreated) elsewhere since we cached its pids.
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
        params = [_append_params(b) for b in batches]
        gone = batches[0]
        for attempt in (0, 1):
            for p, b in zip(params, batches):
                p["pid"] = self._pid(b.topic, b.partition, refresh=attempt == 1)
            try:
                with self._conn() as conn:
                    if txn is not None:
                        return self._append_once(conn, params, batches, txn)
                    if len(batches) == 1:
                        row = conn.execute(_APPEND, params[0]).fetchone()
                        if row is None:
                            raise _PartitionGone
                        return [row[0]]
                    return self._append_in_transaction(conn, params)
            except _PartitionGone as e:
                gone = batches[e.args[0]] if e.args else batches[0]
                continue  # our cached pids were stale: look them up again once
        raise UnknownTopic(f"topic {gone.topic!r} does not exist")

    @staticmethod
    def _append_in_transaction(conn: psycopg.Connection, params: list[dict[str, Any]]) -> list[int]:
        with conn.transaction(), conn.pipeline():
            return _append_all(conn, params)

    @staticmethod
    def _append_once(
        conn: psycopg.Connection, params: list[dict[str, Any]], batches: Sequence[AppendBatch], txn: str
    ) -> list[int] | Replayed:
        """An idempotent write: claim the txn id, append, record the result,
        all in one transaction. A second writer of the same id waits on the
        claim until the first commits (then replays its result) or rolls
        back (then writes itself)."""
        with conn.transaction():
            claimed = conn.execute(
                "INSERT INTO tidelog_txns (id, result, created) VALUES (%s, '[]', %s) "
                "ON CONFLICT (id) DO NOTHING RETURNING 1",
                (txn, _now_ms()),
            ).fetchone()
            if claimed is None:
                ts, done = conn.execute("SELECT result FROM tidelog_txns WHERE id = %s", (txn,)).fetchone()[0]
                return Replayed(ts, [tuple(b) for b in done])
            with conn.pipeline():
                firsts = _append_all(conn, params)
            done = [[b.topic, b.partition, f, len(b.values)] for b, f in zip(batches, firsts)]
            conn.execute(
                "UPDATE tidelog_txns SET result = %s WHERE id = %s",
                (Jsonb([batches[0].timestamp, done]), txn),
            )
        return firsts

    def read(self, topic: str, partition: int, after: int, limit: int) -> list[tuple]:
        pid = self._pid(topic, partition)
        params = {"pid": pid, "after": after, "limit": limit}
        shape = self._shapes.get(pid, _READ_BYTES)
        with self._conn() as conn:
            rows = conn.execute(shape, params, binary=True).fetchall()
            if rows and shape is not _READ_ANY and None in map(_blobs, rows):
                shape = _READ_ANY
                rows = conn.execute(shape, params, binary=True).fetchall()
            held = True
            if not rows or (after and rows[0][0] != after + 1):
                # Nothing, or a gap: compaction (fine) or retention removed
                # what was asked for (reading from 0 never is).
                held = self.check_start(conn, topic, partition, pid, after)
        if not rows:
            if not held:
                # An idle read is the moment to notice a topic deleted elsewhere.
                self._pid(topic, partition, refresh=True)
            return rows
        if shape is not _READ_ANY:
            return rows
        n = len(rows)
        no_text = list(map(_texts, rows)).count(None)
        if no_text == n:
            self._shapes[pid] = _READ_BYTES
            return list(map(_bytes_row, rows))
        if no_text == 0 and list(map(_blobs, rows)).count(None) == n:
            self._shapes[pid] = _READ_TEXT
            return list(map(_text_row, rows))
        self._shapes[pid] = _READ_ANY
        return [(o, ts, _stored(v, t), m) for o, ts, v, t, m in rows]

    # stream group offsets ----------------------------------------------------

    def _set_offset(self, sql: str, group: str, topic: str, partition: int, offset: int) -> None:
        params = {"grp": group, "offset": offset}
        for attempt in (0, 1):
            params["pid"] = self._pid(topic, partition, refresh=attempt == 1)
            with self._conn() as conn:
                row = conn.execute(sql, params).fetchone()
            if row is not None:
                self._check_offset(topic, partition, offset, *row)
                return
        raise UnknownTopic(f"topic {topic!r} does not exist")

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

    def _commit_in(
        self, conn: psycopg.Connection, group: str, topic: str, partition: int, pid: int, offset: int
    ) -> None:
        """A commit inside the caller's transaction (a fenced group commit)."""
        row = conn.execute(_COMMIT, {"grp": group, "pid": pid, "offset": offset}).fetchone()
        if row is None:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        self._check_offset(topic, partition, offset, row[0])

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        params = {"grp": group, "pid": self._pid(topic, partition), "offset": offset}
        with self._conn() as conn:
            if conn.execute(_COMMIT_FORWARD, params).rowcount == 1:
                return
        # A first commit, a step back (ignored), a refused offset or a stale pid.
        self._set_offset(_COMMIT, group, topic, partition, offset)

    def seek(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._set_offset(_SEEK, group, topic, partition, offset)

    def committed(self, group: str, topic: str, partition: int) -> int:
        pid = self._pid(topic, partition)
        with self._conn() as conn:
            row = conn.execute(
                "SELECT committed FROM tidelog_offsets WHERE grp = %s AND pid = %s", (group, pid)
            ).fetchone()
        return row[0] if row else 0

    def ensure_group(self, group: str, mode: str) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO tidelog_groups (name, mode, config, created) VALUES (%s, %s, '{}', %s) "
                "ON CONFLICT (name) DO NOTHING",
                (group, mode, _now_ms()),
            )

    def group_offsets(self, group: str) -> list[GroupOffset]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT o.grp, t.name, p.partition, o.committed FROM tidelog_offsets o "
                "JOIN tidelog_partitions p ON p.id = o.pid JOIN tidelog_topics t ON t.id = p.topic_id "
                "WHERE o.grp = %s ORDER BY t.name, p.partition",
                (group,),
            ).fetchall()
        return [GroupOffset(*r) for r in rows]

    def groups(self) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT name FROM tidelog_groups UNION SELECT grp FROM tidelog_offsets ORDER BY 1"
            ).fetchall()
        return [r[0] for r in rows]


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
    if kinds == {bytes}:
        blobs, texts = values, None
    elif kinds == {str} and not any(map(contains, values, repeat("\x00"))):
        blobs, texts = None, values
    else:
        blobs, texts = map(list, zip(*map(_columns, values)))
    metas = batch.metas
    if metas is not None and not isinstance(metas, list):
        metas = list(metas)
    if blobs is values:
        size = sum(map(len, values))
    elif texts is values:
        joined = "".join(texts)
        size = len(joined) if joined.isascii() else len(joined.encode())
    else:
        size = sum(map(_size, blobs, texts, repeat(None)))
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
