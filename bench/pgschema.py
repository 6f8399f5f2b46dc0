"""A fresh PostgreSQL schema for a benchmark run, dropped afterwards (shared by the bench scripts)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def postgres_schema(url: str, prefix: str = "bench") -> Iterator[str | None]:
    """A URL whose tables live in a fresh schema on the server at `url`, or
    None when psycopg is missing or the server does not answer."""
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        yield None
        return
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=3)
    except psycopg.Error:
        yield None
        return
    name = f"{prefix}_{secrets.token_hex(4)}"
    with admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        try:
            yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{name}"
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
