"""Topics, records and committed offsets on PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg  # present: .base refused to import without it
from psycopg.types.json import Jsonb

from ...errors import (
    InvalidRequest,
    TopicConflict,
    UnknownTopic,
)
from .. import statements
from ..base import AppendBatch, GroupOffset, PartitionInfo, Replayed, Row, TopicInfo
from ..dialect import POSTGRES
from .base import (
    _APPEND,
    _APPEND_ONE,
    _COMMIT,
    _COMMIT_FORWARD,
    _READ_ANY,
    _READ_BYTES,
    _READ_TEXT,
    _SEEK,
    _SIZE,
    _TOPIC_COLUMNS,
    CONNECT_TIMEOUT_S,
    LISTEN_TICK_S,
    MAX_OFFSET,
    RECONNECT_S,
    PostgresBase,
    _append_all,
    _append_params,
    _blobs,
    _bytes_row,
    _columns,
    _now_ms,
    _PartitionGone,
    _size,
    _text_row,
    _texts,
    one,
    stored,
)

# A streamed write's lock on every partition of its topic, in pid order.
_LOCK_TOPIC = """
SELECT id FROM tidelog_partitions
WHERE topic_id = (SELECT topic_id FROM tidelog_partitions WHERE id = %(pid)s)
ORDER BY id FOR UPDATE
"""

_BEFORE = """
WITH last AS (
    SELECT max("offset") AS top, (SELECT min("offset") FROM tidelog_records WHERE pid = %(pid)s) AS low
    FROM tidelog_records WHERE pid = %(pid)s AND "offset" < %(before)s
)
SELECT last.top, last.low, r."offset", r.ts, r.value, r.text, r.meta
FROM last LEFT JOIN tidelog_records r
  ON r.pid = %(pid)s AND r."offset" <= last.top AND r."offset" > last.top - %(limit)s
