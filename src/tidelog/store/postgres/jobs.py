"""The jobs' states on PostgreSQL (see `JobStore` and `store.jobstates`)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import jobstates
from ..base import JobLook, JobRow
from ..dialect import POSTGRES
from .base import PostgresBase


class PostgresJobs(PostgresBase):
    """Mixed into PostgresStore; uses its pool and pid cache."""

    def job_look(self, group: str, topic: str, partition: int, offset: int, now: int) -> JobLook:
        pid = self._pid(topic, partition, refresh=True)
        # One snapshot for the row, the queue state and the cursor: a job
        # finishing between two reads would otherwise look unknown.
        with self._conn() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            found = conn.execute(
                "SELECT last_offset FROM tidelog_partitions WHERE id = %s", (pid,)
            ).fetchone()
            last = 0 if found is None else int(found[0])
            return jobstates.look(conn, POSTGRES, group, pid, offset, now, last)

    def job_put(
        self, group: str, topic: str, partition: int, offset: int, row: JobRow, replace: Sequence[str]
    ) -> JobRow:
        pid = self._pid(topic, partition)
        with self._conn() as conn, conn.transaction():
            return jobstates.put(conn, POSTGRES, group, pid, offset, row, replace)

    def job_prune(self, now: int, limit: int) -> int:
        with self._conn() as conn, conn.transaction():
            return jobstates.prune(conn, POSTGRES, now, limit)
