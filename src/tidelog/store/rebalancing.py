"""The rebalance's primitives and the commit fence, written once for both SQL stores.

`tidelog.coordinator` holds the rebalance's policy; a store hands it a
`Rebalancing` bound to one group inside the transaction that holds the
group's lock. Both SQL stores keep the same tables, so the statements are
written here once and spelled by each store's `Dialect`; a store overrides
only what its SQL does differently (PostgreSQL reads the state when it takes
the lock and writes targets with one unnest).
"""

from __future__ import annotations

from typing import Any

from ..errors import NotAssigned, StaleGeneration
from .dialect import Connection, Dialect


class SQLRebalancing:
    """The rebalance's primitives on one group, inside its locked transaction."""

    @staticmethod
    def topics_of(stored: Any) -> list[str]:
        """A member's topics as the store keeps them (text[] here, JSON text on SQLite)."""
        return list(stored)

    def __init__(self, db: Connection, group: str, sql: Dialect):
        self.db = db
        self.group = group
        self.sql = sql

    def members(self) -> list[tuple[str, list[str], int, int]]:
        return [
            (name, self.topics_of(topics), session_ms, heartbeat)
            for name, topics, session_ms, heartbeat in self.db.execute(
                self.sql("SELECT member, topics, session_ms, heartbeat FROM {t}group_members WHERE grp = ?"),
                (self.group,),
            )
        ]

    def expire(self, members: list[str]) -> None:
        gone, params = self.sql.any_of("member", members)
        self.db.execute(
            self.sql("DELETE FROM {t}group_members WHERE grp = ? AND ") + gone, (self.group, *params)
        )
        held, params = self.sql.any_of("owner", members)
        self.db.execute(
            self.sql("UPDATE {t}group_assignment SET owner = NULL WHERE grp = ? AND ") + held,
            (self.group, *params),
        )

    def partition_ids(self, topics: list[str]) -> dict[str, list[int]]:
        if not topics:
            return {}
        names, params = self.sql.any_of("t.name", topics)
        layout: dict[str, list[int]] = {}
        for name, pid in self.db.execute(
            self.sql("SELECT t.name, p.id FROM {t}partitions p JOIN {t}topics t ON t.id = p.topic_id WHERE ")
            + names
            + " ORDER BY t.name, p.partition",
            params,
        ):
            layout.setdefault(name, []).append(pid)
        return layout

    def state(self) -> tuple[int, str, str]:
        row = self.db.execute(
            self.sql("SELECT generation, members, layout FROM {t}group_state WHERE grp = ?"), (self.group,)
        ).fetchone()
        return (int(row[0]), str(row[1]), str(row[2]))

    def owners(self) -> dict[tuple[str, int], str | None]:
        return {
            (t, p): owner
            for t, p, owner in self.db.execute(
                self.sql(
                    "SELECT topic, partition, coalesce(owner, target) FROM {t}group_assignment WHERE grp = ?"
                ),
                (self.group,),
            )
        }

    def set_state(self, generation: int, members: str, layout: str) -> None:
        self.db.execute(
            self.sql("UPDATE {t}group_state SET generation = ?, members = ?, layout = ? WHERE grp = ?"),
            (generation, members, layout, self.group),
        )

    def hand_over(self, generation: int) -> None:
        self.db.execute(
            self.sql(
                "UPDATE {t}group_assignment SET owner = target, owner_gen = ? "
                "WHERE grp = ? AND owner IS NULL AND target IS NOT NULL"
            ),
            (generation, self.group),
        )

    def held(self, member: str) -> list[tuple[str, int, str | None]]:
        rows: list[tuple[str, int, str | None]] = self.db.execute(
            self.sql(
                "SELECT topic, partition, target FROM {t}group_assignment WHERE grp = ? AND owner = ? "
                "ORDER BY topic, partition"
            ),
            (self.group, member),
        ).fetchall()
        return rows

    def leave(self, member: str) -> None:
        """Remove `member` and free what it held (its leave, before the rebalance)."""
        self.db.execute(
            self.sql("DELETE FROM {t}group_members WHERE grp = ? AND member = ?"), (self.group, member)
        )
        self.db.execute(
            self.sql("UPDATE {t}group_assignment SET owner = NULL WHERE grp = ? AND owner = ?"),
            (self.group, member),
        )


def fence_commit(
    group: str,
    member: str,
    generation: int,
    topic: str,
    partition: int,
    *,
    known: bool,
    owner: tuple[str | None, int] | None,
) -> None:
    """Refuse a stream group's commit unless `member` is in the group and owns
    the partition at `generation` or later (`owner` is the partition's
    (owner, owner generation) row, read inside the commit's transaction)."""
    if not known:
        raise StaleGeneration(
            f"member {member!r} is no longer in group {group!r}; its commit was refused (rejoin)"
        )
    if owner is None or owner[0] != member:
        raise NotAssigned(
            f"member {member!r} does not own {topic!r}/{partition} in group {group!r}; commit refused"
        )
    if generation < owner[1]:
        raise StaleGeneration(
            f"commit from generation {generation} refused: {topic!r}/{partition} was assigned to "
            f"{member!r} in generation {owner[1]}"
        )
