"""Queue groups on PostgreSQL: leases, acks, releases and dead letters.

The mechanics only; the policy (which records to lease, when to dead-letter,
what a delay means, how receipts look) is the core's, in `tidelog.leasing`
and `tidelog.queues`. The same model as
`sqlite_queues`; what PostgreSQL adds is the locking that SQLite's single
writer gave for free:

- A receive locks its group's row (FOR UPDATE) before it looks past the
  cursor, so receivers of one group take turns on new records, from any
  number of connections and machines, and never lease one record twice.
  Leases that fell due again are taken FOR UPDATE SKIP LOCKED, so a receive
  never waits for an ack in flight (and never takes its record either).
- Acks, extends and releases touch only their own state row, matched on the
  receipt: whichever of a receive and an ack takes the row first wins, and
  the other sees the row as the winner left it.
- A receive is two round trips, both pipelined: one reads the group's lock,
  the due leases and the new records (`PostgresLeaseTx.candidates`); one
  writes the leases and the cursor and commits (`apply`). The core's choosing
  (`tidelog.leasing`) runs in between; a group ordered by key may ask which
  keys are held (`held`), a round trip more.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from ...errors import LeaseLost, UnknownGroup, UnknownTopic
from ..base import (
    ACK,
    EXTEND,
    RELEASE,
    RETURN,
    AppendBatch,
    Candidates,
    Leased,
    LeasePlan,
    LeasePolicy,
    NewRecords,
    QueueStats,
    Settle,
    StateRow,
)
from .base import _APPEND, PostgresBase, _append_params, _PartitionGone, one, stored

# Serialises the calls that take new records or move a cursor, per group and topic.
LOCK_GROUP = "SELECT 1 FROM tidelog_queue_groups WHERE grp = %s AND topic_id = %s FOR UPDATE"

# Leases due again (expired, released, delayed, passed over), highest priority
# then oldest due first, per partition.
_DUE = """
SELECT p.i - 1, s."offset", s.due, s.seq, s.deliveries, s.priority
FROM unnest(%(pids)s::bigint[]) WITH ORDINALITY AS p(pid, i)
CROSS JOIN LATERAL (
    SELECT "offset", due, seq, deliveries, priority FROM tidelog_queue_state s
    WHERE grp = %(grp)s AND pid = p.pid AND due <= %(now)s
      -- ordering "key": only the earliest record of its key still in the group
      AND (NOT %(ordered)s OR okey IS NULL OR NOT EXISTS (
        SELECT FROM tidelog_queue_state k
        WHERE k.grp = %(grp)s AND k.pid = p.pid AND k.okey = s.okey AND k."offset" < s."offset"))
    ORDER BY priority DESC, due, seq, "offset" LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) s
