"""Stores: where records live. `open_store(url)` picks one by URL."""

from __future__ import annotations

from ..errors import ConfigurationError
from .base import GroupOffset, PartitionInfo, Store, TopicInfo

__all__ = ["GroupOffset", "PartitionInfo", "Store", "TopicInfo", "open_store", "scheme_of"]

LOCAL_SCHEMES = ("", "sqlite", "file")  # a SQLite file (or :memory:), this machine's only


def scheme_of(url: str) -> str:
    """The store URL's scheme, lower-cased; "" for a plain path or :memory:."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def open_store(url: str, durability: str = "normal") -> Store:
    """A file path or `sqlite:///path`, `:memory:`, `postgresql://...`, `http://...`."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"a store URL must be a non-empty string, not {url!r}")
    scheme = scheme_of(url)
    if scheme in LOCAL_SCHEMES:
        from .sqlite import SQLiteStore, path_from_url

        return SQLiteStore(path_from_url(url), durability=durability)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore  # raises ConfigurationError without the driver

        return PostgresStore(url, durability=durability)
    if scheme in ("http", "https"):
        import os

        from .http import HTTPStore

        # The server decides durability; the token may also be in the URL.
        return HTTPStore(url, token=os.environ.get("TIDELOG_TOKEN") or None)
    raise ConfigurationError(
        f"unsupported store URL {url!r}: use a file path, sqlite:///path, :memory:, postgresql://... or http://host:port"
    )
