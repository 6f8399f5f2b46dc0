"""Kafka's classic group protocol's statements, written once for both SQL stores.

`tidelog.classic_groups` holds the protocol's policy; a store hands it a
`ClassicGroupTx` bound to one group inside the transaction that holds the
group's lock. Both stores keep the same two tables, so the statements are
written here once and spelled by each store's `Dialect`; a store adds only
how it locks the group and how it sets a committed offset.
"""

from __future__ import annotations

from typing import Any

from .base import ClassicMember, ClassicState
from .dialect import Connection, Dialect

_MEMBER_COLUMNS = (
    "member, instance, client_id, host, session_ms, rebalance_ms, heartbeat, protocols, joined, generation, "
    "assignment"
)


def member_row(row: Any) -> ClassicMember:
    (
        member,
        instance,
        client_id,
        host,
        session_ms,
        rebalance_ms,
        heartbeat,
        protocols,
        joined,
        generation,
        assignment,
    ) = row
    return ClassicMember(
        member,
        instance,
        client_id,
        host,
        int(session_ms),
        int(rebalance_ms),
        int(heartbeat),
        bytes(protocols),
        bool(joined),
        int(generation),
        bytes(assignment),
    )


def state_row(row: Any) -> ClassicState:
    generation, phase, protocol_type, protocol, leader, deadline = row
    return ClassicState(int(generation), phase, protocol_type, protocol, leader, int(deadline))


class SQLClassicTx:
    """The protocol's primitives on one group, inside its locked transaction."""

    def __init__(self, db: Connection, group: str, sql: Dialect, state: ClassicState, made: bool):
        self.db = db
        self.group = group
        self.sql = sql
        self._state = state  # read when the lock was taken
        self._made = made

    def state(self) -> ClassicState:
        return self._state

    def made(self) -> bool:
        return self._made

    def set_state(self, state: ClassicState) -> None:
        self.db.execute(
            self.sql(
                "UPDATE {t}classic_groups SET generation = ?, phase = ?, protocol_type = ?, protocol = ?, "
                "leader = ?, deadline = ? WHERE grp = ?"
            ),
            (*state, self.group),
        )
        self._state = state

    def members(self) -> list[ClassicMember]:
        return [
            member_row(row)
            for row in self.db.execute(
                self.sql(f"SELECT {_MEMBER_COLUMNS} FROM {{t}}classic_members WHERE grp = ? ORDER BY member"),
                (self.group,),
            )
        ]

    def put_member(self, member: ClassicMember) -> None:
        self.db.execute(
            self.sql(
                f"INSERT INTO {{t}}classic_members (grp, {_MEMBER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (grp, member) DO UPDATE SET instance = excluded.instance, "
                "client_id = excluded.client_id, host = excluded.host, session_ms = excluded.session_ms, "
                "rebalance_ms = excluded.rebalance_ms, heartbeat = excluded.heartbeat, "
                "protocols = excluded.protocols, joined = excluded.joined, generation = excluded.generation, "
                "assignment = excluded.assignment"
            ),
            (self.group, *member),
        )

    def remember_commit(self, pid: int, position: int, metadata: str) -> None:
        """Keep a Kafka commit as its client sent it (its metadata as UTF-8 bytes: any
        string, NUL included); a negative one also removes the group's committed offset
        on the partition (the stream group has committed nothing)."""
        if position < 0:
            self.db.execute(self.sql("DELETE FROM {t}offsets WHERE grp = ? AND pid = ?"), (self.group, pid))
        self.db.execute(
            self.sql(
                "INSERT INTO {t}classic_commits (grp, pid, position, metadata) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (grp, pid) DO UPDATE SET position = excluded.position, metadata = excluded.metadata"
            ),
            (self.group, pid, position, metadata.encode()),
        )

    def delete_offset(self, pid: int) -> bool:
        """Forget the group's commit on a partition; whether it had one."""
        gone: int = self.db.execute(
            self.sql("DELETE FROM {t}offsets WHERE grp = ? AND pid = ?"), (self.group, pid)
        ).rowcount
        gone += self.db.execute(
            self.sql("DELETE FROM {t}classic_commits WHERE grp = ? AND pid = ?"), (self.group, pid)
        ).rowcount
        return gone > 0

    def has_commits(self) -> bool:
        for table in ("offsets", "classic_commits"):
            found = self.db.execute(
                self.sql(f"SELECT 1 FROM {{t}}{table} WHERE grp = ? LIMIT 1"), (self.group,)
            )
            if found.fetchone() is not None:
                return True
        return False

    def delete_group(self) -> None:
        """Remove the group: its members, state, commits and stream group."""
        for table in ("offsets", "classic_commits"):
            self.db.execute(self.sql(f"DELETE FROM {{t}}{table} WHERE grp = ?"), (self.group,))
        self.db.execute(self.sql("DELETE FROM {t}classic_members WHERE grp = ?"), (self.group,))
        self.db.execute(self.sql("DELETE FROM {t}classic_groups WHERE grp = ?"), (self.group,))
        self.db.execute(self.sql("DELETE FROM {t}groups WHERE name = ? AND mode = 'stream'"), (self.group,))

    def remove_members(self, members: list[str]) -> None:
        if not members:
            return
        gone, params = self.sql.any_of("member", members)
        self.db.execute(
            self.sql("DELETE FROM {t}classic_members WHERE grp = ? AND ") + gone, (self.group, *params)
        )


