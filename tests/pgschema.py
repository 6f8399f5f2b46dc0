"""A PostgreSQL schema of its own for a test, dropped afterwards.

Tests use the server at TIDELOG_TEST_PG (default
postgresql://postgres@127.0.0.1:5432/test). Without one they skip on a laptop
and fail under CI (see `need_service`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
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
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        need_service("psycopg", "pip install 'tidelog[postgres]'")
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        need_service("PostgreSQL", f"{str(e).strip()}; {HOW}")
    name = f"tl_{secrets.token_hex(6)}"
    with admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        try:
            yield with_search_path(PG_URL, name)
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
