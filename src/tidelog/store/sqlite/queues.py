"""Queue groups on SQLite: leases, acks, releases and dead letters.

The mechanics only; the policy (which records to lease, when to dead-letter,
what a delay means, how receipts look) is the core's, in `tidelog.leasing`
and `tidelog.queues`: a receive runs `policy.lease` over `SQLiteLeaseTx`.
Every call is one transaction, so a record is never leased to two members at
once, also across processes sharing the file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import ExitStack
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
from .base import SQLiteBase

OFFSET_BITS = 40
OFFSET_SPAN = 1 << OFFSET_BITS


_CANDIDATES = """
SELECT * FROM (
    SELECT 0, offset, due, deliveries, seq, priority FROM queue_state s
    WHERE grp = ?1 AND pid = ?2 AND due <= ?3
      -- ordering "key" (?8): only the earliest record of its key still in the group
      AND (NOT ?8 OR okey IS NULL OR NOT EXISTS (
        SELECT 1 FROM queue_state k WHERE k.grp = ?1 AND k.pid = ?2 AND k.okey = s.okey AND k.offset < s.offset))
    ORDER BY priority DESC, due, seq, offset LIMIT ?4)
UNION ALL
SELECT * FROM (
    SELECT 1, id - ?5, ts, value, meta, NULL FROM records
    WHERE id > ?5 + coalesce((SELECT scanned FROM queue_cursors WHERE grp = ?1 AND pid = ?2), 0)
      AND id < ?6 ORDER BY id LIMIT ?7)
"""


# The next new record, when nothing in the state is due and no record near
# it carries a meta blob (so none has a delay or a priority), and only while
# the group exists (a handle may outlive its group: XGROUP DESTROY). What the
# delivery needs comes back with the lease (RETURNING's subqueries read the
# record in the same statement), so the common receive is one statement and
# one transaction on one connection. The cursor's subquery is written out
# twice rather than named in a WITH: a CTE read twice is materialized into an
# ephemeral table, a b-tree opened, zeroed and begun on every receive (about
# an eighth of the loop's instructions under valgrind); a scalar subquery
# without outer references runs once a statement.
#
# A receive of n records runs this n times in one transaction, and each run must cost
# the same, not grow with the leases before it (a receive of 10,000 took 12 s):
# - "nothing due" is asked once a sign of priority: queue_state_due orders by priority
#   before due, so `due <= now` alone walks every row of the partition (every lease in
#   flight), while a fixed or bounded priority lets the index find the earliest due;
# - the records near the cursor are looked at past ?10 only, the highest id an earlier
#   run of this receive found without meta (0 for the first), not again from the cursor.
_NEXT = """
INSERT INTO queue_state(grp, pid, offset, due, deliveries, receipt)
SELECT ?1, ?2, r.id - ?3, ?5, 1, ?6 FROM (
    SELECT id, meta FROM records
    WHERE id > ?3 + coalesce((SELECT scanned FROM queue_cursors WHERE grp = ?1 AND pid = ?2), 0)
      AND id < ?4 ORDER BY id LIMIT 1) r
WHERE r.meta IS NULL
  AND NOT EXISTS (SELECT 1 FROM queue_state WHERE grp = ?1 AND pid = ?2 AND priority = 0 AND due <= ?7)
  AND NOT EXISTS (SELECT 1 FROM queue_state WHERE grp = ?1 AND pid = ?2 AND priority > 0 AND due <= ?7)
  AND NOT EXISTS (SELECT 1 FROM queue_state WHERE grp = ?1 AND pid = ?2 AND priority < 0 AND due <= ?7)
  AND NOT EXISTS (
    SELECT 1 FROM records WHERE id > max(r.id, ?10)
      AND id <= ?3 + coalesce((SELECT scanned FROM queue_cursors WHERE grp = ?1 AND pid = ?2), 0) + ?8
      AND id < ?4 AND meta IS NOT NULL)
  AND EXISTS (SELECT 1 FROM queue_groups WHERE grp = ?1 AND topic_id = ?9)
RETURNING offset,
    (SELECT ts FROM records WHERE id = ?3 + offset),
    (SELECT value FROM records WHERE id = ?3 + offset)