def describe(db: Connection, sql: Dialect, group: str) -> tuple[ClassicState, list[ClassicMember]] | None:
    row = db.execute(
        sql(
            "SELECT generation, phase, protocol_type, protocol, leader, deadline FROM {t}classic_groups WHERE grp = ?"
        ),
        (group,),
    ).fetchone()
    if row is None:
        return None
    members = [
        member_row(r)
        for r in db.execute(
            sql(f"SELECT {_MEMBER_COLUMNS} FROM {{t}}classic_members WHERE grp = ? ORDER BY member"), (group,)
        )
    ]
    return state_row(row), members


def commits(db: Connection, sql: Dialect, group: str) -> list[tuple[str, int, int | None, int | None, str]]:
    """A group's commits, by topic and partition: (topic, partition, committed offset
    or None, the Kafka commit's position or None, its metadata or "")."""
    rows = db.execute(
        sql(
            "SELECT t.name, p.partition, o.committed, c.position, c.metadata FROM {t}offsets o "
            "JOIN {t}partitions p ON p.id = o.pid JOIN {t}topics t ON t.id = p.topic_id "
            "LEFT JOIN {t}classic_commits c ON c.grp = o.grp AND c.pid = o.pid WHERE o.grp = ? "
            "UNION ALL "
            "SELECT t.name, p.partition, NULL, c.position, c.metadata FROM {t}classic_commits c "
            "JOIN {t}partitions p ON p.id = c.pid JOIN {t}topics t ON t.id = p.topic_id "
            "WHERE c.grp = ? AND NOT EXISTS "
            "(SELECT 1 FROM {t}offsets o WHERE o.grp = c.grp AND o.pid = c.pid)"
        ),
        (group, group),
    ).fetchall()
    return sorted(
        (name, int(p), None if o is None else int(o), None if c is None else int(c), _text(m))
        for name, p, o, c, m in rows
    )


def _text(metadata: bytes | None) -> str:
    """A commit's metadata, kept as its UTF-8 bytes, as text ("" for none)."""
    return "" if metadata is None else bytes(metadata).decode()


def list_groups(db: Connection, sql: Dialect) -> list[tuple[str, ClassicState]]:
    return [
        (row[0], state_row(row[1:]))
        for row in db.execute(
            sql(
                "SELECT grp, generation, phase, protocol_type, protocol, leader, deadline FROM {t}classic_groups "
                "ORDER BY grp"
            )
        )
    ]
