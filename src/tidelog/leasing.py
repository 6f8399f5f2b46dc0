"""Which records a queue group's receive leases, written once for every store.

A SQL store runs each receive as one transaction and inside it calls the
policy the core handed it (`ReceivePolicy.lease`) over a handful of
primitives (`store.base.LeaseTx`), each a statement or two in its dialect;
the choosing is here, as the rebalance is in `coordinator.py`:

1. on a one-partition topic, the store's one-statement lease first, a record
   at a time while it holds (nothing in the group's state due, no record near
   the cursor with a meta blob, so no delay, priority or key to weigh);
2. the candidates: the group's state rows due now, and the next `window`
   new records of each partition past its cursor. A new record is due at its
   deliver-at header (else its append), never before an older one of its
   partition; with `ordered`, a record whose key has an earlier record in
   the group's state or among the new ones is not a candidate (one record a
   key in flight, in offset order);
3. highest priority first, then oldest due, then the tie-breaker of a nack
   to the back, then partition and offset; the first `limit` are leased;
4. new records passed over before the last one taken of their partition,
   and the delayed ones right after it, are parked in the group's state with
   their due time, priority and key (the cursor moves past them).

The policy is data (`ReceivePolicy`, frozen): the http:// store forwards its
fields over the wire and the server's core builds its own from the group's
config. Reading meta (deliver-at, priority, the key) is here too.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from . import bounds
from .bounds import DELIVER_AT, PRIORITY
from .records import F_HEADERS, decode_headers, decode_meta, meta_key
from .store.base import Leased, LeasePlan, LeaseTx, NewRecords, Park, Row, StateRow, Take, Waiting

# How many new records past a partition's cursor a receive looks at when it
# picks by priority. Records it looked at and passed over wait in the
# group's state, where priority orders them exactly; a record further back
# than this is not seen until the cursor comes within this distance.
PRIORITY_WINDOW = 100

_DELIVER_AT = DELIVER_AT.encode()
_PRIORITY = PRIORITY.encode()


def due_at(timestamp: int, meta: bytes | None) -> int:
    """When a new record becomes available to queue groups: its deliver-at
    header, held to at most a year past its append (see `bounds.deliver_at`)."""
    if meta is None or not meta[0] & F_HEADERS or _DELIVER_AT not in meta:
        return timestamp  # no delay header: the common case, without decoding
    headers = decode_meta(meta)[2]
    if headers:
        for name, value in decode_headers(headers):
            if name == DELIVER_AT:
                return bounds.deliver_at(timestamp, value)
    return timestamp


def priority_of(meta: bytes | None) -> int:
    """A new record's priority, from its header (0 without one)."""
    if meta is None or not meta[0] & F_HEADERS or _PRIORITY not in meta:
        return 0
    return _header_priority(meta)


# A receive looks at each record of its window again until the cursor passes
# it; the records of one sender often share their meta blob too.
@functools.lru_cache(maxsize=4096)
def _header_priority(meta: bytes) -> int:
    headers = decode_meta(meta)[2]
    if headers:
        for name, value in decode_headers(headers):
            if name == PRIORITY:
                return bounds.priority(value)
    return 0


def new_receipt() -> str:
    """A lease's receipt: opaque, unguessable."""
    return secrets.token_hex(12)


class Candidate(NamedTuple):
    """A record a receive may lease: a state row, or a new record (`row` of its partition's `NewRecords`).

    Candidates sort as tuples, in the contract's order: priority, due, a
    nack to the back's tie-breaker, partition, offset; then `row` puts a
    state row before a new record of the same offset (a Redis group's cursor
    moved back), so the comparison never reaches `key`.
    """

    rank: int  # minus the priority: the highest first
    due: int
    seq: int
    partition: int
    offset: int
    row: int  # -1: a state row
    deliveries: int
    key: bytes | None


# Built with tuple.__new__, not the NamedTuple's own __new__ (a Python
# function): with priorities a receive makes one for each new record it looks at.
_candidate = partial(tuple.__new__, Candidate)
_park = partial(tuple.__new__, Park)


class Looked(NamedTuple):
    """The new records of a partition a receive looked at (the first
    len(dues) of its `NewRecords`), as they would wait in the group's state;
    a column a field."""

    dues: list[int]
    delayed: list[bool]  # not due yet: never a candidate now
    ranks: list[int]  # of every record of the partition's window, looked at or not
    keys: list[bytes | None]