"""

# Records past each partition's cursor, in offset order: the first one held
# past it (one index probe), then a range of `window` offsets from there.
# Both bounds keep every plan an index range scan of at most `window` rows,
# whatever the table's statistics say; a gap that compaction left inside the
# range only makes the batch smaller.
_FRESH = """
SELECT p.i - 1, r."offset", r.ts, r.value, r.text, r.meta
FROM unnest(%(pids)s::bigint[]) WITH ORDINALITY AS p(pid, i)
LEFT JOIN tidelog_queue_cursors c ON c.grp = %(grp)s AND c.pid = p.pid
CROSS JOIN LATERAL (
    SELECT min("offset") AS first FROM tidelog_records WHERE pid = p.pid AND "offset" > coalesce(c.scanned, 0)
) f
CROSS JOIN LATERAL (
    SELECT "offset", ts, value, text, meta FROM tidelog_records
    WHERE pid = p.pid AND "offset" >= f.first AND "offset" < f.first + %(window)s
) r
ORDER BY p.i, r."offset"
"""

# Lease again the due rows chosen, and return their records; a row whose
# record was removed meanwhile (trim, retention) has nothing to deliver and goes.
_LEASE_AGAIN = """
WITH v AS (
    SELECT * FROM unnest(%(pids)s::bigint[], %(offsets)s::bigint[], %(receipts)s::text[])
        AS v(pid, "offset", receipt)
), r AS (
    SELECT v.pid, v.receipt, t."offset", t.ts, t.value, t.text, t.meta
    FROM v JOIN tidelog_records t ON t.pid = v.pid AND t."offset" = v."offset"
), gone AS (
    DELETE FROM tidelog_queue_state s USING v
    WHERE s.grp = %(grp)s AND s.pid = v.pid AND s."offset" = v."offset"
      AND NOT EXISTS (SELECT 1 FROM r WHERE r.pid = v.pid AND r."offset" = v."offset")
), leased AS (
    UPDATE tidelog_queue_state s SET due = %(deadline)s, seq = 0, deliveries = s.deliveries + 1, receipt = r.receipt
    FROM r WHERE s.grp = %(grp)s AND s.pid = r.pid AND s."offset" = r."offset"
)
SELECT pid, "offset", ts, value, text, meta FROM r
"""

# New records taken into the group: leased ones, and delayed or passed-over
# ones parked until due or their turn; the cursor follows the highest offset taken. A row already there
# (the cursor of a Redis group was moved back) is taken afresh.
_TAKE_NEW = """
WITH v AS (
    SELECT pid, "offset", %(deadline)s::bigint AS due, 1 AS deliveries, receipt, priority, okey
    FROM unnest(%(pids)s::bigint[], %(offsets)s::bigint[], %(receipts)s::text[], %(priorities)s::smallint[],
                %(okeys)s::bytea[])
        AS l(pid, "offset", receipt, priority, okey)
    UNION ALL
    SELECT pid, "offset", due, 0, NULL, priority, okey
    FROM unnest(%(delayed_pids)s::bigint[], %(delayed_offsets)s::bigint[], %(dues)s::bigint[],
                %(delayed_priorities)s::smallint[], %(delayed_okeys)s::bytea[])
        AS d(pid, "offset", due, priority, okey)
), s AS (
    INSERT INTO tidelog_queue_state (grp, pid, "offset", due, deliveries, receipt, priority, okey)
    SELECT %(grp)s, pid, "offset", due, deliveries, receipt, priority, okey FROM v
    ON CONFLICT (grp, pid, "offset") DO UPDATE SET due = excluded.due, seq = 0, deliveries = excluded.deliveries,
        priority = excluded.priority, okey = excluded.okey,
        receipt = excluded.receipt, consumer = NULL, delivered = NULL
)
INSERT INTO tidelog_queue_cursors (grp, pid, scanned)
SELECT %(grp)s, pid, max("offset") FROM v GROUP BY pid
ON CONFLICT (grp, pid) DO UPDATE SET scanned = greatest(tidelog_queue_cursors.scanned, excluded.scanned)
"""

# Of the keys of new records, those with a record in the group's state.
_BLOCKED = """
SELECT DISTINCT s.pid, s.okey FROM unnest(%(pids)s::bigint[], %(okeys)s::bytea[]) AS v(pid, okey)
JOIN tidelog_queue_state s ON s.grp = %(grp)s AND s.pid = v.pid AND s.okey = v.okey
"""

_NEXT_DUE = """
SELECT min(n.due) FROM unnest(%(pids)s::bigint[]) AS p(pid)
CROSS JOIN LATERAL (
    SELECT due FROM tidelog_queue_state WHERE grp = %(grp)s AND pid = p.pid AND due > %(now)s
    ORDER BY due LIMIT 1
) n
"""

# Finish a lease (an ack, a dead letter); answers 1 when the receipt held
# it. A record delivered more than once keeps the receipt that finished it
# (schema 5), so an earlier delivery's receipt stays refused.
FINISH = """
WITH gone AS (
    DELETE FROM tidelog_queue_state WHERE grp = %s AND pid = %s AND "offset" = %s AND receipt = %s
    RETURNING pid, "offset", grp, receipt, deliveries
), kept AS (
    INSERT INTO tidelog_queue_finished (pid, "offset", grp, receipt)
    SELECT pid, "offset", grp, receipt FROM gone WHERE deliveries > 1
    ON CONFLICT (pid, "offset", grp) DO UPDATE SET receipt = excluded.receipt
)
SELECT count(*) FROM gone
"""

# What became of a lease that a receipt no longer holds.
_LEASE_ROW = """
SELECT (SELECT scanned FROM tidelog_queue_cursors WHERE grp = %(grp)s AND pid = %(pid)s),
       s.grp IS NOT NULL, s.receipt, s.deliveries,
       (SELECT receipt FROM tidelog_queue_finished
        WHERE pid = %(pid)s AND "offset" = %(offset)s AND grp = %(grp)s)
