"""The record of idempotent writes (table txns): what a txn id appended, in the same transaction."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..base import Replayed
from .base import _now_ms


def replayed(db: sqlite3.Connection, txn: str, since: int = 0) -> Replayed | None:
    """What the idempotent write `txn` appended, if it was recorded at `since`
    or later; an older record is dropped (this write takes the id over)."""
    row = db.execute("SELECT result FROM txns WHERE id = ?", (txn,)).fetchone()
    if row is None:
        return None
    ts, done = json.loads(row[0])
    if ts >= since:
        return Replayed(ts, [tuple(b) for b in done])
    db.execute("DELETE FROM txns WHERE id = ?", (txn,))
    return None


def record(db: sqlite3.Connection, txn: str, stamp: int | None, done: list[list[Any]]) -> None:
    """Remember what the idempotent write `txn` appended (in its transaction)."""
    db.execute(
        "INSERT INTO txns(id, result, created) VALUES (?, ?, ?)", (txn, json.dumps([stamp, done]), _now_ms())
    )
