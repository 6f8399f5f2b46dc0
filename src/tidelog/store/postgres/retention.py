"""Retention and compaction on PostgreSQL: scans and chunked deletes.

Mechanics only; `tidelog.retention` decides what to remove. Each delete is
one short transaction of at most `limit` records that also moves the
partition's counters (records, bytes, removed_through) in the same
statement, so describe stays exact without a scan.

Space: deleted rows become dead tuples that autovacuum reclaims for reuse
within the table; `reclaim` has nothing to do (see the README's Vacuum
section for what to tune).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from ...errors import UnknownTopic
from .. import statements
from ..base import ScanRow, Usage
from ..dialect import POSTGRES
from .base import _SIZE, PostgresBase, _now_ms, one

if TYPE_CHECKING:
    pass

# What a record counts as in a partition's bytes (as postgres._size does for appends).

# Hold the partition against a topic delete (which locks it FOR UPDATE) but
# not against appenders (FOR NO KEY UPDATE): a delete then waits for a
# concurrent topic delete instead of deadlocking with it.
_HOLD = "SELECT 1 FROM tidelog_partitions WHERE id = %s FOR KEY SHARE"

# Up to `limit` of the oldest records at or below `through` go, and the
# partition's counters move with them in the same statement. When fewer than
# `limit` were left, nothing at or below `through` remains: the partition
# starts after it.
_DELETE_PREFIX = f"""
WITH d AS (
    DELETE FROM tidelog_records WHERE pid = %(pid)s AND "offset" <= (
        SELECT max("offset") FROM (
            SELECT "offset" FROM tidelog_records WHERE pid = %(pid)s AND "offset" <= %(through)s
            ORDER BY "offset" LIMIT %(limit)s
        ) AS chunk
    )
    RETURNING "offset", {_SIZE} AS size
), s AS (SELECT count(*) AS n, coalesce(sum(size), 0) AS b, max("offset") AS top FROM d)
UPDATE tidelog_partitions p
SET records = p.records - s.n, bytes = p.bytes - s.b,
    removed_through = greatest(p.removed_through, CASE WHEN s.n < %(limit)s THEN %(through)s ELSE s.top END)