FROM (VALUES (1)) AS one
LEFT JOIN tidelog_queue_state s ON s.grp = %(grp)s AND s.pid = %(pid)s AND s."offset" = %(offset)s
"""

# The same for many records at once, before a batch settles them.
_LEASE_ROWS = """
SELECT v.pid, v."offset", c.scanned, s.grp IS NOT NULL, s.receipt, s.deliveries, f.receipt
FROM unnest(%(pids)s::bigint[], %(offsets)s::bigint[]) AS v(pid, "offset")
LEFT JOIN tidelog_queue_cursors c ON c.grp = %(grp)s AND c.pid = v.pid
LEFT JOIN tidelog_queue_state s ON s.grp = %(grp)s AND s.pid = v.pid AND s."offset" = v."offset"
LEFT JOIN tidelog_queue_finished f ON f.pid = v.pid AND f."offset" = v."offset" AND f.grp = %(grp)s
"""

_EXTEND = (
    'UPDATE tidelog_queue_state SET due = %s WHERE grp = %s AND pid = %s AND "offset" = %s AND receipt = %s'
)
# A release makes a record due again, maybe ahead of everything: it holds
# its group's row in share mode until it commits, so a receive that starts
# meanwhile waits for it and then sees the record, as when writes take turns
# on SQLite. (The lock comes first: an uncorrelated EXISTS runs once, up front.)
_RELEASE = """
WITH g AS (SELECT FROM tidelog_queue_groups WHERE grp = %(grp)s AND topic_id = %(topic_id)s FOR SHARE)
UPDATE tidelog_queue_state SET due = %(due)s, receipt = NULL,
    -- behind: after every record of the group due then (see queue_release)
    seq = CASE WHEN %(behind)s THEN (
        SELECT coalesce(max(seq), 0) + 1 FROM tidelog_queue_state
        WHERE grp = %(grp)s AND pid = ANY(%(pids)s::bigint[]) AND due = %(due)s) ELSE 0 END
WHERE grp = %(grp)s AND pid = %(pid)s AND "offset" = %(offset)s AND receipt = %(receipt)s
  AND EXISTS (SELECT FROM g)
"""

# A lease that never reached a member: to the front, its delivery uncounted
# (the group's row in share mode, as a release).
_RETURN = """
WITH g AS (SELECT FROM tidelog_queue_groups WHERE grp = %(grp)s AND topic_id = %(topic_id)s FOR SHARE)
UPDATE tidelog_queue_state SET due = 0, receipt = NULL, seq = 0, deliveries = deliveries - 1
WHERE grp = %(grp)s AND pid = %(pid)s AND "offset" = %(offset)s AND receipt = %(receipt)s
  AND EXISTS (SELECT FROM g)
"""

# A record whose job a cancel finished (tidelog.results) waits in its group only
# for a runner to ack it unrun: queue stats count it nowhere, unless leased.
_CANCELLED = """EXISTS (SELECT 1 FROM tidelog_job_states j
    WHERE j.grp = s.grp AND j.pid = s.pid AND j."offset" = s."offset" AND j.state = 'cancelled')"""

_STATE_COUNTS = f"""
SELECT count(*) FILTER (WHERE due <= %(now)s AND NOT cancelled),
       count(*) FILTER (WHERE due > %(now)s AND receipt IS NOT NULL),
       count(*) FILTER (WHERE due > %(now)s AND receipt IS NULL AND NOT cancelled),
       (SELECT dead_lettered FROM tidelog_queue_groups WHERE grp = %(grp)s AND topic_id = %(topic_id)s)
