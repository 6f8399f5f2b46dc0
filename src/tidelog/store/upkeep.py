"""What both SQL stores do alike to look into a queue group (`QueueUpkeep`).

A peek leases nothing and writes nothing: it reads the group's state rows
that are not in flight and each partition's cursor, and the core orders
them as a receive would pick them (`LeasePolicy.peek`), reading the new
records past each cursor through the store's own `read` (so the value
columns of each store stay its own business). The statements are spelled by
each store's `Dialect`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Pending, StateRow
from .dialect import Connection, Dialect

# A group's state rows not leased now (waiting, delayed, or a lease that ran
# out), those due first. The ordering key's `due > now` puts the delayed last.
_STATE = (
    'SELECT pid, "offset", due, deliveries, priority, seq FROM {t}queue_state '
    "WHERE grp = ? AND {pids} AND (receipt IS NULL OR due <= ?) "
    'ORDER BY due > ?, CASE WHEN due > ? THEN 0 ELSE priority END DESC, due, seq, pid, "offset" LIMIT ?'
)


def group_exists(conn: Connection, sql: Dialect, group: str, topic_id: int) -> bool:
    row = conn.execute(
        sql("SELECT 1 FROM {t}queue_groups WHERE grp = ? AND topic_id = ?"), (group, topic_id)
    ).fetchone()
    return row is not None


def state_rows(
    conn: Connection, sql: Dialect, group: str, pids: Sequence[int], now: int, limit: int
) -> list[StateRow]:
    """Up to `limit` of the group's state rows not in flight, those due first."""
    where, args = sql.any_of("pid", pids)
    text = sql(_STATE.replace("{pids}", where))
    partition_of = {pid: i for i, pid in enumerate(pids)}
    return [
        StateRow(partition_of[pid], offset, due, seq, deliveries, priority)
        for pid, offset, due, deliveries, priority, seq in conn.execute(
            text, (group, *args, now, now, now, limit)
        ).fetchall()
    ]


def in_flight(
    conn: Connection, sql: Dialect, group: str, pids: Sequence[int], now: int, limit: int
) -> list[Pending]:
    """Up to `limit` leases that have not run out, by partition and offset."""
    where, args = sql.any_of("pid", pids)
    text = sql(
        'SELECT pid, "offset", consumer, coalesce(delivered, 0), deliveries, due FROM {t}queue_state '
        f'WHERE grp = ? AND {where} AND receipt IS NOT NULL AND due > ? ORDER BY pid, "offset" LIMIT ?'
    )
    partition_of = {pid: i for i, pid in enumerate(pids)}
    rows = conn.execute(text, (group, *args, now, limit)).fetchall()
    out = [Pending(partition_of[r[0]], *r[1:]) for r in rows]
    out.sort(key=lambda p: (p.partition, p.offset))  # pids need not grow with partitions
    return out


def cursors(conn: Connection, sql: Dialect, group: str, pids: Sequence[int]) -> list[int]:
    """The group's cursor on each partition id, in the order given (0: none yet)."""
    where, args = sql.any_of("pid", pids)
    found = dict(
        conn.execute(
            sql(f"SELECT pid, scanned FROM {{t}}queue_cursors WHERE grp = ? AND {where}"), (group, *args)
        )
    )
    return [int(found.get(pid, 0)) for pid in pids]
