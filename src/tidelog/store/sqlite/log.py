"""Topics, records and committed offsets on SQLite."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any

from ...errors import (
    InvalidValue,
    StoreError,
    TopicConflict,
    UnknownTopic,
)
from .. import statements
from ..base import (
    AppendBatch,
    GroupOffset,
    PartitionInfo,
    PartitionOffsets,
    Replayed,
    Row,
    RowT,
    TopicInfo,
)
from ..dialect import SQLITE
from ..failures import translates_itself
from . import streaming, txns
from .base import (
    _APPEND_ONE,
    _APPEND_ONE_META,
    _LAST_ID,
    OFFSET_BITS,
    OFFSET_SPAN,
    SQLITE_MISMATCH,
    WATCH_BUSY_TICK_S,
    WATCH_TICK_S,
    SQLiteBase,
    _now_ms,
    _PartitionGone,
    store_failure,
)


class SQLiteLog(SQLiteBase):
    """Topics, records and committed offsets."""

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback()` when another connection commits to the file.

        SQLite has no cross-process notification, so a daemon thread reads
        `PRAGMA data_version` on a short tick; what this store commits
        (appends, settles) wakes this process's waiters directly (the Log
        and the queues tell the notifier), so only other connections' commits
        call back: another process, or another store on the same file.
        """
        if self.memory:
            return  # nobody else can write to a private in-memory database
        # The first reading is taken here, then the callback runs once (as
        # PostgreSQL's watch does once LISTEN is in place): a commit between
        # a waiter's last read and this reading would otherwise go unseen,
        # and the waiter would sleep out its whole wait.
        first = self._data_version()
        if first is None:
            return

        def poll() -> None:
            last = first
            tick = WATCH_TICK_S
            while (version := self._data_version()) is not None:
                if version != last:
                    callback()
                    tick = WATCH_BUSY_TICK_S
                else:
                    tick = min(tick * 2, WATCH_TICK_S)
                last = version
                time.sleep(tick)

        threading.Thread(target=poll, name="tidelog-sqlite-watch", daemon=True).start()
        callback()

    def _data_version(self) -> int | None:
        """The writer connection's data version, None once the store is closed.

        Asked of the writer connection, under its lock (closing a connection
        while another thread is inside execute() can crash the interpreter):
        its data version moves on every commit but its own, so this store's
        own writes (a publish each millisecond under load) neither call the
        watch back nor keep its busy tick going.
        """
        with self._lock:
            if self._closed:
                return None
            try:
                return int(self._db.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return None

    def create_topic(self, name: str, partitions: int, config: dict[str, Any]) -> tuple[TopicInfo, bool]:
        with self._write() as db:
            row = db.execute(
                "SELECT name, partitions, config, created FROM topics WHERE name = ?", (name,)
            ).fetchone()
            if row is not None:
                info = self._topic_info(row)
                if info.partitions != partitions:
                    raise TopicConflict(
                        f"topic {name!r} exists with {info.partitions} partitions, not {partitions}; "
                        "use add_partitions to grow it"
                    )
                return info, False
            created = _now_ms()
            cur = db.execute(
                "INSERT INTO topics(name, partitions, config, created) VALUES (?, ?, ?, ?)",
                (name, partitions, json.dumps(config, sort_keys=True), created),
            )
            topic_id = cur.lastrowid
            db.executemany(
                "INSERT INTO partitions(topic_id, partition) VALUES (?, ?)",
                zip(repeat(topic_id), range(partitions)),
            )
            self._pids.pop(name, None)
            return TopicInfo(name, partitions, dict(config), created), True

    def topic(self, name: str) -> TopicInfo | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT name, partitions, config, created FROM topics WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else self._topic_info(row)

    def topics(self) -> list[TopicInfo]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT name, partitions, config, created FROM topics ORDER BY name"
            ).fetchall()
        return [self._topic_info(r) for r in rows]

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        with self._write() as db:
            row = db.execute("SELECT id, partitions FROM topics WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise UnknownTopic(f"topic {name!r} does not exist")
            topic_id, current = row
            if partitions > current:
                db.executemany(
                    "INSERT INTO partitions(topic_id, partition) VALUES (?, ?)",
                    zip(repeat(topic_id), range(current, partitions)),
                )
                db.execute("UPDATE topics SET partitions = ? WHERE id = ?", (partitions, topic_id))
            self._pids.pop(name, None)
            row = db.execute(
                "SELECT name, partitions, config, created FROM topics WHERE id = ?", (topic_id,)
            ).fetchone()
        return self._topic_info(row)

    def delete_topic(self, name: str) -> bool:
        with self._write() as db:
            row = db.execute("SELECT id FROM topics WHERE name = ?", (name,)).fetchone()
            if row is None:
                return False
            pids = [r[0] for r in db.execute("SELECT id FROM partitions WHERE topic_id = ?", (row[0],))]
            for pid in pids:
                lo = pid << OFFSET_BITS
                db.execute("DELETE FROM records WHERE id BETWEEN ? AND ?", (lo, lo + OFFSET_SPAN - 1))
                db.execute("DELETE FROM wire_batches WHERE id BETWEEN ? AND ?", (lo, lo + OFFSET_SPAN - 1))
                db.execute("DELETE FROM offsets WHERE pid = ?", (pid,))
                db.execute("DELETE FROM classic_commits WHERE pid = ?", (pid,))
                db.execute("DELETE FROM queue_cursors WHERE pid = ?", (pid,))
                db.execute(
                    "DELETE FROM queue_state WHERE grp IN (SELECT grp FROM queue_groups) AND pid = ?", (pid,)
                )
                db.execute("DELETE FROM queue_finished WHERE pid = ?", (pid,))
            db.execute("DELETE FROM queue_groups WHERE topic_id = ?", (row[0],))
            db.execute(
                "DELETE FROM group_assignment WHERE grp IN (SELECT grp FROM group_state) AND topic = ?",
                (name,),
            )
            db.execute("DELETE FROM partitions WHERE topic_id = ?", (row[0],))
            db.execute("DELETE FROM topics WHERE id = ?", (row[0],))
            self._pids.pop(name, None)
        return True

    def partitions(self, topic: str) -> list[PartitionInfo]:
        self._pid(topic, 0, refresh=True)
        _, pids = self._pids[topic]
        out = []
        with self._read() as conn:
            for partition, pid in enumerate(pids):
                lo = pid << OFFSET_BITS
                first, last, count, size = conn.execute(
                    "SELECT min(id), max(id), count(*), coalesce(sum(length(value) + coalesce(length(meta), 0)), 0) "
                    "FROM records WHERE id BETWEEN ? AND ?",
                    (lo + 1, lo + OFFSET_SPAN - 1),
                ).fetchone()
                base_offset, removed = conn.execute(
                    "SELECT base_offset, removed_through FROM partitions WHERE id = ?", (pid,)
                ).fetchone() or (0, 0)
                if count:
                    last_offset = max(last - lo, base_offset)
                    out.append(PartitionInfo(partition, first - lo, last_offset, count, size))
                else:
                    out.append(PartitionInfo(partition, base_offset + 1, base_offset, 0, 0))
        return out

    def offsets(self, topic: str) -> list[PartitionOffsets]:
        # Two index seeks a partition (the records' key is the offset), no count.
        self._pid(topic, 0, refresh=True)
        _, pids = self._pids[topic]
        out = []
        with self._read() as conn:
            for partition, pid in enumerate(pids):
                lo = pid << OFFSET_BITS
                first, last = conn.execute(
                    f"SELECT (SELECT min(id) FROM records WHERE id BETWEEN ?1 + 1 AND ?1 + {OFFSET_SPAN - 1}) - ?1, "
                    f"{_LAST_ID} - ?1 FROM partitions p WHERE p.id = ?2",
                    (lo, pid),
                ).fetchone()
                out.append(PartitionOffsets(partition, last + 1 if first is None else first, last))
        return out

    @translates_itself
    def append_one(
        self, topic: str, partition: int, timestamp: int, value: bytes | str, meta: bytes | None = None
    ) -> int:
        entry = self._pids.get(topic)
        for attempt in (0, 1):
            if entry is None or attempt or partition >= len(entry[1]):
                try:
                    pid = self._pid(topic, partition, refresh=attempt == 1)
                except sqlite3.Error as e:
                    raise store_failure(e, f"append to {topic!r}/{partition}") from e
            else:
                pid = entry[1][partition]
            lo = pid << OFFSET_BITS
            with self._lock:
                if self._closed:
                    raise StoreError("the store is closed")
                try:
                    cur = self._db_cursor
                    if meta is None:
                        cur.execute(_APPEND_ONE, (lo, pid, timestamp, value))
                    else:
                        cur.execute(_APPEND_ONE_META, (lo, pid, timestamp, value, meta))
                    return cur.lastrowid - lo  # type: ignore[operator]  # set by every INSERT
                except UnicodeEncodeError:
                    raise InvalidValue("value is not valid Unicode (it holds a lone surrogate)") from None
                except sqlite3.Error as e:
                    # Errors sqlite3 raises itself (a closed cursor) carry no code.
                    if getattr(e, "sqlite_errorcode", None) != SQLITE_MISMATCH:
                        raise store_failure(e, f"append to {topic!r}/{partition}") from e
            # The partition row is gone: the topic was deleted (and maybe
            # recreated) by another process since we cached its pids.
        raise UnknownTopic(f"topic {topic!r} does not exist")

    def append_many(
        self, batches: Sequence[AppendBatch], txn: str | None = None, txn_since: int = 0
    ) -> list[int] | Replayed:
        gone = batches[0]
        for attempt in (0, 1):
            pids = [self._pid(b.topic, b.partition, refresh=attempt == 1) for b in batches]
            try:
                with self._write() as db:
                    if txn is not None and (replayed := txns.replayed(db, txn, txn_since)) is not None:
                        return replayed
                    firsts = []
                    for batch, pid in zip(batches, pids):
                        first = self._append_in(db, pid, batch)
                        if first is None:
                            gone = batch
                            raise _PartitionGone  # rolls the whole transaction back
                        firsts.append(first)
                    if txn is not None:
                        done = [[b.topic, b.partition, f, len(b.values)] for b, f in zip(batches, firsts)]
                        txns.record(db, txn, batches[0].timestamp, done)
                return firsts
            except _PartitionGone:
                continue  # our cached pids were stale: look them up again once
            except UnicodeEncodeError:
                raise InvalidValue("a value is not valid Unicode (it holds a lone surrogate)") from None
            except sqlite3.Error as e:
                raise store_failure(e, "append") from e
        raise UnknownTopic(f"topic {gone.topic!r} does not exist")

    def append_stream(self, batches: Iterable[AppendBatch], txn: str) -> list[int] | Replayed:
        # On a file it stages while another process writes (streaming.py).
        try:
            return streaming.append_stream(self, batches, txn)
        except UnicodeEncodeError:
            raise InvalidValue("a value is not valid Unicode (it holds a lone surrogate)") from None
        except sqlite3.Error as e:
            raise store_failure(e, "append") from e

    def read(self, topic: str, partition: int, after: int, limit: int) -> list[Row]:
        return self._read_rows(None, topic, partition, after, limit)

    def read_into(
        self, make: Callable[[Row], RowT], topic: str, partition: int, after: int, limit: int
    ) -> list[RowT]:
        return self._read_rows(make, topic, partition, after, limit)

    def _read_rows(
        self, make: Callable[[Row], Any] | None, topic: str, partition: int, after: int, limit: int
    ) -> list[Any]:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._read() as conn:
            cur = conn.execute(
                "SELECT id - ?1, ts, value, meta FROM records WHERE id > ?2 AND id < ?3 ORDER BY id LIMIT ?4",
                # Past the span nothing is held; the bound keeps SQLite's integers 64-bit.
                (lo, lo + min(after, OFFSET_SPAN), lo + OFFSET_SPAN, limit),
            )
            # From the cursor into `make`: each row tuple is freed at once.
            rows = cur.fetchall() if make is None else list(map(make, cur))
            if not rows or rows[0][0] != after + 1:
                # A gap: compaction (fine) or retention removed what was asked for.
                self.check_start(conn, topic, partition, pid, after)
        if not rows:
            # An idle read is the moment to notice a topic deleted elsewhere.
            self._pid(topic, partition, refresh=True)
        return rows

    def wire_batches(
        self, topic: str, partition: int, after: int, high: int, max_bytes: int
    ) -> list[tuple[int, int, bytes, int]]:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        want = min(after, OFFSET_SPAN - 2) + 1
        out: list[tuple[int, int, bytes, int]] = []
        size = 0
        with self._read() as conn:
            # From the batch holding `want` (the last to begin at or before
            # it) on; a batch counts while its range holds all its records.
            cur = conn.execute(
                "SELECT id - ?1, last, data, size, "
                "(SELECT count(*) FROM records r WHERE r.id BETWEEN w.id AND ?1 + w.last) = last - (id - ?1) + 1 "
                "FROM wire_batches w WHERE id >= "
                "(SELECT max(id) FROM wire_batches WHERE id > ?1 AND id <= ?1 + ?2) "
                "AND id < ?1 + ?3 ORDER BY id",
                (lo, want, min(high, OFFSET_SPAN - 1) + 1),
            )
            for first, last, data, counts, whole in cur:
                if out:
                    if first != out[-1][1] + 1 or size + counts > max_bytes:
                        break
                elif last < want:
                    break
                if not whole or last > high:
                    break
                out.append((first, last, data, counts))
                size += counts
        return out

    def read_before(self, topic: str, partition: int, before: int, limit: int) -> list[Row]:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._read() as conn:
            return conn.execute(
                "SELECT id - ?1, ts, value, meta FROM records WHERE id > ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3",
                (lo, lo + min(before, OFFSET_SPAN), limit),
            ).fetchall()

    def trim(self, topic: str, partition: int, before: int) -> int:
        pid = self._pid(topic, partition)
        lo = pid << OFFSET_BITS
        with self._write() as db:
            cur = db.execute("DELETE FROM records WHERE id > ? AND id < ?", (lo, lo + before))
            removed = cur.rowcount
            # A wire batch that began before `before` lost a record at least.
            db.execute("DELETE FROM wire_batches WHERE id > ? AND id < ?", (lo, lo + before))
            if removed:
                # Offsets never repeat, even when the partition is now empty.
                db.execute(
                    "UPDATE partitions SET base_offset = max(base_offset, ?) WHERE id = ?", (before - 1, pid)
                )
                db.execute("DELETE FROM queue_state WHERE pid = ? AND offset < ?", (pid, before))
                db.execute("DELETE FROM queue_finished WHERE pid = ? AND offset < ?", (pid, before))
        return removed

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        pid = self._pid(topic, partition)
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._commit_in(self._db, group, topic, partition, pid, offset)

    def committed(self, group: str, topic: str, partition: int) -> int:
        pid = self._pid(topic, partition)
        with self._read() as conn:
            return statements.committed(conn, SQLITE, group, pid)

    def seek(self, group: str, topic: str, partition: int, offset: int) -> None:
        pid = self._pid(topic, partition)
        with self._write() as db:
            self._bounds_check(db, topic, partition, pid, offset)
            self.check_start(db, topic, partition, pid, offset)
            db.execute(
                "INSERT INTO offsets(grp, pid, committed) VALUES (?, ?, ?) "
                "ON CONFLICT(grp, pid) DO UPDATE SET committed = excluded.committed",
                (group, pid, offset),
            )

    def ensure_group(self, group: str, mode: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO groups(name, mode, config, created) VALUES (?, ?, '{}', ?)",
                (group, mode, _now_ms()),
            )

    def group_offsets(self, group: str) -> list[GroupOffset]:
        with self._read() as conn:
            return statements.group_offsets(conn, SQLITE, group)

    def groups(self) -> list[str]:
        with self._read() as conn:
            return statements.group_names(conn, SQLITE)
