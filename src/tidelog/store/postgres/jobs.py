"""The jobs' states on PostgreSQL (see `JobStore` and `store.jobstates`)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import jobstates
from ..base import JobLook, JobRow
from ..dialect import POSTGRES
from ..jobstates import CANCELLABLE
from .base import PostgresBase, one
from .queues import _LEASE_ROW, FINISH, LOCK_GROUP, done, lease_lost


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

    def job_state(self, group: str, topic: str, partition: int, offset: int) -> str | None:
        pid = self._pid(topic, partition)
        with self._conn() as conn:
            return jobstates.state(conn, POSTGRES, group, pid, offset)

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
        with self._conn() as conn, conn.transaction():
            jobstates.upsert(conn, POSTGRES, group, pid, offset, row, replace)
            if one(conn.execute(FINISH, (group, pid, offset, receipt)))[0] == 1:
                return
            scanned, found, held, deliveries, finished = one(
                conn.execute(_LEASE_ROW, {"grp": group, "pid": pid, "offset": offset})
            )
            if done(offset, receipt, scanned, found, finished):
                return  # acked already with this receipt: the row is the news
            # Raised inside the transaction: the row goes back with it.
            raise lease_lost(group, topic, partition, offset, found, held, deliveries, finished)

    def job_cancel(self, group: str, topic: str, partition: int, offset: int, row: JobRow) -> JobRow | None:
        topic_id, pids = self._topic_pids(topic)
        pid = self._pid(topic, partition)
        with self._conn() as conn, conn.transaction():
            # The group's row, as a receive locks it before it leases: no
            # lease can come between the look and the write.
            conn.execute(LOCK_GROUP, (group, topic_id))
            if jobstates.leased(conn, POSTGRES, group, pid, offset, row.updated):
                return None
            return jobstates.put(conn, POSTGRES, group, pid, offset, row, CANCELLABLE)

    def job_prune(self, now: int, limit: int) -> int:
        with self._conn() as conn, conn.transaction():
            return jobstates.prune(conn, POSTGRES, now, limit)