@dataclass(frozen=True, slots=True)
class ReceivePolicy:
    """How a queue group leases, as data (`store.base.LeasePolicy`)."""

    lease_ms: int  # the visibility timeout
    window: int = PRIORITY_WINDOW  # new records looked at past each cursor (at least the receive's limit)
    ordered: bool = False  # ordering "key": one record a key in flight, in offset order
    priority: bool = True  # higher priority first; False: every record counts as 0

    def key(self, meta: bytes | None) -> bytes | None:
        """A record's ordering key: None in an unordered group, or without a key."""
        return meta_key(meta) if self.ordered and meta is not None else None

    def rank(self, meta: bytes | None) -> int:
        """Minus a new record's priority (0 when priorities are off)."""
        return -priority_of(meta) if self.priority and meta is not None else 0

    def due(self, timestamp: int, meta: bytes | None) -> int:
        """When a new record becomes available."""
        return due_at(timestamp, meta)

    def lease(self, tx: LeaseTx, now: int, limit: int) -> tuple[list[Leased], int | None]:
        """Lease up to `limit` records over `tx` (see the module's docstring);
        returns them and, when fewer came, when the next waiting one falls due."""
        deadline = now + self.lease_ms
        window = max(limit, self.window)
        first: list[Leased] = []
        if tx.partitions == 1:
            first = tx.lease_next(now, deadline, [new_receipt() for _ in range(limit)], window)
            if len(first) == limit:
                return first, None
            # The general path takes the rest; its window ends where it would
            # have (each lease moved the cursor one on).
            done = len(first)
            limit, window = limit - done, window - done
        found = tx.candidates(now, limit, window, self.ordered)
        pool = [
            _candidate((-priority, due, seq, partition, offset, -1, deliveries, None))
            for partition, offset, due, seq, deliveries, priority in found.due
        ]
        held = _HeldKeys(tx)
        if self.ordered:
            held.prefetch(self, found.new, limit)
        looked = {
            partition: self._look(rows, partition, held, pool, limit, now)
            for partition, rows in found.new.items()
        }
        pool.sort()
        chosen: set[tuple[int, int]] = set()
        takes: list[Take] = []
        for rank, _, _, partition, offset, row, deliveries, key in pool[:limit]:
            chosen.add((partition, offset))
            new = None if row < 0 else found.new[partition].row(row)
            takes.append(Take(partition, offset, new_receipt(), deliveries, -rank, key, new))
        parks = [
            park
            for partition, seen in looked.items()
            for park in _parks(found.new[partition], seen, partition, chosen)
        ]
        leased, next_due = tx.apply(LeasePlan(takes, parks, deadline, now, limit))
        return first + leased, (next_due if len(leased) < limit else None)

    def _look(
        self,
        rows: NewRecords,
        partition: int,
        held: _HeldKeys,
        pool: list[Candidate],
        limit: int,
        now: int,
    ) -> Looked:
        """The new records of one partition, in offset order, as they would
        wait; the deliverable ones join `pool`. A record whose key is held
        in the group's state is not a candidate, and neither is any record
        after the first of its key here.

        Without a priority among them, records past the first `limit`
        candidates cannot be taken (the batch is full of older ones), so
        they are not looked at."""
        offsets, timestamps, metas = rows.offsets, rows.timestamps, rows.metas
        ranks = [-priority_of(meta) for meta in metas] if self.priority else [0] * len(metas)
        key_of = meta_key if self.ordered else _no_key
        # Where the records with a priority end: past it, stop at `limit` candidates.
        ranked = max((i for i, r in enumerate(ranks) if r), default=-1)
        found = 0
        running = 0
        seen = Looked([], [], ranks, [])
        blocked: set[bytes] = set()
        asked: set[bytes] = set()
        keys: dict[int, bytes | None] = {}  # by row index, read as the look gets there
        for i, meta in enumerate(metas):
            if found >= limit and i > ranked:
                break
            key = keys[i] if i in keys else key_of(meta)
            if key is not None and key not in asked:
                # Ask the store about the keys a few records ahead at once.
                for j in range(i, min(len(metas), i + max(limit, 8))):
                    if j not in keys:
                        keys[j] = key_of(metas[j])
                ask = {k for k in keys.values() if k is not None} - asked
                blocked |= held.of(partition, ask)
                asked |= ask
            timestamp = timestamps[i]
            due = timestamp if meta is None else due_at(timestamp, meta)
            delayed = due > now
            if not delayed:
                # A new record is never due before an older one of its partition.
                running = due = max(running, due)
                if key is None or key not in blocked:
                    pool.append(_candidate((ranks[i], due, 0, partition, offsets[i], i, 0, key)))
                    found += 1
            seen.dues.append(due)
            seen.delayed.append(delayed)
            seen.keys.append(key)
            if key is not None:
                blocked.add(key)  # later records of the key wait for this one
        return seen

    def available_since(self, rows: Iterable[tuple[int, bytes | None]]) -> int | None:
        """The earliest time one of these records became available, or None.

        `rows` are (timestamp, meta) of records waiting in a group's state,
        oldest append first. A record became available at its due time (its
        append, or its deliver-at), whatever happened since: a nack, an
        expired lease or a delay on retry does not make it younger, so a
        record nacked again and again keeps its age (queue stats' oldest
        available age). Stops at the first record appended after the
        earliest time found.
        """
        best: int | None = None
        for ts, meta in rows:
            if best is not None and ts >= best:
                break
            since = self.due(ts, meta)
            best = since if best is None else min(best, since)
        return best

    def peek(
        self,
        waiting: list[StateRow],
        cursors: list[int],
        read: Callable[[int, int, int], list[Row]],
        now: int,
        limit: int,
    ) -> list[Waiting]:
        """What a receive would hand out, leasing nothing: the due ones as
        it picks them (a new record is never due before an older one of its
        partition), then the delayed ones by due time. `waiting` are the
        group's state rows not in flight, `cursors` each partition's cursor;
        `read(partition, after, limit)` reads the topic."""
        keyed: list[tuple[tuple[object, ...], Waiting]] = []
        held: set[tuple[int, int]] = set()
        for s in waiting:
            held.add((s.partition, s.offset))
            rows = read(s.partition, s.offset - 1, 1)
            if not rows or rows[0][0] != s.offset:
                continue  # removed by retention: a receive would drop the row
            _, ts, value, meta = rows[0]
            w = Waiting(s.partition, s.offset, ts, value, meta, s.deliveries, s.due, s.priority, s.due > now)
            keyed.append((_peek_order(w, s.seq), w))
        for partition, cursor in enumerate(cursors):
            running = 0
            for offset, ts, value, meta in read(partition, cursor, limit):
                if (partition, offset) in held:
                    continue
                due = self.due(ts, meta)
                delayed = due > now
                if not delayed:
                    running = due = max(running, due)
                w = Waiting(partition, offset, ts, value, meta, 0, due, -self.rank(meta), delayed)
                keyed.append((_peek_order(w, 0), w))
        keyed.sort(key=lambda k: k[0])
        return [w for _, w in keyed[:limit]]


