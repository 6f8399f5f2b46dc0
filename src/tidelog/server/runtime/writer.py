"""Group commit: concurrent produce requests share one transaction.

Each request hands the writer a job: a function that validates and encodes
its records (`Producer.prepare`) into a list of Prepared batches. One task
takes every job waiting, runs them on the writer thread and commits all
their batches with one `Log.write` (one transaction), then answers each
request. A job whose prepare fails gets its own error; if the combined
write fails, its members are written one by one, so one bad request cannot
fail the others. While a transaction runs the next jobs queue up, so the
more requests arrive at once the more each commit carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ...log import Log, Prepared
from ...records import BatchSent

log = logging.getLogger("tidelog.server")

Job = Callable[[], list[Prepared]]
Outcome = list[BatchSent] | BaseException


class GroupCommitWriter:
    def __init__(self, log_: Log, on_written: Callable[[list[BatchSent]], None] | None = None):
        self.log = log_
        self.on_written = on_written
        self._jobs: list[tuple[Job, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="tidelog-writer")
        self._task: asyncio.Task | None = None
        self.commits = 0  # transactions so far (for /metrics and the benchmark)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tidelog-group-commit")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._thread.shutdown(wait=True)

    async def write(self, job: Job, txn: str | None = None, txn_since: int = 0) -> list[BatchSent]:
        """Run `job` and commit its batches; returns after they are committed.

        With a `txn` id (an idempotent write) the batches get a transaction of
        their own, on the same writer thread, since the id is recorded with
        exactly these records.
        """
        if txn is not None:
            return await asyncio.get_running_loop().run_in_executor(
                self._thread, self._txn, job, txn, txn_since
            )
        future = asyncio.get_running_loop().create_future()
        self._jobs.append((job, future))
        self._wake.set()
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._jobs:
                jobs, self._jobs = self._jobs, []
                try:
                    outcomes = await loop.run_in_executor(self._thread, self._commit, [j for j, _ in jobs])
                except Exception as e:  # a bug, not bad input: fail these requests, keep serving
                    log.exception("group commit failed")
                    outcomes = [e] * len(jobs)
                for (_, future), outcome in zip(jobs, outcomes):
                    if future.done():  # the request went away; its records are written anyway
                        continue
                    if isinstance(outcome, BaseException):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)

    def _commit(self, jobs: list[Job]) -> list[Outcome]:
        """On the writer thread: prepare each job, then one transaction for all."""
        prepared: list[list[Prepared] | BaseException] = []
        for job in jobs:
            try:
                prepared.append(job())
            except Exception as e:
                prepared.append(e)
        good = [p for p in prepared if not isinstance(p, BaseException)]
        if not good:
            return prepared  # type: ignore[return-value]
        try:
            sent = self._write_merged([b for batches in good for b in batches])
        except Exception as e:
            if len(good) == 1:
                return [e if not isinstance(p, BaseException) else p for p in prepared]
            return [p if isinstance(p, BaseException) else self._alone(p) for p in prepared]
        if self.on_written is not None:
            self.on_written(sent)
        outcomes: list[Outcome] = []
        i = 0
        for p in prepared:
            if isinstance(p, BaseException):
                outcomes.append(p)
            else:
                outcomes.append(sent[i : i + len(p)])
                i += len(p)
        return outcomes

    def _write_merged(self, batches: list[Prepared]) -> list[BatchSent]:
        """`Log.write`, with neighbouring batches for one partition written as one.

        A batch gets consecutive offsets, so a merged batch is split back into
        its members' offsets afterwards; the store then runs two statements
        for a run of single-record requests instead of two per request.
        """
        merged: list[Prepared] = []
        members: list[list[Prepared]] = []
        for b in batches:
            last = merged[-1] if merged else None
            if (
                last is not None
                and last.topic == b.topic
                and last.partition == b.partition
                and last.timestamp == b.timestamp
                # A wire batch counts back from the end of the batch it rides on.
                and members[-1][-1].wire is None
            ):
                members[-1].append(b)
                continue
            merged.append(b)
            members.append([b])
        for i, group in enumerate(members):
            if len(group) > 1:
                values = [v for b in group for v in b.values]
                metas = None
                if any(b.metas is not None for b in group):
                    metas = [m for b in group for m in (b.metas or [None] * len(b.values))]
                merged[i] = Prepared(
                    group[0].topic, group[0].partition, values, metas, group[0].timestamp, group[-1].wire
                )
        written = self.log.write(merged)
        self.commits += 1
        sent: list[BatchSent] = []
        for group, whole in zip(members, written):
            first = whole.first_offset
            for b in group:
                sent.append(BatchSent(whole.topic, whole.partition, first, len(b.values), whole.timestamp))
                first += len(b.values)
        return sent

    def _txn(self, job: Job, txn: str, txn_since: int = 0) -> list[BatchSent]:
        sent = self.log.write(job(), txn=txn, txn_since=txn_since)
        self.commits += 1
        if self.on_written is not None:
            self.on_written(sent)
        return sent

    def _alone(self, batches: list[Prepared]) -> Outcome:
        try:
            sent = self.log.write(batches)
        except Exception as e:
            return e
        self.commits += 1
        if self.on_written is not None:
            self.on_written(sent)
        return sent
