"""What both SQL stores do alike to keep the jobs' states (`JobStore`).

One row a job, by (queue group, partition id, offset), written by one
upsert guarded by the row's state. A cancel writes only while the record is
not leased, checked in the same write transaction as a receive's lease
takes (SQLite's one writer; PostgreSQL's lock on the group's row), so a
runner that leases the job after the cancel reads "cancelled" and one that
leased it before makes the cancel fail (see `tidelog.results`). The statements are spelled
by each store's `Dialect`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import JobHeld, JobLook, JobRow
from .dialect import Connection, Dialect

# A cancel replaces no row but a failed run's (a retry pending); a runner's
# record of a run's end, a started or failed one (never a cancel).
CANCELLABLE = ("failed",)
_ROW = 'SELECT state, attempts, body, updated, expires FROM {t}job_states WHERE grp = ? AND pid = ? AND "offset" = ?'
_STATE = 'SELECT state FROM {t}job_states WHERE grp = ? AND pid = ? AND "offset" = ?'
_HELD = 'SELECT due, deliveries, receipt IS NOT NULL FROM {t}queue_state WHERE grp = ? AND pid = ? AND "offset" = ?'
_CURSOR = "SELECT scanned FROM {t}queue_cursors WHERE grp = ? AND pid = ?"
# The upsert: a conflicting row is replaced only when its state is one of
# those given ({states}); otherwise it stays, and the read after says so.
_PUT = (
    'INSERT INTO {t}job_states (grp, pid, "offset", state, attempts, body, updated, expires) '
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    'ON CONFLICT (grp, pid, "offset") DO UPDATE SET state = excluded.state, attempts = excluded.attempts, '
    "body = excluded.body, updated = excluded.updated, expires = excluded.expires "
    "WHERE {states}"
)


def look(conn: Connection, sql: Dialect, group: str, pid: int, offset: int, now: int, last: int) -> JobLook:
    """The job's row, its record's queue state and the partition's cursor, on one connection."""
    row = conn.execute(sql(_ROW), (group, pid, offset)).fetchone()
    held = conn.execute(sql(_HELD), (group, pid, offset)).fetchone()
    cursor = conn.execute(sql(_CURSOR), (group, pid)).fetchone()
    return JobLook(
        None if row is None else JobRow(*row),
        # A lease that ran out is a due row again (see the queue_state schema).
        None if held is None else JobHeld(held[0], held[1], bool(held[2]) and held[0] > now),
        0 if cursor is None else int(cursor[0]),
        last,
    )


def state(conn: Connection, sql: Dialect, group: str, pid: int, offset: int) -> str | None:
    """The state of the job's row, None without one."""
    row = conn.execute(sql(_STATE), (group, pid, offset)).fetchone()
    return None if row is None else str(row[0])


def upsert(
    conn: Connection, sql: Dialect, group: str, pid: int, offset: int, row: JobRow, replace: Sequence[str]
) -> None:
    """`put` without reading the row back."""
    where, args = sql.any_of(f"{sql.prefix}job_states.state", list(replace) or [""])
    conn.execute(sql(_PUT.replace("{states}", where)), (group, pid, offset, *row, *args))


def put(
    conn: Connection, sql: Dialect, group: str, pid: int, offset: int, row: JobRow, replace: Sequence[str]
) -> JobRow:
    """Write `row` unless a row in a state outside `replace` is there; the row there after.

    Run inside the store's write transaction: the read after sees the upsert's outcome."""
    upsert(conn, sql, group, pid, offset, row, replace)
    return JobRow(*conn.execute(sql(_ROW), (group, pid, offset)).fetchone())


def leased(conn: Connection, sql: Dialect, group: str, pid: int, offset: int, now: int) -> bool:
    """Whether the group has the record leased now (a receipt out, its lease not run out)."""
    held = conn.execute(sql(_HELD), (group, pid, offset)).fetchone()
    return held is not None and bool(held[2]) and held[0] > now


def prune(conn: Connection, sql: Dialect, now: int, limit: int) -> int:
    """Remove up to `limit` rows that expired at or before `now`."""
    cur = conn.execute(
        sql(
            'DELETE FROM {t}job_states WHERE (grp, pid, "offset") IN '
            '(SELECT grp, pid, "offset" FROM {t}job_states WHERE expires <= ? LIMIT ?)'
        ),
        (now, limit),
    )
    return int(cur.rowcount)