ORDER BY r."offset" DESC
"""

# A record taken again after the cursor moved back is handed to this
# consumer afresh, as Redis does.

_TRIM = f"""
WITH d AS (
    DELETE FROM tidelog_records WHERE pid = %(pid)s AND "offset" < %(before)s RETURNING {_SIZE} AS size
), s AS (SELECT count(*) AS n, coalesce(sum(size), 0) AS b FROM d)
UPDATE tidelog_partitions p SET records = p.records - s.n, bytes = p.bytes - s.b
FROM s WHERE p.id = %(pid)s
RETURNING s.n
"""


class PostgresLog(PostgresBase):
    """Topics, records and committed offsets."""

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback()` when another connection appends to this log.

        LISTEN runs on a connection of its own, read by a daemon thread. The
        callback also runs once LISTEN is in place (and after a reconnect):
        anything appended before then was not announced to us.
        """
        conn: psycopg.Connection | None = None
        schema_name = None
        try:
            conn, schema_name = self._listen()
        except psycopg.Error:
            pass  # the thread keeps trying
        threading.Thread(
            target=self._receive, args=(callback, conn, schema_name), daemon=True, name="tidelog-pg-listen"
        ).start()
        if conn is not None:
            callback()

    def _listen(self) -> tuple[psycopg.Connection, str]:
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        conn.execute("LISTEN tidelog")
        schema_name = one(conn.execute("SELECT current_schema()"))[0]
        return conn, schema_name

    def _receive(
        self, callback: Callable[[], None], conn: psycopg.Connection | None, schema_name: str | None
    ) -> None:
        while not self._closed:
            try:
                if conn is None:
                    conn, schema_name = self._listen()
                    callback()
                for note in conn.notifies(timeout=LISTEN_TICK_S):
                    schema_of, _, origin = note.payload.rpartition("/")
                    if schema_of == schema_name and origin != self._origin:
                        callback()
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(RECONNECT_S)
        if conn is not None:
            conn.close()

    def create_topic(self, name: str, partitions: int, config: dict[str, Any]) -> tuple[TopicInfo, bool]:
        created = _now_ms()
        with self._conn() as conn:
            # One statement: the topic and its partitions appear together, and
            # of two processes creating one name, one creates and one finds it.
            row = conn.execute(
                """
                WITH t AS (
                    INSERT INTO tidelog_topics (name, partitions, config, created)
                    VALUES (%(name)s, %(n)s, %(config)s, %(created)s)
                    ON CONFLICT (name) DO NOTHING RETURNING id
                ), p AS (
                    INSERT INTO tidelog_partitions (topic_id, partition)
                    SELECT t.id, g FROM t, generate_series(0, %(n)s - 1) AS g
                )
                SELECT id FROM t
                """,
                {"name": name, "n": partitions, "config": Jsonb(config), "created": created},
            ).fetchone()
            if row is None:
                existing = conn.execute(_TOPIC_COLUMNS + " WHERE name = %s", (name,)).fetchone()
        self._pids.pop(name, None)
        if row is not None:
            return TopicInfo(name, partitions, dict(config), created), True
        if existing is None:  # created and deleted again between our two statements
            return self.create_topic(name, partitions, config)
        info = self._topic_info(existing)
        if info.partitions != partitions:
            raise TopicConflict(
                f"topic {name!r} exists with {info.partitions} partitions, not {partitions}; "
                "use add_partitions to grow it"
            )
        return info, False

    def topic(self, name: str) -> TopicInfo | None:
        with self._conn() as conn:
            row = conn.execute(_TOPIC_COLUMNS + " WHERE name = %s", (name,)).fetchone()
        return None if row is None else self._topic_info(row)

    def topics(self) -> list[TopicInfo]:
        with self._conn() as conn:
            rows = conn.execute(_TOPIC_COLUMNS + " ORDER BY name").fetchall()
        return [self._topic_info(r) for r in rows]

    def add_partitions(self, name: str, partitions: int) -> TopicInfo:
        with self._conn() as conn, conn.transaction():
            # The topic's row lock makes concurrent growers take turns.
            row = conn.execute(
                "SELECT id, partitions FROM tidelog_topics WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if row is None:
                raise UnknownTopic(f"topic {name!r} does not exist")
            topic_id, current = row
            if partitions > current:
                conn.execute(
                    "INSERT INTO tidelog_partitions (topic_id, partition) "
                    "SELECT %s, generate_series(%s::integer, %s::integer - 1)",
                    (topic_id, current, partitions),
                )
                conn.execute(
                    "UPDATE tidelog_topics SET partitions = %s WHERE id = %s", (partitions, topic_id)
                )
            row = one(conn.execute(_TOPIC_COLUMNS + " WHERE id = %s", (topic_id,)))
        self._pids.pop(name, None)
        return self._topic_info(row)

    def delete_topic(self, name: str) -> bool:
        with self._conn() as conn, conn.transaction():
            row = conn.execute("DELETE FROM tidelog_topics WHERE name = %s RETURNING id", (name,)).fetchone()
            if row is None:
                return False
            # Lock the partitions in pid order (as appends do): this waits for
            # appends in flight, and no append starts on them after this.
            pids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM tidelog_partitions WHERE topic_id = %s ORDER BY id FOR UPDATE", (row[0],)
                )
            ]
            conn.execute("DELETE FROM tidelog_partitions WHERE topic_id = %s", (row[0],))
            conn.execute("DELETE FROM tidelog_records WHERE pid = ANY(%s)", (pids,))
            conn.execute("DELETE FROM tidelog_offsets WHERE pid = ANY(%s)", (pids,))
            conn.execute("DELETE FROM tidelog_classic_commits WHERE pid = ANY(%s)", (pids,))
        self._pids.pop(name, None)
        return True

    def partitions(self, topic: str) -> list[PartitionInfo]:
        # The partition row counts its records and bytes, so describing needs
        # no scan: one index probe for the oldest record held.
        with self._conn() as conn:
            rows = conn.execute(
                """
                SELECT p.partition, p.last_offset,
                       (SELECT min("offset") FROM tidelog_records WHERE pid = p.id), p.records, p.bytes
                FROM tidelog_topics t JOIN tidelog_partitions p ON p.topic_id = t.id
                WHERE t.name = %s ORDER BY p.partition
                """,
                (topic,),
            ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        return [
            PartitionInfo(partition, last + 1, last, 0, 0)
            if first is None
            else PartitionInfo(partition, first, last, records, size)
            for partition, last, first, records, size in rows
        ]

    def append_one(
        self, topic: str, partition: int, timestamp: int, value: bytes | str, meta: bytes | None = None
    ) -> int:
        blob, text = _columns(value)
        params = [_size(blob, text, meta), 0, timestamp, blob, text, meta]
        entry = self._pids.get(topic)
        for attempt in (0, 1):
            if entry is None or attempt or partition >= len(entry[1]):
                params[1] = self._pid(topic, partition, refresh=attempt == 1)
            else:
                params[1] = entry[1][partition]
            with self._conn() as conn:
                row = conn.execute(_APPEND_ONE, params).fetchone()
            if row is not None:
                return int(row[0])
            # The partition row is gone: the topic was deleted (and maybe
            # recreated) elsewhere since we cached its pids.
        raise UnknownTopic(f"topic {topic!r} does not exist")

    def append_many(
        self, batches: Sequence[AppendBatch], txn: str | None = None, txn_since: int = 0
    ) -> list[int] | Replayed:
        params = [_append_params(b) for b in batches]
        gone = batches[0]
        for attempt in (0, 1):
            for p, b in zip(params, batches):
                p["pid"] = self._pid(b.topic, b.partition, refresh=attempt == 1)
            try:
                with self._conn() as conn:
                    if txn is not None:
                        return self._append_once(conn, params, batches, txn, txn_since)
                    if len(batches) == 1:
                        row = conn.execute(_APPEND, params[0]).fetchone()
                        if row is None:
                            raise _PartitionGone
                        return [row[0]]
                    return self._append_in_transaction(conn, params)
            except _PartitionGone as e:
                gone = batches[e.args[0]] if e.args else batches[0]
                continue  # our cached pids were stale: look them up again once
        raise UnknownTopic(f"topic {gone.topic!r} does not exist")

    @staticmethod
    def _append_in_transaction(conn: psycopg.Connection, params: list[dict[str, Any]]) -> list[int]:
        with conn.transaction(), conn.pipeline():
            return _append_all(conn, params)

    @staticmethod
    def _append_once(
        conn: psycopg.Connection,
        params: list[dict[str, Any]],
        batches: Sequence[AppendBatch],
        txn: str,
        txn_since: int = 0,
    ) -> list[int] | Replayed:
        """An idempotent write: claim the txn id, append, record the result,
        all in one transaction. A second writer of the same id waits on the
        claim until the first commits (then replays its result) or rolls
        back (then writes itself). An id whose write is stamped before
        `txn_since` is claimed again (the update re-checks it under the lock)."""
        with conn.transaction():
            claimed = conn.execute(
                "INSERT INTO tidelog_txns (id, result, created) VALUES (%s, '[]', %s) "
                "ON CONFLICT (id) DO UPDATE SET result = '[]', created = excluded.created "
                "WHERE (tidelog_txns.result->>0)::bigint < %s RETURNING 1",
                (txn, _now_ms(), txn_since),
            ).fetchone()
            if claimed is None:
                ts, done = one(conn.execute("SELECT result FROM tidelog_txns WHERE id = %s", (txn,)))[0]
                return Replayed(ts, [tuple(b) for b in done])
            with conn.pipeline():
                firsts = _append_all(conn, params)
            done = [[b.topic, b.partition, f, len(b.values)] for b, f in zip(batches, firsts)]
            conn.execute(
                "UPDATE tidelog_txns SET result = %s WHERE id = %s",
                (Jsonb([batches[0].timestamp, done]), txn),
            )
        return firsts

    def append_stream(self, batches: Iterable[AppendBatch], txn: str) -> list[int] | Replayed:
        # Every partition of the stream's topic is locked (in pid order) before
        # the first batch is appended: batches may name partitions in any
        # order, and two streams taking them one by one could wait for each
        # other in a cycle. A second stream to the topic waits here whole.
        # Held, the partitions cannot be deleted under us, so the appends go
        # out in pipeline mode: the server inserts one batch while we encode
        # the next, and the first offsets are read at the end.
        cursors: list[psycopg.Cursor[Any]] = []
        result: list[list[Any]] = []
        stamp: int | None = None
        with self._conn() as conn, conn.transaction():
            claimed = conn.execute(
                "INSERT INTO tidelog_txns (id, result, created) VALUES (%s, '[]', %s) "
                "ON CONFLICT (id) DO NOTHING RETURNING 1",
                (txn, _now_ms()),
            ).fetchone()
            if claimed is None:
                ts, done = one(conn.execute("SELECT result FROM tidelog_txns WHERE id = %s", (txn,)))[0]
                return Replayed(ts, [tuple(b) for b in done])
            topic: str | None = None
            held: set[int] = set()
            with conn.pipeline():
                for batch in batches:
                    if topic is not None and batch.topic != topic:
                        raise InvalidRequest(
                            f"a streamed write goes to one topic: {topic!r}, then {batch.topic!r}"
                        )
                    params = _append_params(batch)
                    params["pid"] = self._pid(batch.topic, batch.partition)
                    if params["pid"] not in held:  # the first batch, or our cached pids were stale
                        if topic is not None:
                            params["pid"] = self._pid(batch.topic, batch.partition, refresh=True)
                        held = {
                            row[0] for row in conn.execute(_LOCK_TOPIC, {"pid": params["pid"]}).fetchall()
                        }
                        if params["pid"] not in held:
                            raise UnknownTopic(f"topic {batch.topic!r} does not exist")
                        topic = batch.topic
                    cursors.append(conn.execute(_APPEND, params))
                    stamp = batch.timestamp if stamp is None else stamp
                    result.append([batch.topic, batch.partition, 0, len(batch.values)])
            if not cursors:
                conn.execute("DELETE FROM tidelog_txns WHERE id = %s", (txn,))
                return []
            firsts = [one(cur)[0] for cur in cursors]
            for done, first in zip(result, firsts):
                done[2] = first
            conn.execute("UPDATE tidelog_txns SET result = %s WHERE id = %s", (Jsonb([stamp, result]), txn))
        return firsts

    def read(self, topic: str, partition: int, after: int, limit: int) -> list[Row]:
        pid = self._pid(topic, partition)
        # The range's upper bound is after + limit: held within bigint. Offsets
        # are dense from 1, so nothing lies up there to be missed.
        after = min(after, MAX_OFFSET - limit)
        params = {"pid": pid, "after": after, "limit": limit}
        shape = self._shapes.get(pid, _READ_BYTES)
        with self._conn() as conn:
            rows = conn.execute(shape, params, binary=True).fetchall()
            if rows and shape is not _READ_ANY and None in map(_blobs, rows):
                shape = _READ_ANY
                rows = conn.execute(shape, params, binary=True).fetchall()
            held = True
            if not rows or (after and rows[0][0] != after + 1):
                # Nothing, or a gap: compaction (fine) or retention removed
                # what was asked for (reading from 0 never is).
                held = self.check_start(conn, topic, partition, pid, after)
        if not rows:
            if not held:
                # An idle read is the moment to notice a topic deleted elsewhere.
                self._pid(topic, partition, refresh=True)
            return rows
        if shape is not _READ_ANY:
            return rows
        n = len(rows)
        no_text = list(map(_texts, rows)).count(None)
        if no_text == n:
            self._shapes[pid] = _READ_BYTES
            return list(map(_bytes_row, rows))
        if no_text == 0 and list(map(_blobs, rows)).count(None) == n:
            self._shapes[pid] = _READ_TEXT
            return list(map(_text_row, rows))
        self._shapes[pid] = _READ_ANY
        return [(o, ts, stored(v, t), m) for o, ts, v, t, m in rows]

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        params = {"grp": group, "pid": self._pid(topic, partition), "offset": min(offset, MAX_OFFSET)}
        with self._conn() as conn:
            if conn.execute(_COMMIT_FORWARD, params).rowcount == 1:
                return
        # A first commit, a step back (ignored), a refused offset or a stale pid.
        self._set_offset(_COMMIT, group, topic, partition, offset)

    def seek(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._set_offset(_SEEK, group, topic, partition, offset)

    def committed(self, group: str, topic: str, partition: int) -> int:
        pid = self._pid(topic, partition)
        with self._conn() as conn:
            return statements.committed(conn, POSTGRES, group, pid)

    def ensure_group(self, group: str, mode: str) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO tidelog_groups (name, mode, config, created) VALUES (%s, %s, '{}', %s) "
                "ON CONFLICT (name) DO NOTHING",
                (group, mode, _now_ms()),
            )

    def group_offsets(self, group: str) -> list[GroupOffset]:
        with self._conn() as conn:
            return statements.group_offsets(conn, POSTGRES, group)

    def groups(self) -> list[str]:
        with self._conn() as conn:
            return statements.group_names(conn, POSTGRES)

    def read_before(self, topic: str, partition: int, before: int, limit: int) -> list[Row]:
        pid = self._pid(topic, partition)
        out: list[Row] = []
        before = min(before, MAX_OFFSET)
        with self._conn() as conn:
            while len(out) < limit:
                want = limit - len(out)
                rows = conn.execute(
                    _BEFORE, {"pid": pid, "before": before, "limit": want}, binary=True
                ).fetchall()
                top, low = rows[0][0], rows[0][1]
                if top is None:
                    break  # nothing below `before`
                out += [(o, ts, stored(v, t), m) for _, _, o, ts, v, t, m in rows if o is not None]
                before = top - want + 1  # the window's low end: older records lie below it
                if before <= low:
                    break
        return out

    def trim(self, topic: str, partition: int, before: int) -> int:
        """Remove the records with offset < before, and queue-group state on
        them. The partition's offset counter stays, so offsets never repeat."""
        pid = self._pid(topic, partition)
        params = {"pid": pid, "before": min(before, MAX_OFFSET)}
        with self._conn() as conn, conn.transaction(), conn.pipeline() as pipeline:
            # The partition's record and byte counters move in the same statement.
            removed = conn.execute(_TRIM, params)
            # Every state row has its group's cursor row on the partition.
            conn.execute(
                "DELETE FROM tidelog_queue_state s USING tidelog_queue_cursors c "
                'WHERE c.pid = %(pid)s AND s.grp = c.grp AND s.pid = %(pid)s AND s."offset" < %(before)s',
                params,
            )
            conn.execute(
                'DELETE FROM tidelog_queue_finished WHERE pid = %(pid)s AND "offset" < %(before)s', params
            )
            pipeline.sync()
            return int(one(removed)[0])
