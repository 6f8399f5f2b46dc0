"""Named consumers on PostgreSQL queue groups: the mechanics of Redis consumer groups.

The same model as `sqlite_consumers`: a lease held by a named consumer
(its receipt is the consumer's name) with an explicit deadline, the time of
its last delivery, listing and claiming leases, moving a group's cursor and
deleting a group. The policy is the core's, in `tidelog.streams`.

A take moves the cursor, so it locks the group's row first, as a queue
receive does (`postgres_queues`); claims and acks lock only the lease rows
they change. Also here: `read_before` and `trim`, the two record calls that
only streams need.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...errors import UnknownGroup
from .. import statements
from ..base import ConsumerInfo, Pending, PendingSummary, Row
from ..dialect import POSTGRES
from .base import MAX_OFFSET, PostgresBase, stored
from .queues import LOCK_GROUP

_NEED_GROUP = "SELECT 1 FROM tidelog_queue_groups WHERE grp = %s AND topic_id = %s"

_SET_CURSOR = (
    "INSERT INTO tidelog_queue_cursors (grp, pid, scanned) VALUES (%s, %s, %s) "
    "ON CONFLICT (grp, pid) DO UPDATE SET scanned = excluded.scanned"
)

_TOUCH = """
INSERT INTO tidelog_queue_consumers (grp, topic_id, name, seen, active)
VALUES (%(grp)s, %(topic_id)s, %(consumer)s, %(now)s, %(active)s)
ON CONFLICT (grp, topic_id, name) DO UPDATE SET seen = excluded.seen,
    active = coalesce(excluded.active, tidelog_queue_consumers.active)
"""

# As a queue receive reads past the cursor (postgres_queues._FRESH): the
# first record past it, then a bounded range, so the plan stays a short
# index range scan whatever the statistics.
_TAKE = """
WITH f AS (
    SELECT min("offset") AS first FROM tidelog_records WHERE pid = %(pid)s AND "offset" > coalesce(
        (SELECT scanned FROM tidelog_queue_cursors WHERE grp = %(grp)s AND pid = %(pid)s), 0)
)
SELECT "offset", ts, value, text, meta FROM tidelog_records, f
WHERE pid = %(pid)s AND "offset" >= f.first AND "offset" < f.first + %(limit)s
ORDER BY "offset"
"""

# The newest records below `before`: the last one held (one index probe),
# then a range of `limit` offsets down from it; `low` is the oldest record
# held, to tell a gap left by compaction from the start of the partition.
_TAKE_LEASES = """
INSERT INTO tidelog_queue_state (grp, pid, "offset", due, deliveries, receipt, consumer, delivered)
SELECT %(grp)s, %(pid)s, o, %(deadline)s, 1, %(consumer)s, %(consumer)s, %(now)s
FROM unnest(%(offsets)s::bigint[]) AS o
ON CONFLICT (grp, pid, "offset") DO UPDATE SET due = excluded.due, deliveries = 1,
    receipt = excluded.receipt, consumer = excluded.consumer, delivered = excluded.delivered
