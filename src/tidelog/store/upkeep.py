"""What both SQL stores do alike to look into a queue group (`QueueUpkeep.queue_peek`).

A peek leases nothing and writes nothing: it reads the group's state rows
that are not in flight and the new records past each partition's cursor,
and orders them as a receive would pick them (see `store.leasing`): by
priority, then due time (a new record is never due before an older one of
its partition), then partition and offset; the delayed ones after, by due
time. The statements are spelled by each store's `Dialect`; the records are
read through the store's own `read`, so the value columns of each store stay
its own business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .base import DueOf, Pending, PriorityOf, Row, Waiting
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
) -> list[tuple[int, int, int, int, int, int]]:
    """(pid, offset, due, deliveries, priority, seq) of up to `limit` rows not in flight."""
    where, args = sql.any_of("pid", pids)
    text = sql(_STATE.replace("{pids}", where))
    return [tuple(r) for r in conn.execute(text, (group, *args, now, now, now, limit)).fetchall()]


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


def peek(
    state: list[tuple[int, int, int, int, int, int]],
    scanned: list[int],
    pids: Sequence[int],
    read: Callable[[int, int, int], list[Row]],
    now: int,
    limit: int,
    due_of: DueOf,
    priority_of: PriorityOf,
) -> list[Waiting]:
    """The peek's answer from the rows of `state_rows` and `cursors`;
    `read(partition, after, limit)` is the store's `read` of the topic."""
    partition_of = {pid: i for i, pid in enumerate(pids)}
    keyed: list[tuple[tuple[Any, ...], Waiting]] = []
    held: set[tuple[int, int]] = set()
    for pid, offset, due, deliveries, priority, seq in state:
        partition = partition_of[pid]
        held.add((partition, offset))
        rows = read(partition, offset - 1, 1)
        if not rows or rows[0][0] != offset:
            continue  # removed by retention: a receive would drop the row
        _, ts, value, meta = rows[0]
        w = Waiting(partition, offset, ts, value, meta, deliveries, due, priority, due > now)
        keyed.append((_order(w, seq), w))
    for partition, cursor in enumerate(scanned):
        running = 0
        for offset, ts, value, meta in read(partition, cursor, limit):
            if (partition, offset) in held:
                continue
            due = ts if meta is None else due_of(ts, meta)
            priority = 0 if meta is None else priority_of(meta)
            delayed = due > now
            if not delayed:
                running = due = max(running, due)
            w = Waiting(partition, offset, ts, value, meta, 0, due, priority, delayed)
            keyed.append((_order(w, 0), w))
    keyed.sort(key=lambda k: k[0])
    return [w for _, w in keyed[:limit]]


def _order(w: Waiting, seq: int) -> tuple[Any, ...]:
    """Due ones as a receive picks them; the delayed after, by due time."""
    if w.delayed:
        return (True, 0, w.due, 0, w.partition, w.offset)
    return (False, -w.priority, w.due, seq, w.partition, w.offset)
