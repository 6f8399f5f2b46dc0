"""Kafka's classic group protocol on SQLite: each step is one write transaction
(BEGIN IMMEDIATE is the group's lock) over `SQLClassicTx`'s statements."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from ..base import ClassicGroupTx, ClassicMember, ClassicState
from ..classic import SQLClassicTx, commits, describe, list_groups, state_row
from ..dialect import SQLITE
from .base import SQLiteBase

T = TypeVar("T")


class SQLiteClassicTx(SQLClassicTx):
    def __init__(
        self, store: SQLiteBase, db: sqlite3.Connection, group: str, state: ClassicState, made: bool
    ):
        super().__init__(db, group, SQLITE, state, made)
        self.store = store
        self.conn = db

    def commit(self, topic: str, partition: int, offset: int, metadata: str = "") -> None:
        store = self.store
        pid = store._pid(topic, partition)
        if offset >= 0:
            store._bounds_check(self.conn, topic, partition, pid, offset)
            store.check_start(self.conn, topic, partition, pid, offset)
            self.conn.execute(
                "INSERT INTO offsets(grp, pid, committed) VALUES (?, ?, ?) "
                "ON CONFLICT(grp, pid) DO UPDATE SET committed = excluded.committed",
                (self.group, pid, offset),
            )
        self.remember_commit(pid, offset, metadata)

    def delete_offsets(self, topic: str, partition: int) -> bool:
        return self.delete_offset(self.store._pid(topic, partition))


class SQLiteClassicGroups(SQLiteBase):
    """Mixed into SQLiteStore; uses its writer connection and lock."""

    def classic_run(self, group: str, now: int, step: Callable[[ClassicGroupTx], T]) -> T:
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO groups(name, mode, config, created) VALUES (?, 'stream', '{}', ?)",
                (group, now),
            )
            made = db.execute(
                "INSERT OR IGNORE INTO classic_groups(grp, generation, phase, protocol_type, protocol, leader, deadline) "
                "VALUES (?, 0, 'empty', '', '', '', 0)",
                (group,),
            ).rowcount
            row = db.execute(
                "SELECT generation, phase, protocol_type, protocol, leader, deadline FROM classic_groups WHERE grp = ?",
                (group,),
            ).fetchone()
            return step(SQLiteClassicTx(self, db, group, state_row(row), made == 1))

    def classic_describe(self, group: str) -> tuple[ClassicState, list[ClassicMember]] | None:
        with self._read() as conn:
            return describe(conn, SQLITE, group)

    def classic_list(self) -> list[tuple[str, ClassicState]]:
        with self._read() as conn:
            return list_groups(conn, SQLITE)

    def classic_commits(self, group: str) -> list[tuple[str, int, int | None, int | None, str]]:
        with self._read() as conn:
            return commits(conn, SQLITE, group)
