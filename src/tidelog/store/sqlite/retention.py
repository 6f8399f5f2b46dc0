"""Retention and compaction on SQLite: scans, chunked deletes, vacuum.

Mechanics only; `tidelog.retention` decides what to remove. Each delete is a
short transaction of at most `limit` rows, so producers never wait long for
the write lock.
"""

from __future__ import annotations

import json
from typing import Any

from .. import statements
from ..base import ScanRow, Usage
from ..dialect import SQLITE
from .base import OFFSET_BITS, OFFSET_SPAN, SQLiteBase, _now_ms


class SQLiteRetention(SQLiteBase):
    """Mixed into SQLiteStore; uses its connections, lock and pid cache."""

    memory: bool

    def set_topic_config(self, name: str, config: dict[str, Any]) -> None:
        with self._write() as db:
            statements.set_topic_config(db, SQLITE, name, json.dumps(config, sort_keys=True))

    def scan(
        self, topic: str, partition: int, after: int, limit: int, with_meta: bool = False
    ) -> list[ScanRow]:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        meta = "meta" if with_meta else "NULL"
        with self._read() as conn:
            return conn.execute(
                f"SELECT id - ?1, ts, length(value) + coalesce(length(meta), 0), {meta}, "
                "typeof(value) = 'text' AND value = 'null' "
                "FROM records WHERE id > ?2 AND id < ?3 ORDER BY id LIMIT ?4",
                (lo, lo + after, lo + OFFSET_SPAN, limit),
            ).fetchall()

    def partition_bytes(self, topic: str, partition: int) -> int:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._read() as conn:
            row = conn.execute(
                "SELECT coalesce(sum(length(value) + coalesce(length(meta), 0)), 0) FROM records "
                "WHERE id > ?1 AND id < ?2",
                (lo, lo + OFFSET_SPAN),
            ).fetchone()
        return int(row[0])

    def consumption(self, topic: str, partition: int) -> Usage:
        pid = self._pid(topic, partition)
        with self._read() as conn:
            stream = [r[0] for r in conn.execute("SELECT committed FROM offsets WHERE pid = ?", (pid,))]
            queues = []
            for grp, scanned in conn.execute(
                "SELECT c.grp, c.scanned FROM queue_cursors c WHERE c.pid = ?", (pid,)
            ).fetchall():
                low = conn.execute(
                    "SELECT min(offset) FROM queue_state WHERE grp = ? AND pid = ?", (grp, pid)
                ).fetchone()[0]
                queues.append(scanned if low is None else low - 1)
            in_flight = conn.execute(
                "SELECT min(offset) FROM queue_state WHERE grp IN (SELECT grp FROM queue_cursors WHERE pid = ?1) "
                "AND pid = ?1",
                (pid,),
            ).fetchone()[0]
        return Usage(stream, queues, in_flight)

    def delete_prefix(self, topic: str, partition: int, through: int, limit: int) -> tuple[int, int]:
        """Remove up to `limit` of the oldest records with offset <= through.

        Returns (records removed, bytes removed). When nothing at or below
        `through` remains, the partition's start moves past it.
        """
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._write() as db:
            row = db.execute(
                "SELECT count(*), coalesce(sum(length(value) + coalesce(length(meta), 0)), 0), max(id) FROM "
                "(SELECT id, value, meta FROM records WHERE id > ?1 AND id <= ?2 ORDER BY id LIMIT ?3)",
                (lo, lo + through, limit),
            ).fetchone()
            count, size, top = row
            if count:
                db.execute("DELETE FROM records WHERE id > ?1 AND id <= ?2", (lo, top))
                db.execute("DELETE FROM wire_batches WHERE id > ?1 AND id <= ?2", (lo, top))
                # The finished receipts of what went: no ack can name those records now.
                db.execute("DELETE FROM queue_finished WHERE pid = ? AND offset <= ?", (pid, top - lo))
            if count < limit:
                top = lo + through
            if top is not None:
                db.execute(
                    "UPDATE partitions SET removed_through = max(removed_through, ?1), "
                    "base_offset = max(base_offset, ?1) WHERE id = ?2",
                    (top - lo, pid),
                )
        self._checkpoint()
        return count, size

    def delete_offsets(self, topic: str, partition: int, offsets: list[int]) -> int:
        if not offsets:
            return 0
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        ids = [lo + o for o in offsets]
        marks = ",".join("?" * len(ids))
        with self._write() as db:
            size = db.execute(
                f"SELECT coalesce(sum(length(value) + coalesce(length(meta), 0)), 0) FROM records WHERE id IN ({marks})",
                ids,
            ).fetchone()[0]
            db.execute(f"DELETE FROM records WHERE id IN ({marks})", ids)
            # The wire batches around them (a compacted topic keeps few).
            db.execute(
                "DELETE FROM wire_batches WHERE id > ?1 AND id <= ?2 AND last >= ?3",
                (lo, lo + max(offsets), min(offsets)),
            )
            db.execute(
                f"DELETE FROM queue_finished WHERE pid = ? AND offset IN ({','.join('?' * len(offsets))})",
                (pid, *offsets),
            )
            # Appends continue after the highest offset ever given, even when
            # compaction removed the newest record.
            db.execute(
                "UPDATE partitions SET base_offset = max(base_offset, ?1) WHERE id = ?2", (max(offsets), pid)
            )
        self._checkpoint()
        return int(size)

    def _checkpoint(self) -> None:
        """Copy the WAL back into the file now, from the cleaner's thread.

        Deleting writes many pages; left alone, SQLite's automatic
        checkpoint would run inside some producer's commit and stall it.
        PASSIVE never waits for writers, and a reader connection keeps it off
        this process's writer lock.
        """
        if not self.memory:
            self._reader().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def prune_txns(self, older_than: int, limit: int) -> int:
        # No index on `created`: one pass over the ids a cleaning (an index
        # needs a schema version; worth one once the ids are many).
        before = _now_ms() - older_than
        with self._write() as db:
            return int(
                db.execute(
                    "DELETE FROM txns WHERE id IN (SELECT id FROM txns WHERE created < ? LIMIT ?)",
                    (before, limit),
                ).rowcount
            )

    def record_clean(self, topic: str, report: dict[str, Any]) -> None:
        with self._write() as db:
            db.execute("UPDATE topics SET last_clean = ? WHERE name = ?", (json.dumps(report), topic))

    def last_clean(self, topic: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute("SELECT last_clean FROM topics WHERE name = ?", (topic,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def reclaim(self, pages: int = 2000) -> int:
        """Give up to `pages` free pages back to the file system; returns how many were free."""
        if self.memory:
            return 0
        with self._lock:
            free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
            if free:
                # executescript steps the pragma to the end; execute() would
                # free a single page (each step frees one).
                self._db.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
        self._checkpoint()
        return int(free)

    def file_bytes(self) -> int:
        if self.memory:
            return 0
        with self._read() as conn:
            count = conn.execute("PRAGMA page_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(count * size)