FROM (SELECT s.due, s.receipt, {_CANCELLED} AS cancelled
      FROM tidelog_queue_state s WHERE s.grp = %(grp)s AND s.pid = ANY(%(pids)s::bigint[])) s
"""

# The offsets past a partition's cursor whose jobs a cancel finished.
_CANCELLED_PAST = (
    'SELECT "offset" FROM tidelog_job_states WHERE grp = %s AND pid = %s AND "offset" > %s '
    "AND state = 'cancelled'"
)

# The records of the group's available state rows (released, expired,
# passed over), oldest append first, a page at a time (keyset): how old the
# oldest is (`LeasePolicy.available_since`) is usually told by the first row.
_AVAILABLE_STATE = f"""
SELECT r.ts, r.meta, r.pid, r."offset" FROM tidelog_queue_state s
JOIN tidelog_records r ON r.pid = s.pid AND r."offset" = s."offset"
WHERE s.grp = %(grp)s AND s.pid = ANY(%(pids)s::bigint[]) AND s.due <= %(now)s AND NOT {_CANCELLED}
  AND (r.ts, r.pid, r."offset") > (%(ts)s, %(pid)s, %(offset)s)
ORDER BY r.ts, r.pid, r."offset" LIMIT 100
"""

# Per partition: the cursor, and the first and last records past it.
_WAITING = """
SELECT p.pid, coalesce(c.scanned, 0), f.first, r.ts,
       (SELECT max("offset") FROM tidelog_records WHERE pid = p.pid)
FROM unnest(%(pids)s::bigint[]) AS p(pid)
LEFT JOIN tidelog_queue_cursors c ON c.grp = %(grp)s AND c.pid = p.pid
CROSS JOIN LATERAL (
    SELECT min("offset") AS first FROM tidelog_records WHERE pid = p.pid AND "offset" > coalesce(c.scanned, 0)
) f
JOIN tidelog_records r ON r.pid = p.pid AND r."offset" = f.first
"""


def _append_row(columns: tuple[list[Any], ...], *row: Any) -> None:
    for column, value in zip(columns, row):
        column.append(value)


class _LeaseGone(Exception):
    """Inside a transaction: the receipt holds no lease; roll back, then say why."""


class _NoGroup(Exception):
    """Inside a transaction: the group's row is missing; roll back, then say why."""


