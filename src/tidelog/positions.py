"""Where a stream-group reader continues when its next record is gone.

Shared by the manual-assignment `Consumer` (log.py) and the automatic
`GroupConsumer` (groups.py): retention may remove what a group would read
next, and `auto_reset` says whether to skip to the earliest kept record, jump
to the end, or raise (Kafka's `auto.offset.reset`).
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidRequest, OffsetOutOfRange
from .store.base import Store

AUTO_RESET = ("earliest", "latest", "error")


def check_auto_reset(value: Any) -> str:
    """Validate an `auto_reset` option: one of AUTO_RESET."""
    if value not in AUTO_RESET:
        raise InvalidRequest(f"auto_reset must be one of {', '.join(AUTO_RESET)}, got {value!r}")
    return str(value)


def reset_position(store: Store, topic: str, partition: int, error: OffsetOutOfRange, policy: str) -> int:
    """The offset to read after when retention removed a reader's next record."""
    if policy == "error" or error.first is None:
        raise error
    if policy == "earliest":
        return error.first - 1
    return store.partitions(topic)[partition].last_offset
