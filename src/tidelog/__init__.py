"""tidelog: a durable, partitioned message log and work queue.

import tidelog
log = tidelog.open("tidelog.db")
log.producer().send("orders", {"orderId": 1})
"""

from __future__ import annotations

from collections.abc import Callable

from .config import check_durability
from .errors import (
    Closed,
    ConfigurationError,
    Conflict,
    GroupConflict,
    GroupError,
    GroupExists,
    InvalidName,
    InvalidRequest,
    InvalidStreamId,
    InvalidValue,
    LeaseLost,
    MessageTooLarge,
    NotAssigned,
    NotFound,
    OffsetOutOfRange,
    StaleGeneration,
    StoreError,
    StreamIdTooSmall,
    TidelogError,
    TopicConflict,
    UnknownGroup,
    UnknownPartition,
    UnknownTopic,
    WrongType,
)
from .groups import Group, GroupConsumer
from .jobs import Jobs
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
    clock: Callable[[], int] | None = None,
) -> Log:
    """Open a log.

    `url` is a file path or `sqlite:///path` (the embedded default),
    `:memory:`, or another store's URL. `durability="normal"` survives a
    killed process; `"full"` also survives a power loss, at the cost of an
    fsync per commit.
    """
    check_durability(durability)
    return Log(open_store(url, durability=durability), auto_create=auto_create, clock=clock)


__all__ = [
    "BatchSent",
    "Closed",
    "ConfigurationError",
    "Conflict",
    "Consumer",
    "Delivery",
    "Group",
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
    "Sent",
    "StaleGeneration",
    "StoreError",
    "StreamIdTooSmall",
    "TidelogError",
    "TopicConflict",
    "TopicDescription",
    "TopicInfo",
    "UnknownGroup",
    "UnknownPartition",
    "UnknownTopic",
    "WrongType",
    "open",
]
