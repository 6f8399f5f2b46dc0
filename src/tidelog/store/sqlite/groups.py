"""Stream group membership on SQLite: members, generations, owners, targets.

Mechanics only: each membership change is one write transaction (SQLite's
BEGIN IMMEDIATE is the group's lock) that calls the core's rebalance
(`tidelog.coordinator`) over `SQLiteRebalancing`, the statements it needs.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ...errors import StaleGeneration
from ..base import GroupMember, GroupSync, Rebalance
from ..dialect import SQLITE
from ..rebalancing import SQLRebalancing, fence_commit
from .base import SQLiteBase


class SQLiteRebalancing(SQLRebalancing):
    """The rebalance's primitives on one group, inside a write transaction."""

    @staticmethod
    def topics_of(stored: Any) -> list[str]:
        return list(json.loads(stored))

    def __init__(self, db: sqlite3.Connection, group: str):
        super().__init__(db, group, SQLITE)
        self.conn = db

    def set_targets(self, rows: list[tuple[int, str, int, str | None]]) -> None:
        self.conn.executemany(
            "INSERT INTO group_assignment(grp, pid, topic, partition, owner, target) VALUES (?, ?, ?, ?, NULL, ?) "
            "ON CONFLICT(grp, pid) DO UPDATE SET target = excluded.target",
            [(self.group, *row) for row in rows],
        )
        kept, params = self.sql.any_of("pid", [r[0] for r in rows])
        self.db.execute(f"DELETE FROM group_assignment WHERE grp = ? AND NOT {kept}", (self.group, *params))


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
            tx = SQLiteRebalancing(db, group)
            tx.leave(member)
            rebalance(tx, None, now)

    def group_commit(
        self, group: str, member: str, generation: int, topic: str, partition: int, offset: int
    ) -> None:
        pid = self._pid(topic, partition)
        with self._write() as db:
            known = db.execute("SELECT 1 FROM group_members WHERE grp = ? AND member = ?", (group, member))
            owner = db.execute(
                "SELECT owner, owner_gen FROM group_assignment WHERE grp = ? AND pid = ?", (group, pid)
            )
            fence_commit(
                group,
                member,
                generation,
                topic,
                partition,
                known=known.fetchone() is not None,
                owner=owner.fetchone(),
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