"""

# One offset of a claim: move the lease when it is idle long enough; with
# `force`, create one for a record that has none (and, as any new lease
# does, move the cursor past it).
_CLAIM = """
WITH moved AS (
    UPDATE tidelog_queue_state SET consumer = %(consumer)s, receipt = %(consumer)s,
        delivered = %(delivered)s, due = %(deadline)s,
        deliveries = coalesce(%(deliveries)s::integer, deliveries + %(count)s)
    WHERE grp = %(grp)s AND pid = %(pid)s AND "offset" = %(offset)s AND receipt IS NOT NULL
      AND coalesce(delivered, 0) <= %(before)s
    RETURNING "offset"
), forced AS (
    INSERT INTO tidelog_queue_state (grp, pid, "offset", due, deliveries, receipt, consumer, delivered)
    SELECT %(grp)s, %(pid)s, "offset", %(deadline)s, coalesce(%(deliveries)s::integer, 1),
           %(consumer)s, %(consumer)s, %(delivered)s
    FROM tidelog_records
    WHERE %(force)s AND pid = %(pid)s AND "offset" = %(offset)s AND NOT EXISTS (SELECT 1 FROM moved)
    ON CONFLICT DO NOTHING
    RETURNING "offset"
), cursor AS (
    INSERT INTO tidelog_queue_cursors (grp, pid, scanned) SELECT %(grp)s, %(pid)s, "offset" FROM forced
    ON CONFLICT (grp, pid) DO UPDATE SET scanned = greatest(tidelog_queue_cursors.scanned, excluded.scanned)
)
SELECT "offset" FROM moved UNION ALL SELECT "offset" FROM forced
"""


class PostgresConsumers(PostgresBase):
    """Mixed into PostgresStore with PostgresQueues; uses its pool and pid cache."""

    # groups ------------------------------------------------------------------

    def _group_pid(self, topic: str, partition: int) -> tuple[int, int]:
        """(topic_id, pid) of a partition; UnknownTopic / UnknownPartition as _pid."""
        pid = self._pid(topic, partition)
        return self._topic_pids(topic)[0], pid

    @staticmethod
    def _need_group(conn: Any, group: str, topic: str, topic_id: int, lock: bool = False) -> None:
        if conn.execute(LOCK_GROUP if lock else _NEED_GROUP, (group, topic_id)).fetchone() is None:
            raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")

    def queue_create(
        self, group: str, topic: str, config: dict[str, Any], cursors: Sequence[int], now: int
    ) -> bool:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        with self._conn() as conn, conn.transaction():
            created = conn.execute(
                "INSERT INTO tidelog_queue_groups (grp, topic_id, config, created) "
                "VALUES (%s, %s, %s::jsonb, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (group, topic_id, json.dumps(config, sort_keys=True), now),
            ).fetchone()
            if created is None:
                return False
            conn.execute(
                "INSERT INTO tidelog_groups (name, mode, config, created) VALUES (%s, 'queue', '{}', %s) "
                "ON CONFLICT (name) DO NOTHING",
                (group, now),
            )
            conn.execute(
                "INSERT INTO tidelog_queue_cursors (grp, pid, scanned) "
                "SELECT %s, pid, scanned FROM unnest(%s::bigint[], %s::bigint[]) AS c(pid, scanned) "
                "ON CONFLICT (grp, pid) DO UPDATE SET scanned = excluded.scanned",
                (group, list(pids), [cursors[i] if i < len(cursors) else 0 for i in range(len(pids))]),
            )
        return True

    def queue_info(self, group: str, topic: str) -> dict[str, Any] | None:
        topic_id, _ = self._topic_pids(topic, refresh=True)
        with self._conn() as conn:
            row = conn.execute(
                "SELECT config FROM tidelog_queue_groups WHERE grp = %s AND topic_id = %s", (group, topic_id)
            ).fetchone()
        return None if row is None else row[0]

    def queue_list(self, topic: str) -> list[str]:
        topic_id, _ = self._topic_pids(topic, refresh=True)
        with self._conn() as conn:
            return statements.queue_groups(conn, POSTGRES, topic_id)

    def queue_delete(self, group: str, topic: str) -> bool:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        params = {"grp": group, "topic_id": topic_id, "pids": list(pids)}
        with self._conn() as conn, conn.transaction():
            gone = conn.execute(
                "DELETE FROM tidelog_queue_groups WHERE grp = %(grp)s AND topic_id = %(topic_id)s RETURNING 1",
                params,
            ).fetchone()
            if gone is None:
                return False
            with conn.pipeline():
                conn.execute(
                    "DELETE FROM tidelog_queue_state WHERE grp = %(grp)s AND pid = ANY(%(pids)s::bigint[])",
                    params,
                )
                conn.execute(
                    "DELETE FROM tidelog_queue_cursors WHERE grp = %(grp)s AND pid = ANY(%(pids)s::bigint[])",
                    params,
                )
                conn.execute(
                    "DELETE FROM tidelog_queue_finished WHERE pid = ANY(%(pids)s::bigint[]) AND grp = %(grp)s",
                    params,
                )
                conn.execute(
                    "DELETE FROM tidelog_queue_consumers WHERE grp = %(grp)s AND topic_id = %(topic_id)s",
                    params,
                )
                # The name stays registered while it is used anywhere else.
                conn.execute(
                    "DELETE FROM tidelog_groups WHERE name = %(grp)s AND mode = 'queue' "
                    "AND NOT EXISTS (SELECT 1 FROM tidelog_queue_groups WHERE grp = %(grp)s)",
                    params,
                )
        return True

    def queue_cursor(self, group: str, topic: str, partition: int) -> int:
        topic_id, pid = self._group_pid(topic, partition)
        with self._conn() as conn:
            self._need_group(conn, group, topic, topic_id)
            return statements.queue_cursor(conn, POSTGRES, group, pid)

    def queue_set_cursor(self, group: str, topic: str, partition: int, scanned: int) -> None:
        topic_id, pid = self._group_pid(topic, partition)
        with self._conn() as conn, conn.transaction():
            # Locked like a receive, which moves the cursor forward from what it read.
            self._need_group(conn, group, topic, topic_id, lock=True)
            conn.execute(_SET_CURSOR, (group, pid, scanned))

    # leases held by named consumers --------------------------------------------

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
        topic_id, pid = self._group_pid(topic, partition)
        params = {
            "grp": group,
            "topic_id": topic_id,
            "pid": pid,
            "consumer": consumer,
            "now": now,
            "limit": limit,
            "deadline": deadline,
        }
        with self._conn() as conn, conn.transaction(), conn.pipeline():
            lock = conn.execute(LOCK_GROUP, (group, topic_id))
            taken = conn.execute(_TAKE, params, binary=True)
            if lock.fetchone() is None:
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            rows = [(o, ts, stored(v, t), m) for o, ts, v, t, m in taken]
            params["active"] = now if rows else None
            conn.execute(_TOUCH, params)
            if rows:
                if deadline is not None:
                    params["offsets"] = [r[0] for r in rows]
                    conn.execute(_TAKE_LEASES, params)
                conn.execute(_SET_CURSOR, (group, pid, rows[-1][0]))
        return rows

    def queue_pending(
        self,
        group: str,
        topic: str,
        partition: int,
        *,
        first: int = 0,
        last: int = MAX_OFFSET,
        consumer: str | None = None,
        delivered_before: int | None = None,
        limit: int = 100,
    ) -> list[Pending]:
        topic_id, pid = self._group_pid(topic, partition)
        # Built from fixed fragments only: every value is a parameter.
        sql = (
            'SELECT "offset", consumer, coalesce(delivered, 0), deliveries, due FROM tidelog_queue_state '
            'WHERE grp = %(grp)s AND pid = %(pid)s AND "offset" BETWEEN %(first)s AND %(last)s '
            "AND receipt IS NOT NULL"
        )
        if consumer is not None:
            sql += " AND consumer = %(consumer)s"
        if delivered_before is not None:
            sql += " AND coalesce(delivered, 0) <= %(before)s"
        sql += ' ORDER BY "offset" LIMIT %(limit)s'
        params = {
            "grp": group,
            "pid": pid,
            "first": first,
            "last": min(last, MAX_OFFSET),
            "consumer": consumer,
            "before": delivered_before,
            "limit": limit,
        }
        with self._conn() as conn:
            self._need_group(conn, group, topic, topic_id)
            rows = conn.execute(sql, params).fetchall()
        return [Pending(partition, *r) for r in rows]

    def queue_pending_summary(self, group: str, topic: str, partition: int) -> PendingSummary:
        topic_id, pid = self._group_pid(topic, partition)
        with self._conn() as conn:
            self._need_group(conn, group, topic, topic_id)
            return statements.pending_summary(conn, POSTGRES, group, pid)

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
        topic_id, pid = self._group_pid(topic, partition)
        params = {
            "grp": group,
            "topic_id": topic_id,
            "pid": pid,
            "consumer": consumer,
            "now": now,
            "delivered": delivered,
            "deadline": deadline,
            "deliveries": deliveries,
            "count": 1 if count_delivery else 0,
            "before": delivered_before,
            "force": force,
        }
        with self._conn() as conn, conn.transaction():
            with conn.pipeline():
                # One statement an offset, in the order asked, so an offset
                # named twice is claimed twice, as in the SQLite store.
                need = conn.execute(_NEED_GROUP, (group, topic_id))
                claims = [conn.execute(_CLAIM, {**params, "offset": offset}) for offset in offsets]
                if need.fetchone() is None:
                    raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
                claimed = [row[0] for cur in claims for row in cur.fetchall()]
            params["active"] = now if claimed else None
            conn.execute(_TOUCH, params)
        return claimed

    def queue_ack_offsets(self, group: str, topic: str, partition: int, offsets: Sequence[int]) -> int:
        """Finish the leased records among `offsets`; returns how many were leased."""
        topic_id, pid = self._group_pid(topic, partition)
        with self._conn() as conn, conn.transaction(), conn.pipeline() as pipeline:
            need = conn.execute(_NEED_GROUP, (group, topic_id))
            done = conn.execute(
                "DELETE FROM tidelog_queue_state "
                'WHERE grp = %s AND pid = %s AND "offset" = ANY(%s::bigint[]) AND receipt IS NOT NULL',
                (group, pid, list(offsets)),
            )
            pipeline.sync()
            if need.fetchone() is None:
                raise UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")
            return done.rowcount

    def queue_ack_stamped(
        self, group: str, topic: str, partition: int, records: Sequence[tuple[int, int]], unless: bytes
    ) -> tuple[int, list[tuple[int, int]]]:
        topic_id, pid = self._group_pid(topic, partition)
        offsets = sorted({o for o, _ in records if 1 <= o <= MAX_OFFSET})
        with self._conn() as conn, conn.transaction():
            self._need_group(conn, group, topic, topic_id)
            # The records are looked at in the ack's transaction: one round trip, not two.
            rows = conn.execute(
                'SELECT "offset", ts, meta IS NULL OR position(%s IN meta) = 0 FROM tidelog_records '
                'WHERE pid = %s AND "offset" = ANY(%s::bigint[])',
                (unless, pid, offsets),
            ).fetchall()
            found = {row[0]: (row[1], row[2]) for row in rows}
            matched, unmatched = [], []
            for offset, ts in records:
                if found.get(offset) == (ts, True):
                    matched.append(offset)
                else:
                    unmatched.append((offset, ts))
            done = 0
            if matched:
                done = conn.execute(
                    "DELETE FROM tidelog_queue_state "
                    'WHERE grp = %s AND pid = %s AND "offset" = ANY(%s::bigint[]) AND receipt IS NOT NULL',
                    (group, pid, matched),
                ).rowcount
        return done, unmatched

    # consumers ---------------------------------------------------------------

    def queue_consumers(self, group: str, topic: str) -> list[ConsumerInfo]:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        with self._conn() as conn:
            self._need_group(conn, group, topic, topic_id)
            rows = conn.execute(
                "SELECT c.name, (SELECT count(*) FROM tidelog_queue_state s WHERE s.grp = c.grp "
                "AND s.pid = ANY(%s::bigint[]) AND s.consumer = c.name AND s.receipt IS NOT NULL), "
                "c.seen, c.active FROM tidelog_queue_consumers c WHERE c.grp = %s AND c.topic_id = %s "
                "ORDER BY c.name",
                (list(pids), group, topic_id),
            ).fetchall()
        return [ConsumerInfo(*r) for r in rows]

    def queue_add_consumer(self, group: str, topic: str, name: str, now: int) -> bool:
        topic_id, _ = self._topic_pids(topic, refresh=True)
        with self._conn() as conn:
            self._need_group(conn, group, topic, topic_id)
            cur = conn.execute(
                "INSERT INTO tidelog_queue_consumers (grp, topic_id, name, seen, active) "
                "VALUES (%s, %s, %s, %s, NULL) ON CONFLICT DO NOTHING",
                (group, topic_id, name, now),
            )
        return cur.rowcount == 1

    def queue_delete_consumer(self, group: str, topic: str, name: str) -> int:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        with self._conn() as conn, conn.transaction():
            self._need_group(conn, group, topic, topic_id)
            with conn.pipeline():
                dropped = conn.execute(
                    "DELETE FROM tidelog_queue_state WHERE grp = %s AND pid = ANY(%s::bigint[]) "
                    "AND consumer = %s AND receipt IS NOT NULL",
                    (group, list(pids), name),
                )
                conn.execute(
                    "DELETE FROM tidelog_queue_consumers WHERE grp = %s AND topic_id = %s AND name = %s",
                    (group, topic_id, name),
                )
            return dropped.rowcount

    # records (streams) ---------------------------------------------------------
