"""A whole store as data, to show that a refused request changed nothing.

`dump(url)` reads every table of a SQLite file or of a PostgreSQL schema (the
URLs the tests' fixtures hand out) on a connection of its own, and returns
{table: sorted rows}. Compare a dump taken before a refused request with one
taken after: `assert dump(url) == before`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the store at `url`, by table."""
    if url.startswith(("postgresql://", "postgres://")):
        return _dump_postgres(url)
    return _dump_sqlite(url.removeprefix("sqlite:///"))


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


def _dump_sqlite(path: str) -> dict[str, list[tuple[Any, ...]]]:
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        out = {t: _sorted(list(conn.execute(f'SELECT * FROM "{t}"'))) for t in tables}
        out["user_version"] = [conn.execute("PRAGMA user_version").fetchone()]
        return out
    finally:
        conn.close()


def _dump_postgres(url: str) -> dict[str, list[tuple[Any, ...]]]:
    import psycopg
    from psycopg import sql

    options = dict(parse_qsl(urlsplit(url).query)).get("options", "")
    schema = options.removeprefix("-csearch_path=") or "public"
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
                (schema,),
            )
        ]
        return {
            t: _sorted(
                list(
                    conn.execute(
                        sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(t))
                    )
                )
            )
            for t in tables
        }
