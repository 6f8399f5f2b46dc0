"""The SQLite store: the embedded default, standard library only.

WAL with a busy timeout, `BEGIN IMMEDIATE` for every multi-statement write, so
several processes can share one file and no "database is locked" reaches a
user. One module a role, each a subclass of `SQLiteBase` (connections,
transactions, the partition-id cache); `SQLiteStore` composes them.
"""

from __future__ import annotations

import sqlite3

from ..base import (
    ClassicGroupStore,
    Cleanable,
    JobStore,
    KeepsWireBatches,
    NamedConsumers,
    QueueUpkeep,
    ReadsInto,
    Reclaimable,
    Store,
    Transactional,
    Watchable,
)
from ..failures import translate_errors
from .base import SQLiteBase, path_from_url, store_failure
from .classic import SQLiteClassicGroups
from .consumers import SQLiteConsumers
from .groups import SQLiteGroups
from .jobs import SQLiteJobs
from .log import SQLiteLog
from .outbox import SQLiteOutbox
from .queues import SQLiteQueues
from .retention import SQLiteRetention
from .upkeep import SQLiteUpkeep


@translate_errors(sqlite3.Error, store_failure)
class SQLiteStore(
    SQLiteLog,
    SQLiteQueues,
    SQLiteConsumers,
    SQLiteGroups,
    SQLiteClassicGroups,
    SQLiteRetention,
    SQLiteOutbox,
    SQLiteUpkeep,
    SQLiteJobs,
    Store,
    NamedConsumers,
    QueueUpkeep,
    ClassicGroupStore,
    Cleanable,
    JobStore,
    Watchable,
    Reclaimable,
    Transactional,
    ReadsInto,
    KeepsWireBatches,
):
    """The Store protocol on one SQLite file (or :memory:)."""


__all__ = ["SQLiteBase", "SQLiteStore", "path_from_url"]
