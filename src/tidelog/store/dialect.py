"""How each SQL store spells the statements the two stores share.

Most of what the SQLite and PostgreSQL stores run differs only in two
spellings: PostgreSQL's tables carry a `tidelog_` prefix (they share a schema
with the application's), and the drivers mark parameters with `?` (sqlite3)
or `%s` (psycopg). A shared statement is written once, with `{t}` before each
table name and `?` for each parameter, and a `Dialect` turns it into its
store's text (once: the result is cached). Statements whose shape really
differs (unnest vs executemany, FOR UPDATE, array_agg) stay in the dialect's
own modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Connection(Protocol):
    """A connection (or transaction) the shared statements run on."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...


class Dialect:
    """One store's spelling of the shared statements."""

    def __init__(self, *, prefix: str, mark: str, any_of: str):
        self.prefix = prefix
        self.mark = mark
        self._any_of = any_of  # "IN" (a list of marks) or "ANY" (one array parameter)
        self._texts: dict[str, str] = {}

    def __call__(self, statement: str) -> str:
        """The store's text of `statement` ({t} before tables, ? for parameters)."""
        text = self._texts.get(statement)
        if text is None:
            text = self._texts[statement] = statement.replace("{t}", self.prefix).replace("?", self.mark)
        return text

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """`column` is one of `values`: the condition's text and its parameters."""
        if self._any_of == "ANY":
            return f"{column} = ANY({self.mark})", (list(values),)
        return f"{column} IN ({','.join([self.mark] * len(values))})", tuple(values)


SQLITE = Dialect(prefix="", mark="?", any_of="IN")
POSTGRES = Dialect(prefix="tidelog_", mark="%s", any_of="ANY")
