"""Stream group membership on SQLite: members, generations, owners, targets.

Mechanics only: each membership change is one write transaction (SQLite's
BEGIN IMMEDIATE is the group's lock) that calls the core's rebalance
(`tidelog.coordinator`) over `SQLiteRebalancing`, the statements it needs.
"""

from __future__ import annotations

import json
import sqlite3

from ...errors import NotAssigned, StaleGeneration
from ..base import GroupMember, GroupSync, Rebalance
from .base import SQLiteBase


class SQLiteRebalancing:
    """The rebalance's primitives on one group, inside a write transaction."""

    def __init__(self, db: sqlite3.Connection, group: str):
        self.db = db
        self.group = group

    def members(self) -> list[tuple[str, list[str], int, int]]:
        return [
            (name, json.loads(topics), session_ms, heartbeat)
            for name, topics, session_ms, heartbeat in self.db.execute(
                "SELECT member, topics, session_ms, heartbeat FROM group_members WHERE grp = ?", (self.group,)
            )
        ]

    def expire(self, members: list[str]) -> None:
        marks = ",".join("?" * len(members))
        self.db.execute(
            f"DELETE FROM group_members WHERE grp = ? AND member IN ({marks})", (self.group, *members)
        )
        self.db.execute(
            f"UPDATE group_assignment SET owner = NULL WHERE grp = ? AND owner IN ({marks})",
            (self.group, *members),
        )

    def partition_ids(self, topics: list[str]) -> dict[str, list[int]]:
        layout: dict[str, list[int]] = {}
        for name, pid in self.db.execute(
            "SELECT t.name, p.id FROM partitions p JOIN topics t ON t.id = p.topic_id "
            f"WHERE t.name IN ({','.join('?' * len(topics))}) ORDER BY t.name, p.partition",
            topics,
        ):
            layout.setdefault(name, []).append(pid)
        return layout

    def state(self) -> tuple[int, str, str]:
        row = self.db.execute(
            "SELECT generation, members, layout FROM group_state WHERE grp = ?", (self.group,)
        ).fetchone()
        return (row[0], row[1], row[2])

    def owners(self) -> dict[tuple[str, int], str | None]:
        return {
            (t, p): owner
            for t, p, owner in self.db.execute(
                "SELECT topic, partition, coalesce(owner, target) FROM group_assignment WHERE grp = ?",
                (self.group,),
            )
        }

    def set_targets(self, rows: list[tuple[int, str, int, str | None]]) -> None:
        self.db.executemany(
            "INSERT INTO group_assignment(grp, pid, topic, partition, owner, target) VALUES (?, ?, ?, ?, NULL, ?) "
            "ON CONFLICT(grp, pid) DO UPDATE SET target = excluded.target",
            [(self.group, *row) for row in rows],
        )
        marks = ",".join("?" * len(rows))
        self.db.execute(
            f"DELETE FROM group_assignment WHERE grp = ? AND pid NOT IN ({marks})",
            (self.group, *(r[0] for r in rows)),
        )

    def set_state(self, generation: int, members: str, layout: str) -> None:
        self.db.execute(
            "UPDATE group_state SET generation = ?, members = ?, layout = ? WHERE grp = ?",
            (generation, members, layout, self.group),
        )

    def hand_over(self, generation: int) -> None:
        self.db.execute(
            "UPDATE group_assignment SET owner = target, owner_gen = ? "
            "WHERE grp = ? AND owner IS NULL AND target IS NOT NULL",
            (generation, self.group),
        )

    def held(self, member: str) -> list[tuple[str, int, str | None]]:
        return self.db.execute(
            "SELECT topic, partition, target FROM group_assignment WHERE grp = ? AND owner = ? "
            "ORDER BY topic, partition",
            (self.group, member),
        ).fetchall()


