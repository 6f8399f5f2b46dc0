"""What both SQL stores do alike when a receive picks among new records,
and when queue stats tell the age of the oldest available one.

The rows come from each store's own SQL; the order they are picked in is
the contract's (`QueueStore.queue_receive`), so it is written once here.
A new record is (offset, ts, value, meta); a candidate is (-priority, due,
seq, partition, offset, deliveries, record or None for a state row, key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Picking:
    """The core's callbacks for one receive (see `QueueStore.queue_receive`)."""

    now: int
    due_of: Callable[[int, bytes | None], int]
    priority_of: Callable[[bytes | None], int] | None = None
    key_of: Callable[[bytes | None], bytes | None] | None = None

    def key(self, record: tuple[Any, ...]) -> bytes | None:
        """The record's ordering key: None in an unordered group, or without a key."""
        return self.key_of(record[3]) if self.key_of is not None and record[3] is not None else None

    def neg_priority(self, record: tuple[Any, ...]) -> int:
        """Minus the priority of a new record."""
        return -self.priority_of(record[3]) if self.priority_of is not None and record[3] is not None else 0

    def mark_new(
        self,
        rows: list[tuple[Any, ...]],
        partition: int,
        held: Callable[[list[bytes]], set[bytes]],
        candidates: list[tuple[Any, ...]],
        limit: int,
    ) -> list[tuple[Any, ...]]:
        """New records of one partition, in offset order, as (offset, due, -priority, record or None when delayed, key); the
        deliverable ones are added to `candidates`. `held(keys)` says which
        of `keys` have a record waiting or in flight in the group (the
        store's query; asked a few keys at a time, as the scan needs them):
        a record of such a key is not a candidate, and neither is any record
        after the first of its key here.

        Without a priority among them, records past the first `limit`
        candidates cannot be taken (the batch is full of older ones), so
        they are not looked at."""
        minus_of = [self.neg_priority(row) for row in rows]
        # Where the records with a priority end: past it, stop at `limit` candidates.
        ranked = max((i for i, m in enumerate(minus_of) if m), default=-1)
        found = 0
        running = 0
        marked: list[tuple[Any, ...]] = []
        blocked: set[bytes] = set()
        asked: set[bytes] = set()
        keys: dict[int, bytes | None] = {}  # by row index, read as the scan gets there
        for i, (row, minus) in enumerate(zip(rows, minus_of)):
            if found >= limit and i > ranked:
                break
            key = keys[i] if i in keys else self.key(row)
            if key is not None and key not in asked:
                for j in range(i, min(len(rows), i + max(limit, 8))):
                    if j not in keys:
                        keys[j] = self.key(rows[j])
                ask = {k for k in keys.values() if k is not None} - asked
                blocked |= held(list(ask))
                asked |= ask
            due = row[1] if row[3] is None else self.due_of(row[1], row[3])
            if due > self.now:
                marked.append((row[0], due, minus, None, key))  # delayed: not yet deliverable
            else:
                # A new record is never due before an older one of its partition.
                running = max(running, due)
                marked.append((row[0], running, minus, row, key))
                if key is None or key not in blocked:
                    candidates.append((minus, running, 0, partition, row[0], 0, row, key))
                    found += 1
            if key is not None:
                blocked.add(key)  # later records of the key wait for this one
        return marked


class HeldKeys:
    """Which ordering keys have a record in the group's state, per partition.

    `query(pairs)` is the store's statement: of (partition, key) pairs, the
    ones held. A receive asks once for the first records of every partition
    (`prefetch`); a scan that goes further asks again, a few keys at a time.
    """

    def __init__(self, query: Callable[[list[tuple[int, bytes]]], set[tuple[int, bytes]]]):
        self._query = query
        self._asked: set[tuple[int, bytes]] = set()
        self._held: set[tuple[int, bytes]] = set()

    def prefetch(self, picking: Picking, rows: dict[int, list[tuple[Any, ...]]], limit: int) -> None:
        """Ask at once about the keys of the first records of each partition."""
        if picking.key_of is None:
            return
        pairs = {
            (partition, key)
            for partition, part in rows.items()
            for key in map(picking.key, part[: max(limit, 8)])
            if key is not None
        }
        if pairs:
            self._held |= self._query(list(pairs))
            self._asked |= pairs

    def of(self, partition: int) -> Callable[[list[bytes]], set[bytes]]:
        """`held` for `Picking.mark_new` on one partition."""

        def held(keys: list[bytes]) -> set[bytes]:
            new = [(partition, k) for k in keys if (partition, k) not in self._asked]
            if new:
                self._held |= self._query(new)
                self._asked.update(new)
            return {k for k in keys if (partition, k) in self._held}

        return held


def to_park(
    marked: list[tuple[Any, ...]], partition: int, chosen: set[tuple[int, int]]
) -> list[tuple[int, int, int, bytes | None]]:
    """(offset, due, priority, key) of the new records of a partition that
    enter the group's state without a lease: those passed over before the
    last one taken, and the delayed ones in the run right after it (the
    cursor moves past them)."""
    last = max((o for p, o in chosen if p == partition), default=0)
    out = []
    for offset, due, minus, record, key in marked:
        if (partition, offset) in chosen:
            continue
        if offset > last and record is not None:
            break
        out.append((offset, due, -minus, key))
    return out


def first_available(
    rows: Iterable[tuple[int, bytes | None]], due_of: Callable[[int, bytes | None], int]
) -> int | None:
    """The earliest time one of these records became available, or None.

    `rows` are (timestamp, meta) of records waiting in a group's state,
    oldest append first. A record became available at `due_of(ts, meta)`
    (its append, or its deliver-at), whatever happened since: a nack, an
    expired lease or a delay on retry does not make it younger, so a record
    nacked again and again keeps its age (queue stats' oldest available age).
    Stops at the first record appended after the earliest time found.
    """
    best: int | None = None
    for ts, meta in rows:
        if best is not None and ts >= best:
            break
        since = due_of(ts, meta)
        best = since if best is None else min(best, since)
    return best
