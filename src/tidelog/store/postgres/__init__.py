"""The PostgreSQL store: many processes and machines share one log.

psycopg 3 with its connection pool. One module a role, each a subclass of
`PostgresBase` (the pool, transactions, the partition-id cache);
`PostgresStore` composes them. Needs the `postgres` extra.
"""

from __future__ import annotations

from ..base import (
    ClassicGroupStore,
    Cleanable,
    JobStore,
    NamedConsumers,
    QueueUpkeep,
    Reclaimable,
    Store,
    Transactional,
    Watchable,
)
from ..failures import translate_errors
from .base import DRIVER_ERROR, PostgresBase, store_failure
from .classic import PostgresClassicGroups
from .consumers import PostgresConsumers
from .groups import PostgresGroups
from .jobs import PostgresJobs
from .log import PostgresLog
from .outbox import PostgresOutbox
from .queues import PostgresQueues
from .retention import PostgresRetention
from .upkeep import PostgresUpkeep


@translate_errors(DRIVER_ERROR, store_failure)
class PostgresStore(
    PostgresLog,
    PostgresQueues,
    PostgresConsumers,
    PostgresGroups,
    PostgresClassicGroups,
    PostgresRetention,
    PostgresOutbox,
    PostgresUpkeep,
    PostgresJobs,
    Store,
    NamedConsumers,
    QueueUpkeep,
    ClassicGroupStore,
    Cleanable,
    JobStore,
    Watchable,
    Reclaimable,
    Transactional,
):
    """The Store protocol on a PostgreSQL database (or a schema in one)."""


__all__ = ["PostgresBase", "PostgresStore"]