class PostgresQueues(PostgresBase):
    """Mixed into PostgresStore; uses its pool and pid cache."""

    def _no_group(self, group: str, topic: str) -> Exception:
        self._topic_pids(topic, refresh=True)  # UnknownTopic when the topic went with it
        return UnknownGroup(f"queue group {group!r} does not exist on topic {topic!r}")

    def queue_open(
        self, group: str, topic: str, config: dict[str, Any], start: str, now: int
    ) -> dict[str, Any]:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        with self._conn() as conn:
            row = conn.execute(
                "SELECT config FROM tidelog_queue_groups WHERE grp = %s AND topic_id = %s", (group, topic_id)
            ).fetchone()
            if row is not None:
                stored_config: dict[str, Any] = row[0]
                return stored_config
            with conn.transaction():
                created = conn.execute(
                    "INSERT INTO tidelog_queue_groups (grp, topic_id, config, created) "
                    "VALUES (%s, %s, %s::jsonb, %s) ON CONFLICT DO NOTHING RETURNING 1",
                    (group, topic_id, json.dumps(config, sort_keys=True), now),
                ).fetchone()
                if created is None:  # another connection created it just now
                    existing: dict[str, Any] = one(
                        conn.execute(
                            "SELECT config FROM tidelog_queue_groups WHERE grp = %s AND topic_id = %s",
                            (group, topic_id),
                        )
                    )[0]
                    return existing
                conn.execute(
                    "INSERT INTO tidelog_groups (name, mode, config, created) VALUES (%s, 'queue', '{}', %s) "
                    "ON CONFLICT (name) DO NOTHING",
                    (group, now),
                )
                conn.execute(
                    "INSERT INTO tidelog_queue_cursors (grp, pid, scanned) "
                    "SELECT %(grp)s, id, CASE WHEN %(latest)s THEN last_offset ELSE 0 END "
                    "FROM tidelog_partitions WHERE id = ANY(%(pids)s::bigint[]) "
                    "ON CONFLICT (grp, pid) DO UPDATE SET scanned = excluded.scanned",
                    {"grp": group, "latest": start == "latest", "pids": list(pids)},
                )
        return config

    def queue_receive(
        self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int
    ) -> tuple[list[Leased], int | None]:
        topic_id, pids = self._topic_pids(topic)
        try:
            with self._conn() as conn, conn.transaction(), conn.pipeline():
                return policy.lease(PostgresLeaseTx(conn, group, topic_id, pids), now, limit)
        except _NoGroup:
            raise self._no_group(group, topic) from None

    # settling ----------------------------------------------------------------

    def _lease_lost(
        self, conn: Any, group: str, topic: str, partition: int, pid: int, offset: int
    ) -> LeaseLost:
        _, found, receipt, deliveries, finished = conn.execute(
            _LEASE_ROW, {"grp": group, "pid": pid, "offset": offset}
        ).fetchone()
        return lease_lost(group, topic, partition, offset, found, receipt, deliveries, finished)

    def queue_ack(self, group: str, topic: str, partition: int, offset: int, receipt: str) -> None:
        pid = self._pid(topic, partition)
        with self._conn() as conn:
            if one(conn.execute(FINISH, (group, pid, offset, receipt)))[0] == 1:
                return
            scanned, found, held, deliveries, finished = one(
                conn.execute(_LEASE_ROW, {"grp": group, "pid": pid, "offset": offset})
            )
        if done(offset, receipt, scanned, found, finished):
            return  # done already with this receipt: acking twice is a no-op
        raise lease_lost(group, topic, partition, offset, found, held, deliveries, finished)

    def queue_extend(
        self, group: str, topic: str, partition: int, offset: int, receipt: str, deadline: int
    ) -> None:
        pid = self._pid(topic, partition)
        with self._conn() as conn:
            if conn.execute(_EXTEND, (deadline, group, pid, offset, receipt)).rowcount != 1:
                raise self._lease_lost(conn, group, topic, partition, pid, offset)

    def queue_release(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        receipt: str,
        due: int,
        behind: bool = False,
    ) -> None:
        pid = self._pid(topic, partition)
        topic_id, pids = self._topic_pids(topic)
        params = {
            "grp": group,
            "topic_id": topic_id,
            "pids": list(pids),
            "pid": pid,
            "offset": offset,
            "receipt": receipt,
            "due": due,
            "behind": behind,
        }
        with self._conn() as conn:
            if conn.execute(_RELEASE, params).rowcount != 1:
                raise self._lease_lost(conn, group, topic, partition, pid, offset)

    def queue_settle(self, group: str, topic: str, settles: Sequence[Settle]) -> list[LeaseLost | None]:
        # Partitions first, so a bad one refuses the batch before anything is written.
        pids = [self._pid(topic, s.partition) for s in settles]
        topic_id, all_pids = self._topic_pids(topic)
        out: list[LeaseLost | None] = []
        with self._conn() as conn:
            # One transaction, one round trip: every statement pipelined, then
            # the row counts say which receipts still held their lease.
            with conn.transaction(), conn.pipeline():
                before = conn.execute(
                    _LEASE_ROWS, {"grp": group, "pids": pids, "offsets": [s.offset for s in settles]}
                )
                cursors = []
                for s, pid in zip(settles, pids):
                    if s.action == ACK:
                        cur = conn.execute(FINISH, (group, pid, s.offset, s.receipt))
                    elif s.action == EXTEND:
                        cur = conn.execute(_EXTEND, (s.time, group, pid, s.offset, s.receipt))
                    else:
                        params = {
                            "grp": group,
                            "topic_id": topic_id,
                            "pids": list(all_pids),
                            "pid": pid,
                            "offset": s.offset,
                            "receipt": s.receipt,
                            "due": s.time,
                            "behind": s.behind,
                        }
                        cur = conn.execute(_RETURN if s.action == RETURN else _RELEASE, params)
                    cursors.append(cur)
            # Why a receipt failed, told as the single call would have: the
            # state before the batch, carried forward through its successes.
            state = {(pid, o): rest for pid, o, *rest in before}
            for s, pid, cur in zip(settles, pids, cursors):
                scanned, found, held, deliveries, finished = state[pid, s.offset]
                settled = one(cur)[0] == 1 if s.action == ACK else cur.rowcount == 1
                if settled:
                    out.append(None)
                    if s.action == ACK:
                        kept = s.receipt if deliveries is not None and deliveries > 1 else None
                        state[pid, s.offset] = [scanned, False, None, None, kept]
                    elif s.action == RELEASE:
                        state[pid, s.offset] = [scanned, found, None, deliveries, finished]
                    elif s.action == RETURN:
                        less = None if deliveries is None else deliveries - 1
                        state[pid, s.offset] = [scanned, found, None, less, finished]
                elif s.action == ACK and done(s.offset, s.receipt, scanned, found, finished):
                    out.append(None)  # done already with this receipt: acking twice is a no-op
                else:
                    out.append(
                        lease_lost(group, topic, s.partition, s.offset, found, held, deliveries, finished)
                    )
        return out

    def queue_dead_letter(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        receipt: str,
        dead_letter: AppendBatch,
    ) -> int:
        # The store's own append statement, so the dead-letter topic's offsets
        # stay dense and its listeners are notified on commit.
        pid = self._pid(topic, partition)
        topic_id = self._topic_pids(topic)[0]
        append = _append_params(dead_letter)
        for attempt in (0, 1):
            try:
                append["pid"] = self._pid(dead_letter.topic, dead_letter.partition, refresh=attempt == 1)
            except UnknownTopic:
                # No dead-letter topic (yet): a receipt that holds no lease is told so first.
                with self._conn() as conn:
                    held = conn.execute(
                        'SELECT receipt FROM tidelog_queue_state WHERE grp = %s AND pid = %s AND "offset" = %s',
                        (group, pid, offset),
                    ).fetchone()
                    if held is None or held[0] != receipt:
                        raise self._lease_lost(conn, group, topic, partition, pid, offset) from None
                raise
            with self._conn() as conn:
                try:
                    with conn.transaction(), conn.pipeline() as pipeline:
                        # The group row first: the lock order of a receive.
                        conn.execute(
                            "UPDATE tidelog_queue_groups SET dead_lettered = dead_lettered + 1 "
                            "WHERE grp = %s AND topic_id = %s",
                            (group, topic_id),
                        )
                        finished = conn.execute(FINISH, (group, pid, offset, receipt))
                        appended = conn.execute(_APPEND, append)
                        pipeline.sync()
                        if one(finished)[0] != 1:
                            raise _LeaseGone
                        row = appended.fetchone()
                        if row is None:
                            # The dead-letter topic was deleted (maybe
                            # recreated) since we cached its partition ids.
                            raise _PartitionGone
                        return int(row[0])
                except _LeaseGone:
                    raise self._lease_lost(conn, group, topic, partition, pid, offset) from None
                except _PartitionGone:
                    continue
        raise UnknownTopic(f"dead-letter topic {dead_letter.topic!r} does not exist")

    def queue_stats(self, group: str, topic: str, policy: LeasePolicy, now: int) -> QueueStats:
        topic_id, pids = self._topic_pids(topic, refresh=True)
        params = {"grp": group, "topic_id": topic_id, "pids": list(pids), "now": now}
        with self._conn() as conn:
            with conn.pipeline():
                counts = conn.execute(_STATE_COUNTS, params)
                waiting_rows = conn.execute(_WAITING, params).fetchall()
                available, in_flight, delayed, dead = one(counts)
            # When the oldest available record became available: a nack to
            # the front (due 0) or an expiry does not make a record younger.
            oldest = policy.available_since(self._available_state(conn, params))
            for pid, scanned, first, _, last in waiting_rows:
                cancelled = {
                    o for (o,) in conn.execute(_CANCELLED_PAST, (group, pid, max(scanned, first - 1)))
                }
                # Offsets past the cursor are dense but for what trim removed
                # from the front: count from the first record held.
                waiting = last - first + 1 - len(cancelled)
                first_due: int | None = None
                # Only records with a meta blob can carry a delay.
                for offset, ts, meta in conn.execute(
                    'SELECT "offset", ts, meta FROM tidelog_records WHERE pid = %s AND "offset" > %s '
                    "AND meta IS NOT NULL",
                    (pid, scanned),
                    binary=True,
                ):
                    if offset in cancelled:
                        continue
                    due = policy.due(ts, meta)
                    if due > now:
                        waiting -= 1
                        delayed += 1
                    elif first_due is None or due < first_due:
                        first_due = due
                available += waiting
                plain = next(
                    (
                        ts
                        for offset, ts in conn.execute(
                            'SELECT "offset", ts FROM tidelog_records WHERE pid = %s AND "offset" > %s '
                            'AND meta IS NULL ORDER BY "offset" LIMIT %s',
                            (pid, scanned, len(cancelled) + 1),
                        )
                        if offset not in cancelled
                    ),
                    None,
                )
                for since in (first_due, plain):
                    if since is not None and (oldest is None or since < oldest):
                        oldest = since
        age = 0 if oldest is None else max(0, now - oldest)
        return QueueStats(available, in_flight, delayed, dead or 0, age)

    @staticmethod
    def _available_state(conn: Any, params: dict[str, Any]) -> Iterator[tuple[int, bytes | None]]:
        """(ts, meta) of the records of available state rows, oldest append first."""
        after = {**params, "ts": -1, "pid": -1, "offset": -1}
        while True:
            rows = conn.execute(_AVAILABLE_STATE, after, binary=True).fetchall()
            for ts, meta, pid, offset in rows:
                yield ts, meta
                after.update(ts=ts, pid=pid, offset=offset)
            if len(rows) < 100:
                return


