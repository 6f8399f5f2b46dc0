"""A whole store as data, to show that a refused request changed nothing.

`dump(url)` reads every table of a SQLite file or of a PostgreSQL schema (the
URLs the tests' fixtures hand out) on a connection of its own (kept for the
next dump of the same PostgreSQL schema), and returns
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


# The last schema's connection, kept as (url, connection): a new one costs the server a
# backend and a cold catalog cache, about 10 ms of its CPU, and the fuzz tests dump twice
# a case.
_kept: tuple[str, Any] | None = None


def _pg_connection(url: str) -> Any:
    global _kept
    import psycopg

    if _kept is not None and _kept[0] == url and not _kept[1].closed:
        return _kept[1]
    if _kept is not None:
        _kept[1].close()
    _kept = (url, psycopg.connect(url, autocommit=True))
    return _kept[1]


def _dump_postgres(url: str) -> dict[str, list[tuple[Any, ...]]]:
    import psycopg

    try:
        return _read_postgres(_pg_connection(url), url)
    except psycopg.OperationalError:  # the kept connection died (a server restart): once more
        _pg_connection(url).close()
        return _read_postgres(_pg_connection(url), url)


def _read_postgres(conn: Any, url: str) -> dict[str, list[tuple[Any, ...]]]:
    from psycopg import sql

    options = dict(parse_qsl(urlsplit(url).query)).get("options", "")
    schema = options.removeprefix("-csearch_path=") or "public"
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname",
            (schema,),
        )
    ]
    return {
        t: _sorted(
            list(
                conn.execute(sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(t)))
            )
        )
        for t in tables
    }
