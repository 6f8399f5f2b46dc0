"""Named consumers on SQLite queue groups: the mechanics of Redis consumer groups.

A queue group (sqlite_queues) hands records out under leases that expire.
Redis consumer groups need a little more, and this module adds only that:
a lease held by a named consumer with an explicit deadline (the core passes
one that never comes), the time of its last delivery (for idle times),
listing and claiming leases, moving a group's cursor and deleting a group.
The policy (what an entry id is, when a claim is allowed) is the core's, in
`tidelog.streams`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...errors import UnknownGroup
from .. import statements
from ..base import ConsumerInfo, Pending, PendingSummary, Row
from ..dialect import SQLITE
from .base import OFFSET_BITS, OFFSET_SPAN, SQLiteBase


class SQLiteConsumers(SQLiteBase):
    """Mixed into SQLiteStore; uses its connections, lock and pid cache."""

    # groups ------------------------------------------------------------------

    def _group_pid(self, group: str, topic: str, partition: int) -> tuple[int, int]:
        """(topic_id, pid) of a partition; UnknownTopic / UnknownPartition as _pid."""
        pid = self._pid(topic, partition)
        return self._pids[topic][0], pid

    @staticmethod
    def _need_group(db: sqlite3.Connection, group: str, topic: str, topic_id: int) -> None:
        row = db.execute(
            "SELECT 1 FROM queue_groups WHERE grp = ? AND topic_id = ?", (group, topic_id)
        ).fetchone()
        if row is None:
            raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")

    def queue_create(
        self, group: str, topic: str, config: dict[str, Any], cursors: Sequence[int], now: int
    ) -> bool:
        topic_id, pids = self._all_pids(topic)
        with self._write() as db:
            row = db.execute(
                "SELECT 1 FROM queue_groups WHERE grp = ? AND topic_id = ?", (group, topic_id)
            ).fetchone()
            if row is not None:
                return False
            db.execute(
                "INSERT INTO queue_groups(grp, topic_id, config, created) VALUES (?, ?, ?, ?)",
                (group, topic_id, json.dumps(config, sort_keys=True), now),
            )
            db.execute(
                "INSERT OR IGNORE INTO groups(name, mode, config, created) VALUES (?, 'queue', '{}', ?)",
                (group, now),
            )
            for i, pid in enumerate(pids):
                db.execute(
                    "INSERT OR REPLACE INTO queue_cursors(grp, pid, scanned) VALUES (?, ?, ?)",
                    (group, pid, cursors[i] if i < len(cursors) else 0),
                )
        return True

    def queue_info(self, group: str, topic: str) -> dict[str, Any] | None:
        topic_id, _ = self._all_pids(topic)
        with self._read() as conn:
            row = conn.execute(
                "SELECT config FROM queue_groups WHERE grp = ? AND topic_id = ?", (group, topic_id)
            ).fetchone()
        return None if row is None else json.loads(row[0])

    def queue_list(self, topic: str) -> list[str]:
        topic_id, _ = self._all_pids(topic)
        with self._read() as conn:
            return statements.queue_groups(conn, SQLITE, topic_id)

    def queue_delete(self, group: str, topic: str) -> bool:
        topic_id, pids = self._all_pids(topic)
        with self._write() as db:
            cur = db.execute("DELETE FROM queue_groups WHERE grp = ? AND topic_id = ?", (group, topic_id))
            if cur.rowcount == 0:
                return False
            for pid in pids:
                db.execute("DELETE FROM queue_cursors WHERE grp = ? AND pid = ?", (group, pid))
                db.execute("DELETE FROM queue_state WHERE grp = ? AND pid = ?", (group, pid))
                db.execute("DELETE FROM queue_finished WHERE pid = ? AND grp = ?", (pid, group))
            db.execute("DELETE FROM queue_consumers WHERE grp = ? AND topic_id = ?", (group, topic_id))
            # The name stays registered while it is used anywhere else.
            db.execute(
                "DELETE FROM groups WHERE name = ?1 AND mode = 'queue' "
                "AND NOT EXISTS (SELECT 1 FROM queue_groups WHERE grp = ?1)",
                (group,),
            )
        return True

    def queue_cursor(self, group: str, topic: str, partition: int) -> int:
        topic_id, pid = self._group_pid(group, topic, partition)
        with self._read() as conn:
            self._need_group(conn, group, topic, topic_id)
            return statements.queue_cursor(conn, SQLITE, group, pid)

    def queue_set_cursor(self, group: str, topic: str, partition: int, scanned: int) -> None:
        topic_id, pid = self._group_pid(group, topic, partition)
        with self._write() as db:
            self._need_group(db, group, topic, topic_id)
            db.execute(
                "INSERT INTO queue_cursors(grp, pid, scanned) VALUES (?, ?, ?) "
                "ON CONFLICT(grp, pid) DO UPDATE SET scanned = excluded.scanned",
                (group, pid, scanned),
            )

    # leases held by named consumers --------------------------------------------

    @staticmethod
    def _touch(
        db: sqlite3.Connection, group: str, topic_id: int, consumer: str, now: int, active: bool
    ) -> None:
        db.execute(
            "INSERT INTO queue_consumers(grp, topic_id, name, seen, active) VALUES (?1, ?2, ?3, ?4, ?5) "
            "ON CONFLICT(grp, topic_id, name) DO UPDATE SET seen = ?4, active = coalesce(?5, active)",
            (group, topic_id, consumer, now, now if active else None),
        )

    def queue_take(
        self,
        group: str,
        topic: str,
        partition: int,
        consumer: str,
        limit: int,
        now: int,
        deadline: int | None,
    ) -> list[Row]:
        topic_id, pid = self._group_pid(group, topic, partition)
        lo = pid << OFFSET_BITS
        with self._write() as db:
            # The group's cursor row on the partition proves the group exists
            # (deleting the group deletes it in the same transaction): the
            # group itself is looked up only when there is none.
            cursor = db.execute(
                "SELECT scanned FROM queue_cursors WHERE grp = ? AND pid = ?", (group, pid)
            ).fetchone()
            if cursor is None:
                self._need_group(db, group, topic, topic_id)
            rows = db.execute(
                "SELECT id - ?1, ts, value, meta FROM records WHERE id > ?1 + ?2 AND id < ?3 ORDER BY id LIMIT ?4",
                (lo, 0 if cursor is None else cursor[0], lo + OFFSET_SPAN, limit),
            ).fetchall()
            self._touch(db, group, topic_id, consumer, now, bool(rows))
            if not rows:
                return rows
            if deadline is not None:
                # A record taken again after the cursor moved back is handed to
                # this consumer afresh, as Redis does.
                # One statement over the rows' id range (every record in it was
                # taken), not one step a row: SQLite's loop, not the driver's.
                db.execute(
                    "INSERT INTO queue_state(grp, pid, offset, due, deliveries, receipt, consumer, delivered) "
                    "SELECT ?1, ?2, id - ?3, ?4, 1, ?5, ?5, ?6 FROM records WHERE id BETWEEN ?3 + ?7 AND ?3 + ?8 "
                    "ON CONFLICT(grp, pid, offset) DO UPDATE SET "
                    "due = ?4, deliveries = 1, receipt = ?5, consumer = ?5, delivered = ?6",
                    (group, pid, lo, deadline, consumer, now, rows[0][0], rows[-1][0]),
                )
            db.execute(
                "INSERT INTO queue_cursors(grp, pid, scanned) VALUES (?, ?, ?) "
                "ON CONFLICT(grp, pid) DO UPDATE SET scanned = excluded.scanned",
                (group, pid, rows[-1][0]),
            )
        return rows

    def queue_pending(
        self,
        group: str,
        topic: str,
        partition: int,
        *,
        first: int = 0,
        last: int = OFFSET_SPAN - 1,
        consumer: str | None = None,
        delivered_before: int | None = None,
        limit: int = 100,
    ) -> list[Pending]:
        topic_id, pid = self._group_pid(group, topic, partition)
        sql = (
            "SELECT offset, consumer, coalesce(delivered, 0), deliveries, due FROM queue_state "
            "WHERE grp = ? AND pid = ? AND offset BETWEEN ? AND ? AND receipt IS NOT NULL"
        )
        params: list[Any] = [group, pid, first, last]
        if consumer is not None:
            sql += " AND consumer = ?"
            params.append(consumer)
        if delivered_before is not None:
            sql += " AND coalesce(delivered, 0) <= ?"
            params.append(delivered_before)
        sql += " ORDER BY offset LIMIT ?"
        params.append(limit)
        with self._read() as conn:
            self._need_group(conn, group, topic, topic_id)
            rows = conn.execute(sql, params).fetchall()
        return [Pending(partition, *r) for r in rows]

    def queue_pending_summary(self, group: str, topic: str, partition: int) -> PendingSummary:
        topic_id, pid = self._group_pid(group, topic, partition)
        with self._read() as conn:
            self._need_group(conn, group, topic, topic_id)
            return statements.pending_summary(conn, SQLITE, group, pid)

    def queue_claim(
        self,
        group: str,
        topic: str,
        partition: int,
        offsets: Sequence[int],
        consumer: str,
        now: int,
        *,
        delivered_before: int,
        delivered: int,
        deadline: int,
        deliveries: int | None = None,
        count_delivery: bool = True,
        force: bool = False,
    ) -> list[int]:
        topic_id, pid = self._group_pid(group, topic, partition)
        lo = pid << OFFSET_BITS
        claimed = []
        with self._write() as db:
            self._need_group(db, group, topic, topic_id)
            for offset in offsets:
                cur = db.execute(
                    "UPDATE queue_state SET consumer = ?1, receipt = ?1, delivered = ?2, due = ?3, "
                    "deliveries = coalesce(?4, deliveries + ?5) "
                    "WHERE grp = ?6 AND pid = ?7 AND offset = ?8 AND receipt IS NOT NULL "
                    "AND coalesce(delivered, 0) <= ?9",
                    (
                        consumer,
                        delivered,
                        deadline,
                        deliveries,
                        1 if count_delivery else 0,
                        group,
                        pid,
                        offset,
                        delivered_before,
                    ),
                )
                if cur.rowcount == 0 and force:
                    cur = db.execute(
                        "INSERT OR IGNORE INTO queue_state(grp, pid, offset, due, deliveries, receipt, consumer, delivered) "
                        "SELECT ?1, ?2, ?3, ?4, coalesce(?5, 1), ?6, ?6, ?7 FROM records WHERE id = ?8",
                        (group, pid, offset, deadline, deliveries, consumer, delivered, lo + offset),
                    )
                if cur.rowcount:
                    claimed.append(offset)
            self._touch(db, group, topic_id, consumer, now, bool(claimed))
        return claimed

    def queue_ack_offsets(self, group: str, topic: str, partition: int, offsets: Sequence[int]) -> int:
        """Finish the leased records among `offsets`; returns how many were leased."""
        topic_id, pid = self._group_pid(group, topic, partition)
        with self._write() as db:
            self._need_group(db, group, topic, topic_id)
            # One statement stepped once an offset; its rowcount is their total.
            return db.executemany(
                "DELETE FROM queue_state WHERE grp = ? AND pid = ? AND offset = ? AND receipt IS NOT NULL",
                [(group, pid, offset) for offset in offsets],
            ).rowcount

    def queue_ack_stamped(
        self, group: str, topic: str, partition: int, records: Sequence[tuple[int, int]], unless: bytes
    ) -> tuple[int, list[tuple[int, int]]]:
        topic_id, pid = self._group_pid(group, topic, partition)
        lo = pid << OFFSET_BITS
        offsets = sorted({o for o, _ in records if 1 <= o < OFFSET_SPAN})
        with self._write() as db:
            # Read on the writer connection, in this transaction: a reader
            # connection finds its page cache stale after every commit, and
            # that read cost more than the ack (an XACK of an entry just
            # delivered). No value is fetched: only the timestamp, and
            # whether the meta may hold a stored id.
            found: dict[int, tuple[int, int]] = {}
            if offsets and offsets[-1] - offsets[0] < 4 * len(offsets):
                cur = db.execute(
                    "SELECT id - ?1, ts, meta IS NULL OR instr(meta, ?2) = 0 FROM records "
                    "WHERE id BETWEEN ?1 + ?3 AND ?1 + ?4",
                    (lo, unless, offsets[0], offsets[-1]),
                )
                found = {row[0]: (row[1], row[2]) for row in cur}
            else:
                for offset in offsets:
                    row = db.execute(
                        "SELECT ts, meta IS NULL OR instr(meta, ?2) = 0 FROM records WHERE id = ?1",
                        (lo + offset, unless),
                    ).fetchone()
                    if row is not None:
                        found[offset] = (row[0], row[1])
            matched: set[int] = set()
            unmatched = []
            for offset, ts in records:
                if found.get(offset) == (ts, 1):
                    matched.add(offset)
                else:
                    unmatched.append((offset, ts))
            if not matched:
                self._need_group(db, group, topic, topic_id)
                return 0, unmatched
            low, high = min(matched), max(matched)
            if high - low + 1 == len(matched):  # a whole range (what one XREADGROUP delivered): one step
                done = db.execute(
                    "DELETE FROM queue_state WHERE grp = ? AND pid = ? AND offset BETWEEN ? AND ? "
                    "AND receipt IS NOT NULL",
                    (group, pid, low, high),
                ).rowcount
            else:
                done = db.executemany(
                    "DELETE FROM queue_state WHERE grp = ? AND pid = ? AND offset = ? AND receipt IS NOT NULL",
                    [(group, pid, offset) for offset in matched],
                ).rowcount
            if not done:
                # A lease finished proves the group exists (deleting a group
                # deletes its leases); with none, look the group up.
                self._need_group(db, group, topic, topic_id)
        return done, unmatched

    # consumers ---------------------------------------------------------------

    def queue_consumers(self, group: str, topic: str) -> list[ConsumerInfo]:
        topic_id, pids = self._all_pids(topic)
        marks = ",".join("?" * len(pids))
        with self._read() as conn:
            self._need_group(conn, group, topic, topic_id)
            rows = conn.execute(
                "SELECT c.name, (SELECT count(*) FROM queue_state s WHERE s.grp = c.grp "
                f"AND s.pid IN ({marks}) AND s.consumer = c.name AND s.receipt IS NOT NULL), c.seen, c.active "
                "FROM queue_consumers c WHERE c.grp = ? AND c.topic_id = ? ORDER BY c.name",
                (*pids, group, topic_id),
            ).fetchall()
        return [ConsumerInfo(*r) for r in rows]

    def queue_add_consumer(self, group: str, topic: str, name: str, now: int) -> bool:
        topic_id, _ = self._all_pids(topic)
        with self._write() as db:
            self._need_group(db, group, topic, topic_id)
            cur = db.execute(
                "INSERT OR IGNORE INTO queue_consumers(grp, topic_id, name, seen, active) "
                "VALUES (?, ?, ?, ?, NULL)",
                (group, topic_id, name, now),
            )
        return cur.rowcount == 1

    def queue_delete_consumer(self, group: str, topic: str, name: str) -> int:
        topic_id, pids = self._all_pids(topic)
        dropped = 0
        with self._write() as db:
            self._need_group(db, group, topic, topic_id)
            for pid in pids:
                dropped += db.execute(
                    "DELETE FROM queue_state WHERE grp = ? AND pid = ? AND consumer = ? AND receipt IS NOT NULL",
                    (group, pid, name),
                ).rowcount
            db.execute(
                "DELETE FROM queue_consumers WHERE grp = ? AND topic_id = ? AND name = ?",
                (group, topic_id, name),
            )
        return dropped