"""


_GROUP_EXISTS = "SELECT 1 FROM queue_groups WHERE grp = ? AND topic_id = ?"
_SCANNED = "SELECT scanned FROM queue_cursors WHERE grp = ? AND pid = ?"

# Finishing a lease (an ack, a dead letter): a record delivered more than
# once keeps the receipt that finished it (schema 8), so an earlier
# delivery's receipt stays refused. Both run in one transaction, this first.
_KEEP_FINISHED = (
    "INSERT OR REPLACE INTO queue_finished(pid, offset, grp, receipt) "
    "SELECT pid, offset, grp, receipt FROM queue_state "
    "WHERE grp = ? AND pid = ? AND offset = ? AND receipt = ? AND deliveries > 1"
)
_FINISH = "DELETE FROM queue_state WHERE grp = ? AND pid = ? AND offset = ? AND receipt = ?"


# A record whose job a cancel finished (tidelog.results) waits in its group only
# for a runner to ack it unrun: queue stats count it nowhere, unless leased.
_CANCELLED = (
    "EXISTS (SELECT 1 FROM job_states j WHERE j.grp = s.grp AND j.pid = s.pid AND j.offset = s.offset "
    "AND j.state = 'cancelled')"
)
_STATE_ROWS = f"SELECT receipt, due, {_CANCELLED} FROM queue_state s WHERE grp = ? AND pid = ?"


class SQLiteQueues(SQLiteBase):
    """Mixed into SQLiteStore; uses its connections, lock and pid cache."""

    def queue_open(
        self, group: str, topic: str, config: dict[str, Any], start: str, now: int
    ) -> dict[str, Any]:
        topic_id, pids = self._all_pids(topic)
        with self._write() as db:
            row = db.execute(
                "SELECT config FROM queue_groups WHERE grp = ? AND topic_id = ?", (group, topic_id)
            ).fetchone()
            if row is not None:
                return dict(json.loads(row[0]))
            db.execute(
                "INSERT INTO queue_groups(grp, topic_id, config, created) VALUES (?, ?, ?, ?)",
                (group, topic_id, json.dumps(config, sort_keys=True), now),
            )
            db.execute(
                "INSERT OR IGNORE INTO groups(name, mode, config, created) VALUES (?, 'queue', '{}', ?)",
                (group, now),
            )
            for pid in pids:
                scanned = self._last_offset(db, pid) if start == "latest" else 0
                db.execute(
                    "INSERT OR REPLACE INTO queue_cursors(grp, pid, scanned) VALUES (?, ?, ?)",
                    (group, pid, scanned),
                )
        return config

    @staticmethod
    def _last_offset(db: sqlite3.Connection, pid: int) -> int:
        lo = pid << OFFSET_BITS
        row = db.execute(
            "SELECT max(coalesce((SELECT max(id) FROM records WHERE id BETWEEN ?1 AND ?1 + ?3), ?1), "
            "?1 + p.base_offset) FROM partitions p WHERE p.id = ?2",
            (lo, pid, OFFSET_SPAN - 1),
        ).fetchone()
        return (row[0] - lo) if row else 0

    def queue_receive(
        self, group: str, topic: str, policy: LeasePolicy, now: int, limit: int
    ) -> tuple[list[Leased], int | None]:
        topic_id, pids = self._all_pids(topic) if topic not in self._pids else self._pids[topic]
        # The write transaction begins at the first primitive that needs it:
        # a single lease in one statement (`lease_next`) commits on its own.
        with ExitStack() as stack:
            return policy.lease(SQLiteLeaseTx(self, stack, group, topic, topic_id, pids), now, limit)

    def queue_settle_receive(
        self, group: str, topic: str, settles: Sequence[Settle], policy: LeasePolicy, now: int, limit: int
    ) -> tuple[list[LeaseLost | None], list[Leased], int | None]:
        with self._write():  # the calls below join this one transaction
            lost = self.queue_settle(group, topic, settles) if settles else []
            leased, next_due = self.queue_receive(group, topic, policy, now, limit) if limit else ([], None)
        return lost, leased, next_due

    def _receive_next(
        self,
        group: str,
        topic_id: int,
        pid: int,
        now: int,
        deadline: int,
        receipt: str,
        window: int,
        checked: int = 0,
    ) -> Leased | None:
        """The common case in one autocommit statement: lease the next new
        record of a one-partition topic when nothing released or expired is
        due first and no record within `window` of the cursor carries meta
        (so none has a delay or a priority). `checked`: the record id up to
        which an earlier call of the same receive found no meta, not looked at
        again. None sends the caller down the general path (which also tells a
        missing group from an empty queue)."""
        lo = pid << OFFSET_BITS
        with self._lock:
            # fetchall: step the statement to its end, so its transaction ends here.
            rows = self._db.execute(
                _NEXT, (group, pid, lo, lo + OFFSET_SPAN, deadline, receipt, now, window, topic_id, checked)
            ).fetchall()
        if not rows:
            return None
        offset, ts, value = rows[0]
        return Leased(0, offset, ts, value, None, 1, receipt, deadline)

    def _lease_row(self, db: sqlite3.Connection, group: str, pid: int, offset: int) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = db.execute(
            "SELECT receipt, deliveries FROM queue_state WHERE grp = ? AND pid = ? AND offset = ?",
            (group, pid, offset),
        ).fetchone()
        return row

    @staticmethod
    def _finished_receipt(db: sqlite3.Connection, group: str, pid: int, offset: int) -> str | None:
        row = db.execute(
            "SELECT receipt FROM queue_finished WHERE pid = ? AND offset = ? AND grp = ?",
            (pid, offset, group),
        ).fetchone()
        return None if row is None else str(row[0])

    def _lease_lost(
        self, db: sqlite3.Connection, group: str, topic: str, partition: int, pid: int, offset: int
    ) -> LeaseLost:
        row = self._lease_row(db, group, pid, offset)
        where = f"{topic!r}/{partition} offset {offset} in group {group!r}"
        if row is None:
            if self._finished_receipt(db, group, pid, offset) is not None:
                return LeaseLost(
                    f"record {where} was finished under a later delivery; "
                    "this receipt is from an earlier one (its lease had expired)"
                )
            return LeaseLost(f"record {where} is already done (acked or dead-lettered)")
        if row[0] is None:
            return LeaseLost(f"the lease on {where} was released or expired; it will be delivered again")
        return LeaseLost(
            f"the lease on {where} expired and the record was delivered again (delivery {row[1]})"
        )

    @staticmethod
    def _finish(db: sqlite3.Connection, group: str, pid: int, offset: int, receipt: str) -> bool:
        """End the lease `receipt` holds, keeping the receipt when it was not
        the record's first delivery; False when the receipt holds no lease."""
        key = (group, pid, offset, receipt)
        db.execute(_KEEP_FINISHED, key)
        return db.execute(_FINISH, key).rowcount == 1

    def queue_ack(self, group: str, topic: str, partition: int, offset: int, receipt: str) -> None:
        pid = self._pid(topic, partition)
        with self._lock:
            # The common case in one autocommit statement: a first delivery
            # leaves nothing behind when it is acked.
            cur = self._db.execute(_FINISH + " AND deliveries <= 1", (group, pid, offset, receipt))
            if cur.rowcount == 1:
                return
        with self._write() as db:
            if self._finish(db, group, pid, offset, receipt) or self._done(db, group, pid, offset, receipt):
                return  # acked now, or done already with this receipt: acking twice is a no-op
            raise self._lease_lost(db, group, topic, partition, pid, offset)

    def _update_lease(
        self, sql: str, params: tuple[Any, ...], group: str, topic: str, partition: int, offset: int
    ) -> None:
        pid = self._pid(topic, partition)
        with self._write() as db:
            cur = db.execute(sql, (*params, group, pid, offset))
            if cur.rowcount != 1:
                raise self._lease_lost(db, group, topic, partition, pid, offset)

    def queue_extend(
        self, group: str, topic: str, partition: int, offset: int, receipt: str, deadline: int
    ) -> None:
        self._update_lease(
            "UPDATE queue_state SET due = ? WHERE receipt = ? AND grp = ? AND pid = ? AND offset = ?",
            (deadline, receipt),
            group,
            topic,
            partition,
            offset,
        )

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
        self.queue_settle(group, topic, [Settle(RELEASE, partition, offset, receipt, due, behind)], one=True)

    def queue_settle(
        self, group: str, topic: str, settles: Sequence[Settle], one: bool = False
    ) -> list[LeaseLost | None]:
        # Partitions first, so a bad one refuses the batch before anything is written.
        pids = [self._pid(topic, s.partition) for s in settles]
        _, all_pids = self._pids[topic]
        marks = ",".join("?" * len(all_pids))
        out: list[LeaseLost | None] = []
        with self._write() as db:
            for s, pid in zip(settles, pids):
                key = (group, pid, s.offset, s.receipt)
                if s.action == ACK:
                    db.execute(_KEEP_FINISHED, key)
                    cur = db.execute(_FINISH, key)
                elif s.action == EXTEND:
                    cur = db.execute(
                        "UPDATE queue_state SET due = ? "
                        "WHERE grp = ? AND pid = ? AND offset = ? AND receipt = ?",
                        (s.time, *key),
                    )
                elif s.action == RETURN:
                    cur = db.execute(
                        "UPDATE queue_state SET due = 0, receipt = NULL, seq = 0, deliveries = deliveries - 1 "
                        "WHERE grp = ? AND pid = ? AND offset = ? AND receipt = ?",
                        key,
                    )
                elif s.behind:
                    # Behind every record of the group due at that time: one
                    # more than the highest tie-breaker among them.
                    cur = db.execute(
                        "UPDATE queue_state SET due = ?, receipt = NULL, seq = (SELECT coalesce(max(seq), 0) + 1 "
                        f"FROM queue_state WHERE grp = ? AND pid IN ({marks}) AND due = ?) "
                        "WHERE grp = ? AND pid = ? AND offset = ? AND receipt = ?",
                        (s.time, group, *all_pids, s.time, *key),
                    )
                else:
                    cur = db.execute(
                        "UPDATE queue_state SET due = ?, receipt = NULL, seq = 0 "
                        "WHERE grp = ? AND pid = ? AND offset = ? AND receipt = ?",
                        (s.time, *key),
                    )
                if cur.rowcount == 1 or (s.action == ACK and self._done(db, group, pid, s.offset, s.receipt)):
                    out.append(None)  # (acking what is done already is a no-op)
                    continue
                lost = self._lease_lost(db, group, topic, s.partition, pid, s.offset)
                if one:
                    raise lost
                else:
                    out.append(lost)
        return out

    def _done(self, db: sqlite3.Connection, group: str, pid: int, offset: int, receipt: str) -> bool:
        """The record is finished, and `receipt` may have finished it: its
        final receipt when it was delivered more than once, else any (a
        record finished at its first delivery had no other receipt)."""
        if self._lease_row(db, group, pid, offset) is not None:
            return False
        finished = self._finished_receipt(db, group, pid, offset)
        if finished is not None:
            return finished == receipt
        row = db.execute(_SCANNED, (group, pid)).fetchone()
        return row is not None and offset <= row[0]

    def queue_dead_letter(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        receipt: str,
        dead_letter: AppendBatch,
    ) -> int:
        pid = self._pid(topic, partition)
        topic_id = self._pids[topic][0]
        with self._write() as db:
            if not self._finish(db, group, pid, offset, receipt):
                raise self._lease_lost(db, group, topic, partition, pid, offset)
            # After the lease: a stale receipt is LeaseLost even when the
            # dead-letter topic is missing (UnknownTopic here rolls back).
            dlq_pid = self._pid(dead_letter.topic, dead_letter.partition)
            first = self._append_in(db, dlq_pid, dead_letter)
            if first is None:
                raise UnknownTopic(f"dead-letter topic {dead_letter.topic!r} does not exist")
            db.execute(
                "UPDATE queue_groups SET dead_lettered = dead_lettered + 1 WHERE grp = ? AND topic_id = ?",
                (group, topic_id),
            )
        return first

    def queue_stats(self, group: str, topic: str, policy: LeasePolicy, now: int) -> QueueStats:
        topic_id, pids = self._all_pids(topic)
        available = in_flight = delayed = 0
        oldest: int | None = None  # when the oldest available record became available

        def older(since: int | None) -> None:
            nonlocal oldest
            if since is not None and (oldest is None or since < oldest):
                oldest = since

        with self._read() as conn:
            row = conn.execute(
                "SELECT dead_lettered FROM queue_groups WHERE grp = ? AND topic_id = ?", (group, topic_id)
            ).fetchone()
            dead = row[0] if row else 0
            for pid in pids:
                lo = pid << OFFSET_BITS
                for receipt, due, cancelled in conn.execute(_STATE_ROWS, (group, pid)):
                    if due > now and receipt is not None:
                        in_flight += 1
                    elif cancelled:
                        continue
                    elif due <= now:
                        available += 1
                    else:
                        delayed += 1
                # Released, expired or passed over: as old as their records (a
                # nack to the front, due 0, is an order, not a time).
                older(
                    policy.available_since(
                        conn.execute(
                            "SELECT r.ts, r.meta FROM queue_state s JOIN records r ON r.id = ?1 + s.offset "
                            f"WHERE s.grp = ?2 AND s.pid = ?3 AND s.due <= ?4 AND NOT {_CANCELLED} ORDER BY r.ts",
                            (lo, group, pid, now),
                        )
                    )
                )
                srow = conn.execute(_SCANNED, (group, pid)).fetchone()
                scanned = srow[0] if srow else 0
                last = conn.execute(
                    "SELECT max(id) - ?1 FROM records WHERE id BETWEEN ?1 AND ?2", (lo, lo + OFFSET_SPAN - 1)
                ).fetchone()[0]
                if last is None or last <= scanned:
                    continue
                cancelled_past = {
                    offset
                    for (offset,) in conn.execute(
                        "SELECT offset FROM job_states WHERE grp = ? AND pid = ? AND offset > ? AND offset <= ? "
                        "AND state = 'cancelled'",
                        (group, pid, scanned, last),
                    )
                }
                waiting = last - scanned - len(cancelled_past)
                # Only records with a meta blob can carry a delay.
                for rid, ts, meta in conn.execute(
                    "SELECT id, ts, meta FROM records WHERE id > ?1 AND id < ?2 AND meta IS NOT NULL",
                    (lo + scanned, lo + OFFSET_SPAN),
                ):
                    if rid - lo in cancelled_past:
                        continue
                    due = policy.due(ts, meta)
                    if due > now:
                        waiting -= 1
                        delayed += 1
                    else:
                        older(due)
                available += waiting
                for rid, ts in conn.execute(
                    "SELECT id, ts FROM records WHERE id > ?1 AND id < ?2 AND meta IS NULL ORDER BY id LIMIT ?3",
                    (lo + scanned, lo + OFFSET_SPAN, len(cancelled_past) + 1),
                ):
                    if rid - lo not in cancelled_past:
                        older(ts)
                        break
        age = 0 if oldest is None else max(0, now - oldest)
        return QueueStats(available, in_flight, delayed, dead, age)