def done(offset: int, receipt: str, scanned: int | None, found: bool, finished: str | None) -> bool:
    """The record is finished, and `receipt` may have finished it: its final
    receipt when it was delivered more than once, else any (a record finished
    at its first delivery had no other receipt)."""
    if found:
        return False
    if finished is not None:
        return finished == receipt
    return scanned is not None and offset <= scanned


def lease_lost(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    found: bool,
    receipt: str | None,
    deliveries: int | None,
    finished: str | None = None,
) -> LeaseLost:
    where = f"{topic!r}/{partition} offset {offset} in group {group!r}"
    if not found and finished is not None:
        return LeaseLost(
            f"record {where} was finished under a later delivery; "
            "this receipt is from an earlier one (its lease had expired)"
        )
    if not found:
        return LeaseLost(f"record {where} is already done (acked or dead-lettered)")
    if receipt is None:
        return LeaseLost(f"the lease on {where} was released or expired; it will be delivered again")
    return LeaseLost(
        f"the lease on {where} expired and the record was delivered again (delivery {deliveries})"
    )


class PostgresLeaseTx:
    """A receive's primitives on one queue group (`LeaseTx`), for
    `tidelog.leasing`, on a connection in a transaction and a pipeline."""

    def __init__(self, conn: Any, group: str, topic_id: int, pids: tuple[int, ...]):
        self.conn = conn
        self.group = group
        self.topic_id = topic_id
        self.pids = pids
        self.partitions = len(pids)

    def lease_next(self, now: int, deadline: int, receipts: Sequence[str], window: int) -> list[Leased]:
        return []  # no one-statement lease here: the candidates and the writes are a round trip each

    def candidates(self, now: int, limit: int, window: int, ordered: bool) -> Candidates:
        params = {
            "grp": self.group,
            "pids": list(self.pids),
            "now": now,
            "limit": limit,
            "window": window,
            "ordered": ordered,
        }
        conn = self.conn
        lock = conn.execute(LOCK_GROUP, (self.group, self.topic_id))
        due_rows = conn.execute(_DUE, params)
        fresh_rows = conn.execute(_FRESH, params, binary=True)
        if lock.fetchone() is None:
            raise _NoGroup
        due = [StateRow(p, o, d, q, n, r) for p, o, d, q, n, r in due_rows]
        rows: dict[int, list[tuple[Any, ...]]] = {}
        for partition, offset, ts, value, text, meta in fresh_rows:
            rows.setdefault(partition, []).append((offset, ts, stored(value, text), meta))
        return Candidates(due, {partition: NewRecords.of(part) for partition, part in rows.items()})

    def held(self, pairs: list[tuple[int, bytes]]) -> set[tuple[int, bytes]]:
        got = self.conn.execute(
            _BLOCKED,
            {"grp": self.group, "pids": [self.pids[p] for p, _ in pairs], "okeys": [k for _, k in pairs]},
        )
        partition_of = {pid: i for i, pid in enumerate(self.pids)}
        return {(partition_of[pid], bytes(okey)) for pid, okey in got}

    def apply(self, plan: LeasePlan) -> tuple[list[Leased], int | None]:
        conn, group, pids = self.conn, self.group, self.pids
        # Statement parameters, a list a column: leases again, new leases,
        # and records parked (pids, offsets, receipts or dues, priorities, keys).
        again: tuple[list[int], list[int], list[str]] = ([], [], [])
        leased: tuple[list[int], list[int], list[str], list[int], list[bytes | None]] = ([], [], [], [], [])
        parked: tuple[list[int], list[int], list[int], list[int], list[bytes | None]] = ([], [], [], [], [])
        for t in plan.takes:
            if t.new is None:
                _append_row(again, pids[t.partition], t.offset, t.receipt)
            else:
                _append_row(leased, pids[t.partition], t.offset, t.receipt, t.priority, t.key)
        for p in plan.parks:
            _append_row(parked, pids[p.partition], p.offset, p.due, p.priority, p.key)
        # All pipelined: one round trip, and the commit.
        leased_again = None
        if again[0]:
            leased_again = conn.execute(
                _LEASE_AGAIN,
                {
                    "grp": group,
                    "pids": again[0],
                    "offsets": again[1],
                    "receipts": again[2],
                    "deadline": plan.deadline,
                },
                binary=True,
            )
        if leased[0] or parked[0]:
            conn.execute(
                _TAKE_NEW,
                {
                    "grp": group,
                    "deadline": plan.deadline,
                    "pids": leased[0],
                    "offsets": leased[1],
                    "receipts": leased[2],
                    "priorities": leased[3],
                    "okeys": leased[4],
                    "delayed_pids": parked[0],
                    "delayed_offsets": parked[1],
                    "dues": parked[2],
                    "delayed_priorities": parked[3],
                    "delayed_okeys": parked[4],
                },
            )
        # When waiting ends: asked when the batch may come out short (a lease
        # again finds its record removed, or too few were taken).
        next_due_row = None
        if len(plan.takes) < plan.limit or again[0]:
            next_due_row = conn.execute(_NEXT_DUE, {"grp": group, "pids": list(pids), "now": plan.now})
        records: dict[tuple[int, int], tuple[Any, ...]] = {}
        if leased_again is not None:
            records = {(pid, o): (o, ts, stored(v, t), m) for pid, o, ts, v, t, m in leased_again}
        next_due = one(next_due_row)[0] if next_due_row is not None else None
        out: list[Leased] = []
        for t in plan.takes:
            got = t.new if t.new is not None else records.get((pids[t.partition], t.offset))
            if got is None:  # removed by trim or retention meanwhile: nothing to deliver
                continue
            out.append(
                Leased(
                    t.partition, t.offset, got[1], got[2], got[3], t.deliveries + 1, t.receipt, plan.deadline
                )
            )
        return out, (next_due if len(out) < plan.limit else None)
