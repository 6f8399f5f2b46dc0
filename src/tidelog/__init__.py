"""tidelog: a durable, partitioned message log and work queue.

import tidelog
log = tidelog.open("tidelog.db")
log.producer().send("orders", {"orderId": 1})
"""

from __future__ import annotations

from collections.abc import Callable

from .config import check_durability
from .deadletters import DeadLetter, Redriven
from .errors import (
    Closed,
    ConfigurationError,
    Conflict,
    GroupActive,
    GroupConflict,
    GroupError,
    GroupExists,
    InvalidName,
    InvalidRequest,
    InvalidStreamId,
    InvalidValue,
    JobCancelled,
    JobConflict,
    JobFailed,
    LeaseLost,
    MessageTooLarge,
    NotAssigned,
    NotFound,
    OffsetOutOfRange,
    ResultTimeout,
    StaleGeneration,
    StoreError,
    StoreFull,
    StreamIdTooSmall,
    TidelogError,
    TopicConflict,
    UnknownGroup,
    UnknownJob,
    UnknownPartition,
    UnknownTopic,
    WrongEventLoop,
    WrongType,
)
from .groups import Group, GroupConsumer
from .jobs import JobRef, Jobs
from .log import Consumer, GroupLag, Log, Producer
from .queues import Delivery, Queue
from .records import BatchSent, Message, NewRecord, Prepared, Sent
from .store import GroupOffset, PartitionInfo, TopicInfo, open_store
from .topics import TopicDescription

__version__ = "0.1.0"


def open(
    url: str = "tidelog.db",
    *,
    durability: str = "normal",
    auto_create: bool = True,
    default_partitions: int = 1,
    clock: Callable[[], int] | None = None,
) -> Log:
    """Open a log.

    `url` is a file path or `sqlite:///path` (the embedded default),
    `:memory:`, or another store's URL. `durability="normal"` survives a
    killed process; `"full"` also survives a power loss, at the cost of an
    fsync per commit.

    `auto_create` (on by default): a write to a missing topic creates it with
    the default settings and `default_partitions` partitions; off, it raises
    UnknownTopic. Reads never create a topic.
    """
    check_durability(durability)
    store = open_store(url, durability=durability)
    try:
        return Log(store, auto_create=auto_create, default_partitions=default_partitions, clock=clock)
    except BaseException:
        store.close()
        raise


__all__ = [
    "BatchSent",
    "Closed",
    "ConfigurationError",
    "Conflict",
    "Consumer",
    "DeadLetter",
    "Delivery",
    "Group",
    "GroupActive",
    "GroupConsumer",
    "GroupError",
    "GroupConflict",
    "GroupExists",
    "GroupLag",
    "GroupOffset",
    "InvalidName",
    "InvalidRequest",
    "InvalidStreamId",
    "InvalidValue",
    "JobCancelled",
    "JobConflict",
    "JobFailed",
    "JobRef",
    "Jobs",
    "LeaseLost",
    "Log",
    "Message",
    "MessageTooLarge",
    "NewRecord",
    "NotAssigned",
    "NotFound",
    "OffsetOutOfRange",
    "PartitionInfo",
    "Prepared",
    "Producer",
    "Queue",
    "Redriven",
    "ResultTimeout",
    "Sent",
    "StaleGeneration",
    "StoreError",
    "StoreFull",
    "StreamIdTooSmall",
    "TidelogError",
    "TopicConflict",
    "TopicDescription",
    "TopicInfo",
    "UnknownGroup",
    "UnknownJob",
    "UnknownPartition",
    "UnknownTopic",
    "WrongEventLoop",
    "WrongType",
    "open",
]
