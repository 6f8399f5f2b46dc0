"""Positions in topics, as Spark's checkpoint keeps them.

A position is the next offset to read in each (topic, partition), as in
Spark's Kafka source; tidelog offsets start at 1, so a fresh partition's
position is 1 and "latest" is the last offset + 1. Spark stores positions
as JSON text and compares them as text, so `to_json` orders topics by name
and partitions by number: the same positions always give the same text.

Nothing here imports pyspark; the planning logic is plain Python over the
core API, testable without a Spark session.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ..errors import OffsetOutOfRange, UnknownPartition, UnknownTopic
from ..log import Log
from .options import EARLIEST, LATEST, Position, SourceOptions

TopicPartition = tuple[str, int]
Positions = dict[TopicPartition, int]


class Bounds(NamedTuple):
    """What a partition holds now: its first held offset and the next to be written."""

    first: int
    next: int


class OffsetRange(NamedTuple):
    """Offsets start <= offset < end of one partition: one Spark task's share."""

    topic: str
    partition: int
    start: int
    end: int


def to_json(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(value: Mapping[str, Mapping[str, int]]) -> Positions:
    return {(topic, int(p)): int(o) for topic, parts in value.items() for p, o in parts.items()}


# what a query reads --------------------------------------------------------------


def bounds(log: Log, options: SourceOptions, *, strict: bool) -> dict[TopicPartition, Bounds]:
    """The partitions a query reads, with what each holds now.

    `strict` (a batch query) makes a named topic or partition that does not
    exist an error; a stream instead waits for it to appear.
    """
    if options.subscribe_pattern is not None:
        pattern = re.compile(options.subscribe_pattern)
        wanted: dict[str, Iterable[int] | None] = {
            t.name: None for t in log.topics() if pattern.fullmatch(t.name)
        }
    elif options.assign is not None:
        wanted = dict(options.assign)
    else:
        wanted = dict.fromkeys(options.subscribe)
    out: dict[TopicPartition, Bounds] = {}
    for topic in sorted(wanted):
        try:
            held = log.offsets(topic)  # no record counts: the planner runs every trigger
        except UnknownTopic:
            if strict:
                raise
            continue
        numbers = wanted[topic]
        for p in held if numbers is None else ():
            out[(topic, p.partition)] = Bounds(p.first_offset, p.last_offset + 1)
        for n in numbers or ():
            if n >= len(held):
                if strict:
                    raise UnknownPartition(
                        f"topic {topic!r} has partitions 0..{len(held) - 1}; partition {n} does not exist"
                    )
                continue
            out[(topic, n)] = Bounds(held[n].first_offset, held[n].last_offset + 1)
    return out


def resolve(
    log: Log,
    position: Position,
    held: Mapping[TopicPartition, Bounds],
    *,
    default: str,
    timestamp: int | None = None,
) -> Positions:
    """Turn "earliest", "latest", a JSON offset map or a timestamp into positions.

    Partitions a JSON map leaves out take `default`. An offset past what a
    partition holds is refused, as Kafka's source refuses it.
    """
    if isinstance(position, dict):
        for topic, parts in position.items():
            for p in parts:
                if (topic, p) not in held:
                    raise UnknownPartition(f"offsets name {topic}/{p}, which this query does not read")
    out: Positions = {}
    for tp, b in held.items():
        if timestamp is not None:
            out[tp] = offset_for_time(log, tp, b, timestamp)
            continue
        marker = position.get(tp[0], {}).get(tp[1]) if isinstance(position, dict) else position
        if marker is None:
            marker = default
        if marker in ("earliest", EARLIEST):
            out[tp] = b.first
        elif marker in ("latest", LATEST):
            out[tp] = b.next
        elif isinstance(marker, int):
            if marker > b.next:
                raise OffsetOutOfRange(
                    f"offset {marker} for {tp[0]}/{tp[1]} is past its end (next offset {b.next})",
                    first=b.first,
                    last=b.next - 1,
                )
            out[tp] = int(marker)
    return out


def offset_for_time(log: Log, tp: TopicPartition, b: Bounds, timestamp: int) -> int:
    """The first offset whose record was appended at or after `timestamp` (ms).

    Append times rise with offsets, so a binary search over the partition
    finds it in log2(records) reads of one record each.
    """
    lo, hi = b.first, b.next  # the answer lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        found = log.read(tp[0], tp[1], after=mid - 1, limit=1)
        if not found or found[0].timestamp >= timestamp:
            hi = mid
        else:
            lo = found[0].offset + 1
    return lo


# admission control and planning ------------------------------------------------------


def admit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_records: int
) -> Positions:
    """Advance at most `max_records` in all, shared in proportion to backlog.

    Each partition gets its share rounded down; the records left over go one
    each to the partitions with the largest fractions (ties by name), so the
    total is exactly `max_records` when the backlog is larger.
    """
    backlog = {tp: max(0, end - start.get(tp, 1)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    grant = {tp: max_records * n // total for tp, n in backlog.items()}
    left = max_records - sum(grant.values())
    by_fraction = sorted(backlog, key=lambda tp: (-(max_records * backlog[tp] % total), tp))
    for tp in by_fraction[:left]:
        grant[tp] += 1
    return {tp: start.get(tp, 1) + grant[tp] for tp in latest}


def plan(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], min_partitions: int | None
) -> list[OffsetRange]:
    """Ranges to read, one per partition with records in [start, end); with
    `min_partitions`, long ranges are cut into pieces of about equal size so
    that Spark runs at least that many tasks."""
    ranges = [
        OffsetRange(tp[0], tp[1], start.get(tp, 1), e)
        for tp, e in sorted(end.items())
        if e > start.get(tp, 1)
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        size = r.end - r.start
        pieces = max(1, min(size, -(-size * min_partitions // total)))  # ceil: at least the minimum
        for i in range(pieces):
            lo = r.start + size * i // pieces
            hi = r.start + size * (i + 1) // pieces
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out
