"""Stream group membership on PostgreSQL: members, generations, owners, targets.

Mechanics only: the rebalance is the core's (`tidelog.coordinator`), run
inside the transaction that needs it over `PostgresRebalancing`, the
statements it needs.

Every change to a group's membership (join, heartbeat, release, leave) is one
transaction that first locks the group's row in `tidelog_group_state`
(SELECT ... FOR UPDATE), so rebalances of one group take turns across any
number of connections, processes and machines, and each sees the members
the one before it left. READ COMMITTED is enough: every statement after the
lock reads what the previous holder committed.

A fenced commit does not take the group lock: it holds the partition's
assignment row FOR SHARE while it checks ownership and writes the offset, so
a rebalance that would hand the partition on (an UPDATE of that row) waits
for the commit, and a commit that arrives after the hand-over sees it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import StaleGeneration
from ..base import GroupMember, GroupSync, Rebalance
from ..dialect import POSTGRES
from ..rebalancing import SQLRebalancing, fence_commit
from .base import PostgresBase, one

if TYPE_CHECKING:
    import psycopg

_LOCK = "SELECT generation, members, layout FROM tidelog_group_state WHERE grp = %s FOR UPDATE"

# Creates the group's row on first use and takes its lock in one statement
# (ON CONFLICT DO UPDATE locks the row as FOR UPDATE does).
_JOIN_LOCK = """
INSERT INTO tidelog_group_state (grp, generation, assignor, members, layout)
VALUES (%(grp)s, 0, %(assignor)s, '', '')
ON CONFLICT (grp) DO UPDATE SET assignor = excluded.assignor
RETURNING generation, members, layout
"""

_STALE = "member {member!r} is no longer in group {group!r} (its session expired or it left); rejoin"


class PostgresRebalancing(SQLRebalancing):
    """The rebalance's primitives on one group, holding its lock."""

    def __init__(self, conn: psycopg.Connection[Any], group: str, state: tuple[Any, ...]):
        super().__init__(conn, group, POSTGRES)
        self.conn = conn
        self._state = (int(state[0]), str(state[1]), str(state[2]))  # read when the lock was taken

    def state(self) -> tuple[int, str, str]:
        return self._state

    def set_targets(self, rows: list[tuple[int, str, int, str | None]]) -> None:
        self.conn.execute(
            "INSERT INTO tidelog_group_assignment (grp, pid, topic, partition, owner, target) "
            "SELECT %s, r.pid, r.topic, r.partition, NULL, r.target "
            "FROM unnest(%s::bigint[], %s::text[], %s::integer[], %s::text[]) AS r(pid, topic, partition, target) "
            "ON CONFLICT (grp, pid) DO UPDATE SET target = excluded.target",
            (self.group, *([r[i] for r in rows] for i in range(4))),
        )
        self.conn.execute(
            "DELETE FROM tidelog_group_assignment WHERE grp = %s AND pid <> ALL(%s::bigint[])",
            (self.group, [r[0] for r in rows]),
        )


class PostgresGroups(PostgresBase):
    """Mixed into PostgresStore; uses its pooled connections and pid cache."""

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
        with self._conn() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO tidelog_groups (name, mode, config, created) VALUES (%s, 'stream', '{}', %s) "
                "ON CONFLICT (name) DO NOTHING",
                (group, now),
            )
            state = one(conn.execute(_JOIN_LOCK, {"grp": group, "assignor": assignor}))
            conn.execute(
                "INSERT INTO tidelog_group_members (grp, member, topics, session_ms, heartbeat, joined) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (grp, member) DO UPDATE SET "
                "topics = excluded.topics, session_ms = excluded.session_ms, heartbeat = excluded.heartbeat",
                (group, member, sorted(set(topics)), session_ms, now, now),
            )
            return rebalance(PostgresRebalancing(conn, group, state), member, now)

    def group_heartbeat(self, group: str, member: str, now: int, rebalance: Rebalance) -> GroupSync:
        with self._conn() as conn, conn.transaction():
            state = conn.execute(_LOCK, (group,)).fetchone()
            if (
                state is None
                or conn.execute(
                    "UPDATE tidelog_group_members SET heartbeat = %s WHERE grp = %s AND member = %s",
                    (now, group, member),
                ).rowcount
                != 1
            ):
                raise StaleGeneration(_STALE.format(member=member, group=group))
            return rebalance(PostgresRebalancing(conn, group, state), member, now)

    def group_release(
        self, group: str, member: str, partitions: list[tuple[str, int]], now: int, rebalance: Rebalance
    ) -> GroupSync:
        with self._conn() as conn, conn.transaction():
            state = conn.execute(_LOCK, (group,)).fetchone()
            if state is None:
                return GroupSync(0, [], [])  # no such group: nothing is held
            if partitions:
                conn.execute(
                    "UPDATE tidelog_group_assignment a SET owner = NULL "
                    "FROM unnest(%s::text[], %s::integer[]) AS r(topic, partition) "
                    "WHERE a.grp = %s AND a.owner = %s AND a.topic = r.topic AND a.partition = r.partition",
                    ([t for t, _ in partitions], [p for _, p in partitions], group, member),
                )
            return rebalance(PostgresRebalancing(conn, group, state), member, now)

    def group_leave(self, group: str, member: str, now: int, rebalance: Rebalance) -> None:
        with self._conn() as conn, conn.transaction():
            state = conn.execute(_LOCK, (group,)).fetchone()
            if state is None:
                return
            tx = PostgresRebalancing(conn, group, state)
            tx.leave(member)
            rebalance(tx, None, now)

    def group_commit(
        self, group: str, member: str, generation: int, topic: str, partition: int, offset: int
    ) -> None:
        pid = self._pid(topic, partition)
        with self._conn() as conn, conn.transaction():
            # Lock the ownership first, then look at the member: an expiry or
            # a leave in flight clears the owner only after this commit ends.
            row = conn.execute(
                "SELECT owner, owner_gen FROM tidelog_group_assignment WHERE grp = %s AND pid = %s FOR SHARE",
                (group, pid),
            ).fetchone()
            known = conn.execute(
                "SELECT 1 FROM tidelog_group_members WHERE grp = %s AND member = %s", (group, member)
            ).fetchone()
            fence_commit(group, member, generation, topic, partition, known=known is not None, owner=row)
            self._commit_in(conn, group, topic, partition, pid, offset)

    def group_members(self, group: str) -> list[GroupMember]:
        # One statement, so members, owners and generation are one snapshot.
        with self._conn() as conn:
            rows = conn.execute(
                """
                SELECT m.member, m.topics, m.session_ms, m.heartbeat,
                       coalesce((SELECT generation FROM tidelog_group_state WHERE grp = m.grp), 0),
                       ARRAY(SELECT a.topic FROM tidelog_group_assignment a
                             WHERE a.grp = m.grp AND a.owner = m.member ORDER BY a.topic, a.partition),
                       ARRAY(SELECT a.partition FROM tidelog_group_assignment a
                             WHERE a.grp = m.grp AND a.owner = m.member ORDER BY a.topic, a.partition)
                FROM tidelog_group_members m WHERE m.grp = %s ORDER BY m.member
                """,
                (group,),
            ).fetchall()
        return [
            GroupMember(name, list(topics), session_ms, heartbeat, list(zip(owned_t, owned_p)), generation)
            for name, topics, session_ms, heartbeat, generation, owned_t, owned_p in rows
        ]
