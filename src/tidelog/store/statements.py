"""Reads both SQL stores run alike, written once and spelled by each store's `Dialect`.

Each store calls these on a connection it chose (SQLite: a reader
connection; PostgreSQL: a pooled one), so the locking and pooling stay in
the store and only the statement lives here.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnknownTopic
from .base import GroupOffset, PendingSummary
from .dialect import Connection, Dialect


def committed(conn: Connection, sql: Dialect, group: str, pid: int) -> int:
    """A group's committed offset on a partition id (0 when it has none)."""
    row = conn.execute(
        sql("SELECT committed FROM {t}offsets WHERE grp = ? AND pid = ?"), (group, pid)
    ).fetchone()
    return int(row[0]) if row else 0


def group_offsets(conn: Connection, sql: Dialect, group: str) -> list[GroupOffset]:
    """A group's committed offsets, by topic and partition."""
    rows = conn.execute(
        sql(
            "SELECT o.grp, t.name, p.partition, o.committed FROM {t}offsets o "
            "JOIN {t}partitions p ON p.id = o.pid JOIN {t}topics t ON t.id = p.topic_id "
            "WHERE o.grp = ? ORDER BY t.name, p.partition"
        ),
        (group,),
    ).fetchall()
    return [GroupOffset(*r) for r in rows]


def group_names(conn: Connection, sql: Dialect) -> list[str]:
    """Every group: those made explicitly and those with committed offsets."""
    rows = conn.execute(
        sql("SELECT name FROM {t}groups UNION SELECT grp FROM {t}offsets ORDER BY 1")
    ).fetchall()
    return [r[0] for r in rows]


def set_topic_config(conn: Connection, sql: Dialect, name: str, config: Any) -> None:
    """Store a topic's settings (`config` as the store's JSON column takes it)."""
    if conn.execute(sql("UPDATE {t}topics SET config = ? WHERE name = ?"), (config, name)).rowcount != 1:
        raise UnknownTopic(f"topic {name!r} does not exist")


def queue_groups(conn: Connection, sql: Dialect, topic_id: int) -> list[str]:
    """The queue groups of a topic, oldest first."""
    rows = conn.execute(
        sql("SELECT grp FROM {t}queue_groups WHERE topic_id = ? ORDER BY created, grp"), (topic_id,)
    ).fetchall()
    return [r[0] for r in rows]


def queue_cursor(conn: Connection, sql: Dialect, group: str, pid: int) -> int:
    """How far a queue group has scanned a partition id (0: not at all)."""
    row = conn.execute(
        sql("SELECT scanned FROM {t}queue_cursors WHERE grp = ? AND pid = ?"), (group, pid)
    ).fetchone()
    return int(row[0]) if row else 0


def pending_summary(conn: Connection, sql: Dialect, group: str, pid: int) -> PendingSummary:
    """What a queue group holds leased on a partition id: count, lowest and
    highest offset, and the count per named consumer (unnamed first)."""
    count, low, high = conn.execute(
        sql(
            'SELECT count(*), min("offset"), max("offset") FROM {t}queue_state '
            "WHERE grp = ? AND pid = ? AND receipt IS NOT NULL"
        ),
        (group, pid),
    ).fetchone()
    per = conn.execute(
        sql(
            "SELECT consumer, count(*) FROM {t}queue_state WHERE grp = ? AND pid = ? "
            "AND receipt IS NOT NULL GROUP BY consumer ORDER BY consumer NULLS FIRST"
        ),
        (group, pid),
    ).fetchall()
    return PendingSummary(count, low, high, [(c, n) for c, n in per])