FROM s WHERE p.id = %(pid)s
RETURNING s.n, s.b
"""

_DELETE_OFFSETS = f"""
WITH d AS (
    DELETE FROM tidelog_records WHERE pid = %(pid)s AND "offset" = ANY(%(offsets)s::bigint[])
    RETURNING {_SIZE} AS size
), s AS (SELECT count(*) AS n, coalesce(sum(size), 0) AS b FROM d)
UPDATE tidelog_partitions p SET records = p.records - s.n, bytes = p.bytes - s.b
FROM s WHERE p.id = %(pid)s
RETURNING s.b
"""


class PostgresRetention(PostgresBase):
    """Mixed into PostgresStore; uses its pooled connections and pid cache."""

    def set_topic_config(self, name: str, config: dict[str, Any]) -> None:
        with self._conn() as db:
            statements.set_topic_config(db, POSTGRES, name, Jsonb(config))

    def scan(
        self, topic: str, partition: int, after: int, limit: int, with_meta: bool = False
    ) -> list[ScanRow]:
        pid = self._pid(topic, partition)
        meta = "meta" if with_meta else "NULL::bytea"
        with self._conn() as conn:
            return conn.execute(
                f"SELECT \"offset\", ts, {_SIZE}, {meta}, coalesce(text = 'null', false) "
                'FROM tidelog_records WHERE pid = %s AND "offset" > %s ORDER BY "offset" LIMIT %s',
                (pid, after, limit),
            ).fetchall()

    def partition_bytes(self, topic: str, partition: int) -> int:
        pid = self._pid(topic, partition)
        with self._conn() as conn:
            row = conn.execute("SELECT bytes FROM tidelog_partitions WHERE id = %s", (pid,)).fetchone()
        if row is None:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        return int(row[0])

    def consumption(self, topic: str, partition: int) -> Usage:
        pid = self._pid(topic, partition)
        with self._conn() as conn:
            stream = [
                r[0] for r in conn.execute("SELECT committed FROM tidelog_offsets WHERE pid = %s", (pid,))
            ]
            queues, in_flight = self._queue_progress(conn, pid)
        return Usage(stream, queues, in_flight)

    def _queue_progress(self, conn: Any, pid: int) -> tuple[list[int], int | None]:
        """For retention: each queue group's finished prefix on a partition
        (the offset before its lowest unfinished record, else its cursor) and
        the lowest offset any group still has in progress."""
        rows = conn.execute(
            'SELECT c.scanned, (SELECT min(s."offset") FROM tidelog_queue_state s '
            "WHERE s.grp = c.grp AND s.pid = c.pid) FROM tidelog_queue_cursors c WHERE c.pid = %s",
            (pid,),
        ).fetchall()
        finished = [scanned if low is None else low - 1 for scanned, low in rows]
        lows = [low for _, low in rows if low is not None]
        return finished, (min(lows) if lows else None)

    def delete_prefix(self, topic: str, partition: int, through: int, limit: int) -> tuple[int, int]:
        """Remove up to `limit` of the oldest records with offset <= through.

        Returns (records removed, bytes removed). When nothing at or below
        `through` remains, the partition's start moves past it.
        """
        pid = self._pid(topic, partition)
        with self._conn() as conn, conn.transaction():
            if conn.execute(_HOLD, (pid,)).fetchone() is None:
                return 0, 0  # deleted meanwhile
            row = one(conn.execute(_DELETE_PREFIX, {"pid": pid, "through": through, "limit": limit}))
            # The finished receipts of what went: no ack can name those records now.
            conn.execute(
                'DELETE FROM tidelog_queue_finished WHERE pid = %(pid)s AND "offset" <= '
                "(SELECT removed_through FROM tidelog_partitions WHERE id = %(pid)s)",
                {"pid": pid},
            )
        return int(row[0]), int(row[1])

    def delete_offsets(self, topic: str, partition: int, offsets: list[int]) -> int:
        if not offsets:
            return 0
        pid = self._pid(topic, partition)
        with self._conn() as conn, conn.transaction():
            if conn.execute(_HOLD, (pid,)).fetchone() is None:
                return 0
            row = one(conn.execute(_DELETE_OFFSETS, {"pid": pid, "offsets": list(offsets)}))
            conn.execute(
                'DELETE FROM tidelog_queue_finished WHERE pid = %s AND "offset" = ANY(%s::bigint[])',
                (pid, list(offsets)),
            )
        # The partition's last_offset is a counter of its own: appends go on
        # after the highest offset ever given even when the newest went here.
        return int(row[0])

    def prune_txns(self, older_than: int, limit: int) -> int:
        before = _now_ms() - older_than
        with self._conn() as conn:
            cur = conn.execute(
                "DELETE FROM tidelog_txns WHERE id IN "
                "(SELECT id FROM tidelog_txns WHERE created < %s LIMIT %s FOR UPDATE SKIP LOCKED)",
                (before, limit),
            )
            return int(cur.rowcount)

    def record_clean(self, topic: str, report: dict[str, Any]) -> None:
        with self._conn() as conn:
            conn.execute(
                "UPDATE tidelog_topics SET last_clean = %s::jsonb WHERE name = %s",
                (json.dumps(report), topic),
            )

    def last_clean(self, topic: str) -> dict[str, Any] | None:
        with self._conn() as conn:
            row = conn.execute("SELECT last_clean FROM tidelog_topics WHERE name = %s", (topic,)).fetchone()
        return row[0] if row else None

    def reclaim(self, pages: int = 2000) -> int:
        """Nothing to do: autovacuum makes deleted rows' space reusable, and
        only VACUUM FULL (an exclusive lock) would shrink the files."""
        return 0

    def file_bytes(self) -> int:
        """Bytes on disk of the log's tables with their indexes and TOAST."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
                "AND c.relname LIKE 'tidelog\\_%'"
            )
        return int(one(row)[0])
