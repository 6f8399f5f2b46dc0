"""What both SQL stores do alike when a receive picks among new records.

The rows come from each store's own SQL; the order they are picked in is
the contract's (`QueueStore.queue_receive`), so it is written once here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def neg_priority(record: tuple[Any, ...], priority_of: Callable[[bytes | None], int] | None) -> int:
    """Minus the priority of a new record (offset, ts, value, meta)."""
    return -priority_of(record[3]) if priority_of is not None and record[3] is not None else 0


def mark_new(
    rows: list[tuple[Any, ...]],
    now: int,
    due_of: Callable[[int, bytes | None], int],
    priority_of: Callable[[bytes | None], int] | None,
    partition: int,
    candidates: list[tuple[Any, ...]],
) -> list[tuple[Any, ...]]:
    """New records (offset, ts, value, meta) of one partition, in offset order,
    as (offset, due, -priority, record or None when delayed); the deliverable
    ones are added to `candidates`."""
    running = 0
    marked: list[tuple[Any, ...]] = []
    for row in rows:
        due = row[1] if row[3] is None else due_of(row[1], row[3])
        minus = neg_priority(row, priority_of)
        if due > now:
            marked.append((row[0], due, minus, None))  # delayed: not yet deliverable
            continue
        # A new record is never due before an older one of its partition.
        running = max(running, due)
        marked.append((row[0], running, minus, row))
        # (-priority, due, seq, partition, offset, deliveries, record)
        candidates.append((minus, running, 0, partition, row[0], 0, row))
    return marked


def to_park(
    marked: list[tuple[Any, ...]], partition: int, chosen: set[tuple[int, int]]
) -> list[tuple[int, int, int]]:
    """(offset, due, priority) of the new records of a partition that enter the
    group's state without a lease: those passed over before the last one taken,
    and the delayed ones in the run right after it (the cursor moves past them)."""
    last = max((o for p, o in chosen if p == partition), default=0)
    out = []
    for offset, due, minus, record in marked:
        if (partition, offset) in chosen:
            continue
        if offset > last and record is not None:
            break
        out.append((offset, due, -minus))
    return out
