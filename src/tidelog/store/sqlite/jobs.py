"""The jobs' states on SQLite (see `JobStore` and `store.jobstates`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import jobstates
from ..base import JobLook, JobRow
from ..dialect import SQLITE
from ..jobstates import CANCELLABLE
from .base import SQLiteBase
from .queues import SQLiteQueues


class SQLiteJobs(SQLiteBase):
    """Mixed into SQLiteStore; uses its connections and pid cache."""

    if TYPE_CHECKING:  # the queue role's, in the composed store

        def queue_ack(self, group: str, topic: str, partition: int, offset: int, receipt: str) -> None: ...

    def job_look(self, group: str, topic: str, partition: int, offset: int, now: int) -> JobLook:
        pid = self._pid(topic, partition, refresh=True)
        with self._read() as conn:
            # One snapshot for the row, the queue state and the cursor: a job
            # finishing between two reads would otherwise look dead-lettered.
            own = not conn.in_transaction  # in memory, the writer's: maybe inside a write
            if own:
                conn.execute("BEGIN")
            try:
                last = SQLiteQueues._last_offset(conn, pid)
                return jobstates.look(conn, SQLITE, group, pid, offset, now, last)
            finally:
                if own:
                    conn.execute("COMMIT")

    def job_put(
        self, group: str, topic: str, partition: int, offset: int, row: JobRow, replace: Sequence[str]
    ) -> JobRow:
        pid = self._pid(topic, partition)
        with self._write() as db:
            return jobstates.put(db, SQLITE, group, pid, offset, row, replace)

    def job_state(self, group: str, topic: str, partition: int, offset: int) -> str | None:
        pid = self._pid(topic, partition)
        # On the writer's connection, whose page cache the writes keep warm: a
        # reader's cache starts cold after every write, and a runner asks this
        # right after its lease was written.
        with self._lock:
            return jobstates.state(self._db, SQLITE, group, pid, offset)

    def job_done(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        row: JobRow,
        replace: Sequence[str],
        receipt: str,
    ) -> None:
        pid = self._pid(topic, partition)
        with self._write() as db:
            jobstates.upsert(db, SQLITE, group, pid, offset, row, replace)
            # Joins this transaction (the writer's lock is re-entrant): a lost
            # lease rolls the row back too.
            self.queue_ack(group, topic, partition, offset, receipt)

    def job_cancel(self, group: str, topic: str, partition: int, offset: int, row: JobRow) -> JobRow | None:
        pid = self._pid(topic, partition)
        with self._write() as db:  # the one writer: no lease can come between the look and the write
            if jobstates.leased(db, SQLITE, group, pid, offset, row.updated):
                return None
            return jobstates.put(db, SQLITE, group, pid, offset, row, CANCELLABLE)

    def job_prune(self, now: int, limit: int) -> int:
        with self._write() as db:
            return jobstates.prune(db, SQLITE, now, limit)
