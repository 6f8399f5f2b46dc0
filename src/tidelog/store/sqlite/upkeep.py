"""Queue groups on SQLite: a peek (nothing leased) and a purge (see `QueueUpkeep`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import UnknownGroup
from .. import upkeep
from ..base import LeasePolicy, Pending, Row, Waiting
from ..dialect import SQLITE
from .base import SQLiteBase
from .queues import OFFSET_BITS, SQLiteQueues


class SQLiteUpkeep(SQLiteBase):
    """Mixed into SQLiteStore; uses its connections and pid cache."""

    if TYPE_CHECKING:  # the log role's, in the composed store

        def read(self, topic: str, partition: int, after: int, limit: int) -> list[Row]: ...

    def queue_peek(self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int) -> list[Waiting]:
        topic_id, pids = self._all_pids(topic)
        with self._read() as conn:
            if not upkeep.group_exists(conn, SQLITE, group, topic_id):
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            state = upkeep.state_rows(conn, SQLITE, group, pids, now, limit)
            scanned = upkeep.cursors(conn, SQLITE, group, pids)
        return policy.peek(
            state, scanned, lambda partition, after, n: self.read(topic, partition, after, n), now, limit
        )

    def queue_in_flight(self, group: str, topic: str, now: int, limit: int) -> list[Pending]:
        topic_id, pids = self._all_pids(topic)
        with self._read() as conn:
            if not upkeep.group_exists(conn, SQLITE, group, topic_id):
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            return upkeep.in_flight(conn, SQLITE, group, pids, now, limit)

    def queue_purge(self, group: str, topic: str, now: int) -> int:
        topic_id, pids = self._all_pids(topic)
        purged = 0
        with self._write() as db:
            if not upkeep.group_exists(db, SQLITE, group, topic_id):
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            for pid, scanned in zip(pids, upkeep.cursors(db, SQLITE, group, pids)):
                lo = pid << OFFSET_BITS
                last = SQLiteQueues._last_offset(db, pid)
                purged += db.execute(
                    "SELECT count(*) FROM records WHERE id > ? AND id <= ?", (lo + scanned, lo + last)
                ).fetchone()[0]
                purged += db.execute(
                    "DELETE FROM queue_state WHERE grp = ? AND pid = ?", (group, pid)
                ).rowcount
                # Past every record held now: what is appended next is delivered as usual.
                db.execute(
                    "INSERT INTO queue_cursors(grp, pid, scanned) VALUES (?, ?, ?) "
                    "ON CONFLICT(grp, pid) DO UPDATE SET scanned = max(scanned, excluded.scanned)",
                    (group, pid, last),
                )
        return int(purged)