class SQLiteLeaseTx:
    """A receive's primitives on one queue group (`LeaseTx`), for `tidelog.leasing`.

    The write transaction begins lazily, at the first primitive that needs
    it, and ends with the caller's `stack`: the common receive, one lease in
    one statement, runs in autocommit and opens none. Inside a transaction
    already open on this thread (`queue_settle_receive`) everything joins it.
    """

    def __init__(
        self,
        store: SQLiteQueues,
        stack: ExitStack,
        group: str,
        topic: str,
        topic_id: int,
        pids: tuple[int, ...],
    ):
        self._store = store
        self._stack = stack
        self._db: sqlite3.Connection | None = None
        self.group = group
        self.topic = topic
        self.topic_id = topic_id
        self.pids = pids
        self.partitions = len(pids)
        self._exists = False  # a lease proved the group exists

    def _begin(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._stack.enter_context(self._store._write())
        return self._db

    def lease_next(self, now: int, deadline: int, receipts: Sequence[str], window: int) -> list[Leased]:
        store, group, topic_id, pid = self._store, self.group, self.topic_id, self.pids[0]
        if len(receipts) == 1:
            lease = store._receive_next(group, topic_id, pid, now, deadline, receipts[0], window)
            self._exists = lease is not None
            return [] if lease is None else [lease]
        # Several: in the receive's transaction, which the general path then joins.
        db = self._begin()
        lo = pid << OFFSET_BITS
        row = db.execute(_SCANNED, (group, pid)).fetchone()
        cursor = 0 if row is None else int(row[0])
        checked = 0  # records up to this id are known to carry no meta (_NEXT's ?10)
        out: list[Leased] = []
        for receipt in receipts:
            left = window - len(out)
            lease = store._receive_next(group, topic_id, pid, now, deadline, receipt, left, checked)
            if lease is None:
                break
            # It found none with meta up to where its cursor plus its window reached.
            checked = max(checked, lo + cursor + left)
            cursor = lease.offset
            out.append(lease)
        self._exists = bool(out)
        return out

    def candidates(self, now: int, limit: int, window: int, ordered: bool) -> Candidates:
        db = self._begin()
        # A handle may outlive its group (XGROUP DESTROY): never lease for it.
        if not self._exists and not db.execute(_GROUP_EXISTS, (self.group, self.topic_id)).fetchone():
            raise UnknownGroup(f"queue group {self.group!r} does not exist on topic {self.topic!r}")
        due: list[StateRow] = []
        new: dict[int, NewRecords] = {}
        for partition, pid in enumerate(self.pids):
            lo = pid << OFFSET_BITS
            # One statement: what is due in queue_state (kind 0), then the
            # records past the cursor (kind 1).
            rows = db.execute(
                _CANDIDATES, (self.group, pid, now, limit, lo, lo + OFFSET_SPAN, window, ordered)
            ).fetchall()
            due += [
                StateRow(partition, offset, at, seq, deliveries, priority)
                for kind, offset, at, deliveries, seq, priority in rows
                if kind == 0
            ]
            # (kind, offset, ts, value, meta, NULL)
            new[partition] = NewRecords.of([row[1:5] for row in rows if row[0] == 1])
        return Candidates(due, new)

    def held(self, pairs: list[tuple[int, bytes]]) -> set[tuple[int, bytes]]:
        db = self._begin()
        values = ",".join("(?, ?)" for _ in pairs)
        args = [x for partition, key in pairs for x in (self.pids[partition], key)]
        partition_of = {pid: i for i, pid in enumerate(self.pids)}
        return {
            (partition_of[pid], key)
            for pid, key in db.execute(
                f"SELECT DISTINCT pid, okey FROM queue_state WHERE grp = ? AND (pid, okey) IN (VALUES {values})",
                (self.group, *args),
            )
        }

    def apply(self, plan: LeasePlan) -> tuple[list[Leased], int | None]:
        db = self._begin()
        group, pids, deadline = self.group, self.pids, plan.deadline
        out: list[Leased] = []
        for partition, offset, receipt, deliveries, priority, key, new in plan.takes:
            pid = pids[partition]
            record: tuple[Any, ...] | None = new
            if record is None:
                lo = pid << OFFSET_BITS
                record = db.execute(
                    "SELECT id - ?1, ts, value, meta FROM records WHERE id = ?2", (lo, lo + offset)
                ).fetchone()
                if record is None:  # removed by retention meanwhile: nothing to deliver
                    db.execute(
                        "DELETE FROM queue_state WHERE grp = ? AND pid = ? AND offset = ?",
                        (group, pid, offset),
                    )
                    continue
                db.execute(
                    "UPDATE queue_state SET due = ?, seq = 0, deliveries = deliveries + 1, receipt = ? "
                    "WHERE grp = ? AND pid = ? AND offset = ?",
                    (deadline, receipt, group, pid, offset),
                )
            else:
                db.execute(
                    "INSERT INTO queue_state(grp, pid, offset, due, deliveries, receipt, priority, okey) "
                    "VALUES (?, ?, ?, ?, 1, ?, ?, ?)",
                    (group, pid, offset, deadline, receipt, priority, key),
                )
            _, ts, value, meta = record
            out.append(Leased(partition, offset, ts, value, meta, deliveries + 1, receipt, deadline))
        # Parked records wait in queue_state (until due, or for their turn by
        # priority); the insert trigger moves the cursor past them.
        if plan.parks:
            db.executemany(
                "INSERT INTO queue_state(grp, pid, offset, due, deliveries, receipt, priority, okey) "
                "VALUES (?, ?, ?, ?, 0, NULL, ?, ?)",
                [
                    (group, pids[partition], offset, due, priority, key)
                    for partition, offset, due, priority, key in plan.parks
                ],
            )
        next_due = None
        if len(out) < plan.limit:
            for pid in pids:
                row = db.execute(
                    "SELECT min(due) FROM queue_state WHERE grp = ? AND pid = ? AND due > ?",
                    (group, pid, plan.now),
                ).fetchone()
                if row[0] is not None and (next_due is None or row[0] < next_due):
                    next_due = row[0]
        return out, next_due
