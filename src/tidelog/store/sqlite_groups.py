"""Stream group membership on SQLite: members, generations, owners, targets.

Mechanics only: the assignment itself is computed by the core's assignor,
passed in as `assign`, inside the write transaction that needs it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from ..errors import NotAssigned, StaleGeneration
from .base import GroupMember, GroupSync

OFFSET_BITS = 40

# assign(members: {member: [topics]}, layout: {topic: partitions},
#        current: {(topic, partition): owner}) -> {(topic, partition): member}
Assign = Callable[[dict[str, list[str]], dict[str, int], dict[tuple[str, int], str | None]], dict]


class SQLiteGroups:
    """Mixed into SQLiteStore; uses its connections and lock."""

    _write: Any
    _read: Any
    _pid: Any

    def group_join(
        self,
        group: str,
        member: str,
        topics: list[str],
        session_ms: int,
        assignor: str,
        now: int,
        assign: Assign,
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
            return self._sync(db, group, member, now, assign)

    def group_heartbeat(self, group: str, member: str, now: int, assign: Assign) -> GroupSync:
        with self._write() as db:
            cur = db.execute(
                "UPDATE group_members SET heartbeat = ? WHERE grp = ? AND member = ?", (now, group, member)
            )
            if cur.rowcount != 1:
                raise StaleGeneration(
                    f"member {member!r} is no longer in group {group!r} (its session expired or it left); rejoin"
                )
            return self._sync(db, group, member, now, assign)

    def group_release(
        self, group: str, member: str, partitions: list[tuple[str, int]], now: int, assign: Assign
    ) -> GroupSync:
        with self._write() as db:
            for topic, partition in partitions:
                db.execute(
                    "UPDATE group_assignment SET owner = NULL WHERE grp = ? AND topic = ? AND partition = ? "
                    "AND owner = ?",
                    (group, topic, partition, member),
                )
            return self._sync(db, group, member, now, assign)

    def group_leave(self, group: str, member: str, now: int, assign: Assign) -> None:
        with self._write() as db:
            db.execute("DELETE FROM group_members WHERE grp = ? AND member = ?", (group, member))
            db.execute(
                "UPDATE group_assignment SET owner = NULL WHERE grp = ? AND owner = ?", (group, member)
            )
            self._sync(db, group, None, now, assign)

    def _sync(
        self, db: sqlite3.Connection, group: str, member: str | None, now: int, assign: Assign
    ) -> GroupSync:
        members: dict[str, list[str]] = {}
        for name, topics, session_ms, heartbeat in db.execute(
            "SELECT member, topics, session_ms, heartbeat FROM group_members WHERE grp = ?", (group,)
        ):
            if heartbeat + session_ms < now and name != member:
                db.execute("DELETE FROM group_members WHERE grp = ? AND member = ?", (group, name))
                db.execute(
                    "UPDATE group_assignment SET owner = NULL WHERE grp = ? AND owner = ?", (group, name)
                )
            else:
                members[name] = json.loads(topics)
        layout: dict[str, list[int]] = {}
        for topic in sorted({t for ts in members.values() for t in ts}):
            pids = [
                r[0]
                for r in db.execute(
                    "SELECT p.id FROM partitions p JOIN topics t ON t.id = p.topic_id WHERE t.name = ? "
                    "ORDER BY p.partition",
                    (topic,),
                )
            ]
            if pids:
                layout[topic] = pids
        generation, member_key, layout_key = db.execute(
            "SELECT generation, members, layout FROM group_state WHERE grp = ?", (group,)
        ).fetchone()
        new_members = json.dumps(sorted(members.items()))
        # By partition id: a topic deleted and made again with as many partitions is new.
        new_layout = json.dumps(sorted((t, p) for t, p in layout.items()))
        if new_members != member_key or new_layout != layout_key:
            generation += 1
            current = {
                (t, p): owner
                for t, p, owner in db.execute(
                    "SELECT topic, partition, coalesce(owner, target) FROM group_assignment WHERE grp = ?",
                    (group,),
                )
            }
            targets = assign(members, {t: len(p) for t, p in layout.items()}, current)
            keep = []
            for topic, pids in layout.items():
                for partition, pid in enumerate(pids):
                    keep.append(pid)
                    db.execute(
                        "INSERT INTO group_assignment(grp, pid, topic, partition, owner, target) "
                        "VALUES (?, ?, ?, ?, NULL, ?) ON CONFLICT(grp, pid) DO UPDATE SET target = excluded.target",
                        (group, pid, topic, partition, targets.get((topic, partition))),
                    )
            marks = ",".join("?" * len(keep))
            db.execute(f"DELETE FROM group_assignment WHERE grp = ? AND pid NOT IN ({marks})", (group, *keep))
            db.execute(
                "UPDATE group_state SET generation = ?, members = ?, layout = ? WHERE grp = ?",
                (generation, new_members, new_layout, group),
            )
        # A partition changes hands only once nobody holds it.
        db.execute(
            "UPDATE group_assignment SET owner = target, owner_gen = ? "
            "WHERE grp = ? AND owner IS NULL AND target IS NOT NULL",
            (generation, group),
        )
        owned, revoke = [], []
        if member is not None:
            for topic, partition, target in db.execute(
                "SELECT topic, partition, target FROM group_assignment WHERE grp = ? AND owner = ? "
                "ORDER BY topic, partition",
                (group, member),
            ):
                owned.append((topic, partition))
                if target != member:
                    revoke.append((topic, partition))
        return GroupSync(generation, owned, revoke)

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
            self._commit_in(db, group, topic, partition, pid, offset)  # type: ignore[attr-defined]

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
