"""The commit-metadata schema step (SQLite 13, PostgreSQL 9: a Kafka commit's metadata as its
UTF-8 bytes) runs forward on a store with commits in it: metadata written as text before it
reads back the same, and any string Kafka keeps, a NUL included, is kept after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tidelog
from pgschema import postgres_schema
from tidelog import classic_groups as cg
from tidelog.store import schema

BEFORE = {"sqlite": 12, "postgres": 8}  # the schema before the step
NOW = 1_800_000_000_000


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "old.db")
    else:
        with postgres_schema() as pg:
            yield pg


def execute(url: str, sql: str, params: tuple[object, ...]) -> None:
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql, params)
    else:
        import sqlite3

        with sqlite3.connect(url) as conn:
            conn.execute(sql, params)


def commit(log, group, partition, metadata):
    step = cg.commit("", -1, [("t", partition, 1, metadata)], NOW)
    assert cg.run(log.store, group, NOW, step).partitions == [None]


def test_metadata_from_before_the_step_reads_back_and_a_nul_is_kept(url, monkeypatch):
    dialect = "postgres" if url.startswith("postgresql") else "sqlite"
    migrations = schema.migrations
    monkeypatch.setattr(schema, "migrations", lambda d: [m for m in migrations(d) if m[0] <= BEFORE[d]])
    monkeypatch.setattr(schema, "latest", lambda d: BEFORE[d])
    with tidelog.open(url) as log:
        log.create_topic("t", 3)
        log.producer().send_batch("t", [b"a", b"b"], partition=0)
        log.producer().send_batch("t", [b"a", b"b"], partition=1)
        commit(log, "tool", 0, "")
        commit(log, "tool", 1, "")
    # The metadata as the store held it before the step: text (today's code writes bytes).
    # SQLite's text could hold a NUL; PostgreSQL's could not.
    old = {"sqlite": "state é😀\x00", "postgres": "state é😀"}[dialect]
    t, p = ("", "?") if dialect == "sqlite" else ("tidelog_", "%s")
    for partition, text in ((0, old), (1, "")):
        execute(
            url,
            f"UPDATE {t}classic_commits SET metadata = {p} "
            f"WHERE pid = (SELECT id FROM {t}partitions WHERE partition = {p})",
            (text, partition),
        )
    monkeypatch.undo()
    with tidelog.open(url) as log:
        assert log.store.classic_commits("tool") == [("t", 0, 1, 1, old), ("t", 1, 1, 1, "")]
        log.producer().send_batch("t", [b"a", b"b"], partition=2)
        commit(log, "tool", 2, "confluent\x00")
        assert log.store.classic_commits("tool")[2] == ("t", 2, 1, 1, "confluent\x00")
    assert schema.latest(dialect) > BEFORE[dialect]
