"""Queue groups on PostgreSQL: a peek (nothing leased) and a purge (see `QueueUpkeep`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import UnknownGroup
from .. import upkeep
from ..base import LeasePolicy, Pending, Row, Waiting
from ..dialect import POSTGRES
from .base import PostgresBase, one
from .queues import LOCK_GROUP

# What a purge finishes: the records past each cursor (offsets past it are
# dense but for what trim removed from the front: count the rows) ...
_PAST_CURSORS = """
SELECT count(*) FROM unnest(%(pids)s::bigint[]) AS p(pid)
LEFT JOIN tidelog_queue_cursors c ON c.grp = %(grp)s AND c.pid = p.pid
JOIN tidelog_records r ON r.pid = p.pid AND r."offset" > coalesce(c.scanned, 0)
"""
# ... and every state row, leased or not.
_DROP_STATE = """
WITH d AS (DELETE FROM tidelog_queue_state WHERE grp = %(grp)s AND pid = ANY(%(pids)s::bigint[]) RETURNING 1)
SELECT count(*) FROM d
"""
# Then the cursors past every record appended so far.
_TO_THE_END = """
INSERT INTO tidelog_queue_cursors (grp, pid, scanned)
SELECT %(grp)s, id, last_offset FROM tidelog_partitions WHERE id = ANY(%(pids)s::bigint[])
ON CONFLICT (grp, pid) DO UPDATE SET scanned = greatest(tidelog_queue_cursors.scanned, excluded.scanned)
"""


class PostgresUpkeep(PostgresBase):
    """Mixed into PostgresStore; uses its pool and pid cache."""

    if TYPE_CHECKING:  # the log role's, in the composed store

        def read(self, topic: str, partition: int, after: int, limit: int) -> list[Row]: ...

    def queue_peek(self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int) -> list[Waiting]:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        with self._conn() as conn:
            if not upkeep.group_exists(conn, POSTGRES, group, topic_id):
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            state = upkeep.state_rows(conn, POSTGRES, group, pids, now, limit)
            scanned = upkeep.cursors(conn, POSTGRES, group, pids)
        return policy.peek(
            state, scanned, lambda partition, after, n: self.read(topic, partition, after, n), now, limit
        )

    def queue_in_flight(self, group: str, topic: str, now: int, limit: int) -> list[Pending]:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        with self._conn() as conn:
            if not upkeep.group_exists(conn, POSTGRES, group, topic_id):
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            return upkeep.in_flight(conn, POSTGRES, group, pids, now, limit)

    def queue_purge(self, group: str, topic: str, now: int) -> int:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        params = {"grp": group, "pids": list(pids)}
        with self._conn() as conn, conn.transaction():
            # The group's row first, as a receive locks it: no receive takes
            # new records while the cursors move.
            if conn.execute(LOCK_GROUP, (group, topic_id)).fetchone() is None:
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            past = one(conn.execute(_PAST_CURSORS, params))[0]
            dropped = one(conn.execute(_DROP_STATE, params))[0]
            conn.execute(_TO_THE_END, params)
        return int(past) + int(dropped)
