"""A PostgreSQL schema of its own for a test, dropped afterwards.

Tests use the server at TIDELOG_TEST_PG (default
postgresql://postgres@127.0.0.1:5432/test). Without one they skip on a laptop
and fail under CI (see `need_service`).
"""

from __future__ import annotations

import atexit
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from conftest import need_service

PG_URL = os.environ.get("TIDELOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
HOW = (
    "start PostgreSQL on 127.0.0.1:5432 with a database 'test' that user 'postgres' may use, "
    "or point TIDELOG_TEST_PG at one (postgresql://user@host:port/db)"
)


def with_search_path(url: str, schema: str) -> str:
    """`url` with its connections' search_path set to `schema`."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def postgres_schema() -> Iterator[str]:
    """Yield a URL whose tables live in a fresh schema; drop the schema afterwards."""
    with _admin() as admin:
        name = _create(admin)
        try:
            yield with_search_path(PG_URL, name)
        finally:
            admin.execute(f'DROP SCHEMA "{name}" CASCADE')


def _admin() -> Any:
    """An autocommit connection to the tests' server (a missing driver or
    server skips the test on a laptop and fails it under CI)."""
    try:
        import psycopg
    except ImportError:
        need_service("psycopg", "pip install 'tidelog[postgres]'")
    try:
        return psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        need_service("PostgreSQL", f"{str(e).strip()}; {HOW}")


def _create(admin: Any) -> str:
    """A new schema's name (random: tests run in parallel)."""
    name = f"tl_{secrets.token_hex(6)}"
    admin.execute(f'CREATE SCHEMA "{name}"')
    return name


# Schemas of this process that tidelog has migrated, emptied and free for the next
# test, with what they held when new (tables, sequences, schema versions): making,
# migrating and dropping a schema costs PostgreSQL's server about 0.09 s of CPU, and
# the suite makes hundreds; emptying one costs about 0.003 s (docs/development.md).
_FREE: list[tuple[str, tuple[Any, ...]]] = []


def _shape(admin: Any, name: str) -> tuple[Any, ...]:
    tables = admin.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (name,))
    sequences = admin.execute(
        "SELECT sequencename FROM pg_sequences WHERE schemaname = %s ORDER BY 1", (name,)
    )
    functions = admin.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = %s ORDER BY 1",
        (name,),
    )
    tables, sequences, functions = tables.fetchall(), sequences.fetchall(), functions.fetchall()
    versions = admin.execute(f'SELECT version FROM "{name}".tidelog_version ORDER BY 1').fetchall()
    return (tuple(tables), tuple(sequences), tuple(functions), tuple(versions))


def _empty(admin: Any, name: str, shape: tuple[Any, ...]) -> bool:
    """Empty a tidelog schema for the next test, as new: every row gone, every
    identity back at its start. False (nothing done) when the test changed its
    shape (a table, a sequence, a function or a schema version more or less) or
    something still holds a lock on it: the caller drops it instead."""
    import psycopg

    try:
        with admin.transaction():
            admin.execute("SET LOCAL lock_timeout = '2s'")
            if _shape(admin, name) != shape:
                return False
            for (table,) in shape[0]:
                if table != "tidelog_version":
                    admin.execute(f'DELETE FROM "{name}"."{table}"')
            for (sequence,) in shape[1]:
                admin.execute(f'ALTER SEQUENCE "{name}"."{sequence}" RESTART')
    except psycopg.Error:
        return False
    return True


@atexit.register
def _drop_free() -> None:
    """Drop this process's free schemas as it exits."""
    if not _FREE:
        return
    with _admin() as admin:
        while _FREE:
            admin.execute(f'DROP SCHEMA "{_FREE.pop()[0]}" CASCADE')


@contextmanager
def tidelog_schema() -> Iterator[str]:
    """Yield a URL of a schema holding tidelog's tables, empty: a schema an
    earlier test of this process used and that was emptied (`_empty`), or a
    fresh one migrated now. Afterwards it is emptied for the next, or dropped."""
    import tidelog

    with _admin() as admin:
        if _FREE:
            name, shape = _FREE.pop()
        else:
            name = _create(admin)
            tidelog.open(with_search_path(PG_URL, name)).close()  # tidelog's migrations
            shape = _shape(admin, name)
        try:
            yield with_search_path(PG_URL, name)
        finally:
            if _empty(admin, name, shape):
                _FREE.append((name, shape))
            else:
                admin.execute(f'DROP SCHEMA "{name}" CASCADE')


def vacuum() -> None:
    """VACUUM the tests' database, when there is one to reach.

    A run makes and drops about a thousand schemas, and each leaves dead
    rows in the system catalogs (pg_attribute, pg_depend, pg_class...). Where
    autovacuum is off, as on the project's test machine, they pile up run
    after run, and every new connection and catalog lookup reads through
    them: after a day of runs pg_attribute held a million dead rows (223 MB),
    and a run cost the server 149 CPU seconds where a clean one costs 67. A
    VACUUM after each run lets the next one reuse the space (about a second)."""
    try:
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute("VACUUM")
    except Exception:  # no server, no driver: nothing piled up there
        pass
