"""The queue-ordering schema step (SQLite 7, PostgreSQL 4) runs forward on a
log with queue state in it: rows written before it get priority 0, no key
and no tie-breaker, and keep being served."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

import tidelog
from pgschema import postgres_schema
from tidelog.store import schema


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "old.db")
    else:
        with postgres_schema() as pg:
            yield pg


def dialect(url: str) -> str:
    return "postgres" if url.startswith("postgresql") else "sqlite"


def execute(url: str, sql: str) -> None:
    if dialect(url) == "sqlite":
        with sqlite3.connect(url) as conn:
            conn.execute(sql)
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)


def test_queue_state_from_before_the_step_is_served(url, monkeypatch):
    before = 6 if dialect(url) == "sqlite" else 3  # the schema before the ordering step
    migrations = schema.migrations
    monkeypatch.setattr(schema, "migrations", lambda d: [m for m in migrations(d) if m[0] <= before])
    monkeypatch.setattr(schema, "latest", lambda d: before)
    clock = Clock()
    with tidelog.open(url, clock=clock) as log:
        log.producer().send_batch("jobs", [b"a", b"b", b"c"])
        log.queue("jobs")  # the group and its cursor, as the old schema holds them
    # Record 1 leased before the upgrade (its lease ends at now + 1 s), cursor past it.
    table, cursors, offset = (
        ("queue_state", "queue_cursors", "offset")
        if dialect(url) == "sqlite"
        else ("tidelog_queue_state", "tidelog_queue_cursors", '"offset"')
    )
    execute(
        url,
        f"INSERT INTO {table} (grp, pid, {offset}, due, deliveries, receipt) "
        f"SELECT 'jobs', pid, 1, {clock.now + 1000}, 1, 'r0' FROM {cursors} WHERE grp = 'jobs'",
    )
    execute(url, f"UPDATE {cursors} SET scanned = 1 WHERE grp = 'jobs'")
    monkeypatch.undo()
    with tidelog.open(url, clock=clock) as log:
        q = log.queue("jobs")
        assert q.ordering == "none"
        b, c = q.receive(max_messages=10)
        assert (b.value, c.value) == (b"b", b"c")
        clock.now += 2000  # the old lease expired
        (a,) = q.receive(max_messages=10)
        assert (a.value, a.delivery_count) == (b"a", 2)
        q.nack(a, back=True)
        q.nack_many([c, b])  # to the front, by offset among themselves
        assert [d.value for d in q.receive(max_messages=10)] == [b"b", b"c", b"a"]