class SQLiteGroups(SQLiteBase):
    """Mixed into SQLiteStore; uses its connections and lock."""

    def group_join(
        self,
        group: str,
        member: str,
        topics: list[str],
        session_ms: int,
        assignor: str,
        now: int,
        rebalance: Rebalance,
    ) -> GroupSync:
        with self._write() as db:
            db.execute(
                "INSERT INTO group_members(grp, member, topics, session_ms, heartbeat, joined) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(grp, member) DO UPDATE SET topics = excluded.topics, session_ms = excluded.session_ms, "
                "heartbeat = excluded.heartbeat",
                (group, member, json.dumps(sorted(set(topics))), session_ms, now, now),
            )
            db.execute(
                "INSERT OR IGNORE INTO groups(name, mode, config, created) VALUES (?, 'stream', '{}', ?)",
                (group, now),
            )
            db.execute(
                "INSERT OR IGNORE INTO group_state(grp, generation, assignor, members, layout) VALUES (?, 0, ?, '', '')",
                (group, assignor),
            )
            db.execute("UPDATE group_state SET assignor = ? WHERE grp = ?", (assignor, group))
            return rebalance(SQLiteRebalancing(db, group), member, now)

    def group_heartbeat(self, group: str, member: str, now: int, rebalance: Rebalance) -> GroupSync:
        with self._write() as db:
            cur = db.execute(
                "UPDATE group_members SET heartbeat = ? WHERE grp = ? AND member = ?", (now, group, member)
            )
            if cur.rowcount != 1:
                raise StaleGeneration(
                    f"member {member!r} is no longer in group {group!r} (its session expired or it left); rejoin"
                )
            return rebalance(SQLiteRebalancing(db, group), member, now)

    def group_release(
        self, group: str, member: str, partitions: list[tuple[str, int]], now: int, rebalance: Rebalance
    ) -> GroupSync:
        with self._write() as db:
            for topic, partition in partitions:
                db.execute(
                    "UPDATE group_assignment SET owner = NULL WHERE grp = ? AND topic = ? AND partition = ? "
                    "AND owner = ?",
                    (group, topic, partition, member),
                )
            return rebalance(SQLiteRebalancing(db, group), member, now)

    def group_leave(self, group: str, member: str, now: int, rebalance: Rebalance) -> None:
        with self._write() as db:
            db.execute("DELETE FROM group_members WHERE grp = ? AND member = ?", (group, member))
            db.execute(
                "UPDATE group_assignment SET owner = NULL WHERE grp = ? AND owner = ?", (group, member)
            )
            rebalance(SQLiteRebalancing(db, group), None, now)

    def group_commit(
        self, group: str, member: str, generation: int, topic: str, partition: int, offset: int
    ) -> None:
        pid = self._pid(topic, partition)
        with self._write() as db:
            known = db.execute(
                "SELECT 1 FROM group_members WHERE grp = ? AND member = ?", (group, member)
            ).fetchone()
            if known is None:
                raise StaleGeneration(
                    f"member {member!r} is no longer in group {group!r}; its commit was refused (rejoin)"
                )
            row = db.execute(
                "SELECT owner, owner_gen FROM group_assignment WHERE grp = ? AND pid = ?", (group, pid)
            ).fetchone()
            if row is None or row[0] != member:
                raise NotAssigned(
                    f"member {member!r} does not own {topic!r}/{partition} in group {group!r}; commit refused"
                )
            if generation < row[1]:
                raise StaleGeneration(
                    f"commit from generation {generation} refused: {topic!r}/{partition} was assigned to "
                    f"{member!r} in generation {row[1]}"
                )
            self._commit_in(db, group, topic, partition, pid, offset)

    def group_members(self, group: str) -> list[GroupMember]:
        with self._read() as conn:
            owned: dict[str, list[tuple[str, int]]] = {}
            for owner, topic, partition in conn.execute(
                "SELECT owner, topic, partition FROM group_assignment WHERE grp = ? AND owner IS NOT NULL "
                "ORDER BY topic, partition",
                (group,),
            ):
                owned.setdefault(owner, []).append((topic, partition))
            rows = conn.execute(
                "SELECT member, topics, session_ms, heartbeat FROM group_members WHERE grp = ? ORDER BY member",
                (group,),
            ).fetchall()
            state = conn.execute("SELECT generation FROM group_state WHERE grp = ?", (group,)).fetchone()
        generation = state[0] if state else 0
        return [
            GroupMember(name, json.loads(topics), session_ms, heartbeat, owned.get(name, []), generation)
            for name, topics, session_ms, heartbeat in rows
        ]
