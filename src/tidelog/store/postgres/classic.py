"""Kafka's classic group protocol on PostgreSQL: each step is one transaction
that first locks the group's row (made on first use), so the steps of one
group take turns across connections, processes and `serve` brokers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import UnknownTopic
from ..base import ClassicGroupTx, ClassicMember, ClassicState
from ..classic import SQLClassicTx, commits, describe, list_groups, state_row
from ..dialect import POSTGRES
from .base import _SEEK, MAX_OFFSET, PostgresBase, _now_ms, one

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

# The group's row is made on first use, then locked: two statements, so that the
# step knows whether its own made the row (`ClassicGroupTx.made`: a group no step
# kept). An insert that meets another transaction's uncommitted row waits for it;
# under READ COMMITTED the lock's SELECT then sees the row that transaction kept,
# or the insert made it when that transaction rolled back.
_MAKE = """
INSERT INTO tidelog_classic_groups (grp, generation, phase, protocol_type, protocol, leader, deadline)
VALUES (%s, 0, 'empty', '', '', '', 0)
ON CONFLICT (grp) DO NOTHING
"""
_LOCK = """
SELECT generation, phase, protocol_type, protocol, leader, deadline FROM tidelog_classic_groups
WHERE grp = %s FOR UPDATE
"""


class PostgresClassicTx(SQLClassicTx):
    def __init__(
        self, store: PostgresBase, conn: psycopg.Connection[Any], group: str, state: ClassicState, made: bool
    ):
        super().__init__(conn, group, POSTGRES, state, made)
        self.store = store
        self.conn = conn

    def commit(self, topic: str, partition: int, offset: int, metadata: str = "") -> None:
        pid = self.store._pid(topic, partition)
        if offset >= 0:
            row = self.conn.execute(
                _SEEK, {"grp": self.group, "offset": min(offset, MAX_OFFSET), "pid": pid}
            ).fetchone()
            if row is None:
                raise UnknownTopic(f"topic {topic!r} does not exist")
            self.store._check_offset(topic, partition, offset, *row)
        self.remember_commit(pid, offset, metadata)

    def delete_offsets(self, topic: str, partition: int) -> bool:
        return self.delete_offset(self.store._pid(topic, partition))


class PostgresClassicGroups(PostgresBase):
    """Mixed into PostgresStore; uses its pooled connections."""

    def classic_run(self, group: str, now: int, step: Callable[[ClassicGroupTx], T]) -> T:
        with self._conn() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO tidelog_groups (name, mode, config, created) VALUES (%s, 'stream', '{}', %s) "
                "ON CONFLICT (name) DO NOTHING",
                (group, now or _now_ms()),
            )
            made = conn.execute(_MAKE, (group,)).rowcount
            state = state_row(one(conn.execute(_LOCK, (group,))))
            return step(PostgresClassicTx(self, conn, group, state, made == 1))

    def classic_describe(self, group: str) -> tuple[ClassicState, list[ClassicMember]] | None:
        with self._conn() as conn:
            return describe(conn, POSTGRES, group)

    def classic_list(self) -> list[tuple[str, ClassicState]]:
        with self._conn() as conn:
            return list_groups(conn, POSTGRES)

    def classic_commits(self, group: str) -> list[tuple[str, int, int | None, int | None, str]]:
        with self._conn() as conn:
            return commits(conn, POSTGRES, group)
