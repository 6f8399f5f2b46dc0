"""The jobs' states on SQLite (see `JobStore` and `store.jobstates`)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import jobstates
from ..base import JobLook, JobRow
from ..dialect import SQLITE
from .base import SQLiteBase
from .queues import SQLiteQueues


class SQLiteJobs(SQLiteBase):
    """Mixed into SQLiteStore; uses its connections and pid cache."""

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

    def job_prune(self, now: int, limit: int) -> int:
        with self._write() as db:
            return jobstates.prune(db, SQLITE, now, limit)
