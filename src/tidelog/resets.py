"""Resetting a stream group's committed offsets: to the earliest record, the
latest, an offset, or a time.

As Kafka's `kafka-consumer-groups --reset-offsets`, a reset is refused while
the group has live members: a member would go on committing from where it
is and undo the reset. Stop the consumers (or wait out their session), then
reset. A reset moves the committed offset backwards too (it is a `seek`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .bounds import MAX_OFFSET, check_time_ms
from .config import check_int, check_name
from .errors import GroupActive, InvalidRequest, OffsetOutOfRange, UnknownGroup, UnknownPartition
from .store.base import NamedConsumers, PartitionInfo

if TYPE_CHECKING:
    from .log import GroupLag, Log

TARGETS = ("earliest", "latest", "offset", "time")


def offset_for_time(log: Log, topic: str, partition: int, first: int, last: int, timestamp: int) -> int:
    """The first offset in [first, last + 1] whose record was appended at or
    after `timestamp` (ms); last + 1 when none was. Append times rise with
    offsets, so a binary search reads log2(records) records of one."""
    lo, hi = first, last + 1
    while lo < hi:
        mid = (lo + hi) // 2
        found = log.read(topic, partition, after=mid - 1, limit=1)
        if not found or found[0].timestamp >= timestamp:
            hi = mid
        else:
            lo = found[0].offset + 1
    return lo


def _committed_for(log: Log, topic: str, p: PartitionInfo, to: str, value: Any) -> int:
    """The committed offset a reset sets on one partition (the next record read is this + 1)."""
    first = max(p.first_offset, 1)
    if to == "earliest":
        return first - 1
    if to == "latest":
        return p.last_offset
    if to == "offset":
        if value > p.last_offset:
            raise OffsetOutOfRange(
                f"offset {value} is past the end of {topic!r}/{p.partition} (last offset {p.last_offset})",
                first=p.first_offset,
                last=p.last_offset,
            )
        return int(value)
    return offset_for_time(log, topic, p.partition, first, p.last_offset, value) - 1


def plan_reset(
    log: Log, group: str, topic: str, to: str, value: int | None = None, partition: int | None = None
) -> list[tuple[int, int, int]]:
    """What `reset_offsets` would do, changing nothing: (partition, committed
    now, committed after) for each partition; the same checks and errors."""
    check_name("group", group)
    check_name("topic", topic)
    if to not in TARGETS:
        raise InvalidRequest(f"a reset goes to one of {', '.join(TARGETS)}, not {to!r}")
    if to in ("offset", "time"):
        if value is None:
            raise InvalidRequest(f"a reset to {to} needs a value ({'an offset' if to == 'offset' else 'ms'})")
        if to == "offset":
            check_int(to, value, 0, MAX_OFFSET)
        else:
            check_time_ms(to, value)
    elif value is not None:
        raise InvalidRequest(f"a reset to {to} takes no value")
    parts = log.describe(topic).partitions  # UnknownTopic
    if group not in log.groups():
        raise UnknownGroup(
            f"group {group!r} does not exist (a reset moves a group's offsets; it makes no group)"
        )
    if isinstance(log.store, NamedConsumers) and any(g == group for _, g in log.queue_groups()):
        raise InvalidRequest(
            f"{group!r} is a queue group: its progress is per record, not an offset (redrive dead letters instead)"
        )
    if partition is not None:
        check_int("partition", partition, 0)
        if partition >= len(parts):
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{len(parts) - 1}; partition {partition} does not exist"
            )
        parts = [parts[partition]]
    live = log.group(group).members()
    if live:
        raise GroupActive(
            f"group {group!r} has {len(live)} live member(s) ({', '.join(m.member for m in live[:3])}); "
            "stop them (or wait for their session to end) before resetting its offsets"
        )
    return [
        (
            p.partition,
            log.store.committed(group, topic, p.partition),
            _committed_for(log, topic, p, to, value),
        )
        for p in parts
    ]


def reset_offsets(
    log: Log, group: str, topic: str, to: str, value: int | None = None, partition: int | None = None
) -> list[GroupLag]:
    """Set `group`'s committed offsets on `topic` (every partition, or one).

    `to`: "earliest" (re-read all that is kept), "latest" (skip to the end),
    "offset" with `value` N (the next record read is N + 1), or "time" with
    `value` in ms since epoch (the next record read is the first appended at
    or after it). Refused with GroupActive while the group has live members;
    bad input changes nothing. Returns the group's new lag on the topic.
    """
    targets = plan_reset(log, group, topic, to, value, partition)  # every check, before any change
    consumer = log.consumer(group)
    for number, _, committed in targets:
        consumer.seek(topic, number, committed)
    wanted = {number for number, _, _ in targets}
    return [r for r in log.describe_group(group, [topic]) if r.topic == topic and r.partition in wanted]


__all__ = ["TARGETS", "offset_for_time", "plan_reset", "reset_offsets"]