def _no_key(meta: bytes | None) -> None:
    return None  # an unordered group: no record waits for another


def _peek_order(w: Waiting, seq: int) -> tuple[object, ...]:
    """Due ones as a receive picks them; the delayed after, by due time."""
    if w.delayed:
        return (True, 0, w.due, 0, w.partition, w.offset)
    return (False, -w.priority, w.due, seq, w.partition, w.offset)


def _parks(rows: NewRecords, seen: Looked, partition: int, chosen: set[tuple[int, int]]) -> Iterator[Park]:
    """The new records of a partition that enter the group's state without a
    lease: those passed over before the last one taken, and the delayed ones
    in the run right after it (the cursor moves past them)."""
    last = max((o for p, o in chosen if p == partition), default=0)
    dues, delayed, ranks, keys = seen
    for i, offset in enumerate(rows.offsets[: len(dues)]):
        if (partition, offset) in chosen:
            continue
        if offset > last and not delayed[i]:
            break
        yield _park((partition, offset, dues[i], -ranks[i], keys[i]))


class _HeldKeys:
    """Which ordering keys have a record in the group's state, per partition.

    A receive asks the store once for the keys of the first records of every
    partition (`prefetch`); a look that goes further asks again, a few keys
    at a time.
    """

    def __init__(self, tx: LeaseTx):
        self._tx = tx
        self._asked: set[tuple[int, bytes]] = set()
        self._held: set[tuple[int, bytes]] = set()

    def prefetch(self, policy: ReceivePolicy, rows: dict[int, NewRecords], limit: int) -> None:
        pairs = {
            (partition, key)
            for partition, part in rows.items()
            for key in map(policy.key, part.metas[: max(limit, 8)])
            if key is not None
        }
        if pairs:
            self._held |= self._tx.held(list(pairs))
            self._asked |= pairs

    def of(self, partition: int, keys: set[bytes]) -> set[bytes]:
        """Of `keys`, those held on `partition`."""
        new = [(partition, k) for k in keys if (partition, k) not in self._asked]
        if new:
            self._held |= self._tx.held(new)
            self._asked.update(new)
        return {k for k in keys if (partition, k) in self._held}
