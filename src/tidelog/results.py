"""What became of a job: its status, its result, a cancel (`tidelog.Jobs`).

A job is a record of its queue topic, so its id names the record:
"<partition>-<offset>". Its status comes from two places, read in one
snapshot by the store (`JobStore.job_look`): the queue group's state of the
record (waiting, delayed, leased) and a small row a runner or a cancel
writes (started, failed and why, done and the handler's value, dead-lettered,
cancelled), which outlives the record's queue state for `result_ttl`.

A cancel writes its row only while the record is not leased, checked in
the same write transaction a receive's lease takes (see `store.jobstates`);
a runner reads the job's status after it leased the record and acks a
cancelled job unrun. So a job is either cancelled or run, never both, with
no lock held between a cancel and a runner and no write of the runner's
before a first run. A runner records each run's end (a failure, the
handler's value) before it settles the record, and a redelivered job's
start, so a job whose runners all died is reported dead-lettered.

Why a table and not a results topic: a status is asked by job id, and a
topic is read by offset, not by key; a row keyed by the job's record is one
index look-up on every store, and the row's expiry is one indexed delete in
the cleaning pass (`Log.clean`), as idempotent-write ids are.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .bounds import MAX_OFFSET, check_seconds
from .config import check_name
from .core import Core
from .errors import (
    ConfigurationError,
    InvalidRequest,
    JobCancelled,
    JobConflict,
    JobFailed,
    ResultTimeout,
    UnknownJob,
    UnknownPartition,
    UnknownTopic,
)
from .leasing import due_at
from .records import Message
from .store.base import JobLook, JobRow, JobsRemotely, JobStore

if TYPE_CHECKING:
    from .queues import Delivery, Queue

# The statuses, in the order a job usually goes through them.
WAITING, DELAYED, RUNNING, DONE, FAILED, DEAD_LETTERED, CANCELLED = STATUSES = (
    "waiting",
    "delayed",
    "running",
    "done",
    "failed",  # its last run raised; a retry is scheduled
    "dead-lettered",
    "cancelled",
)
# A job in one of these never runs again.
FINAL = (DONE, DEAD_LETTERED, CANCELLED)
DEFAULT_RESULT_TTL_S = 86_400.0  # a day, as huey's and rq's result stores keep them by default
MAX_RESULT_TTL_S = 365 * 86_400.0
# A handler's value is kept up to this size (its JSON); a larger one is not
# kept and the job's status says so: a result store is not a blob store.
MAX_RESULT_BYTES = 1 << 20
_JOB_ID = re.compile(r"([0-9]{1,6})-([0-9]{1,19})")


class JobInfo(NamedTuple):
    """A job's status and what it left: the handler's value once done, the
    failure of its last run while failed or once dead-lettered."""

    id: str
    status: str  # one of STATUSES
    attempts: int  # runs started so far (0 before the first)
    result: Any = None  # the handler's return value (done)
    error: str | None = None  # "ExceptionType: message" of the last failure, or why it was stopped
    updated: int | None = None  # ms since epoch of the last change a runner or a cancel recorded

    def to_json(self) -> dict[str, Any]:
        """As the HTTP API and `tidelog jobs status` show it."""
        return self._asdict()


def job_id(partition: int, offset: int) -> str:
    """The id of the job at this partition and offset of its queue topic."""
    return f"{partition}-{offset}"


def job_call(value: Any) -> tuple[Any, Any] | None:
    """(job name, payload) of a record's value when it is a job, as
    `Jobs.enqueue` writes one ({"job": name, "payload": ...}); None otherwise."""
    if isinstance(value, dict) and "job" in value:
        return value["job"], value.get("payload")
    return None


def parse_job_id(value: Any) -> tuple[int, int]:
    """(partition, offset) of a job id; InvalidRequest when it is not one."""
    m = _JOB_ID.fullmatch(value) if isinstance(value, str) else None
    if m is None or not 1 <= int(m[2]) <= MAX_OFFSET:
        raise InvalidRequest(
            f"a job id is <partition>-<offset> as enqueue returns it (e.g. 0-42), not {str(value)[:60]!r}"
        )
    return int(m[1]), int(m[2])


def check_ttl(result_ttl: Any) -> int:
    """How long a finished job's status and result are kept, in ms."""
    return int(check_seconds("result_ttl", result_ttl, MAX_RESULT_TTL_S, positive=True) * 1000)


def _store(log: Core) -> JobStore:
    store = log.store
    if not isinstance(store, JobStore):
        raise ConfigurationError(f"the {type(store).__name__} store does not keep job results")
    return store


def _checked(topic: str, group: str, job: str) -> tuple[int, int]:
    check_name("queue", topic)
    check_name("group", group)
    return parse_job_id(job)


def _unknown(topic: str, job: str) -> UnknownJob:
    return UnknownJob(
        f"no job {job!r} in queue {topic!r} (or it finished longer ago than its result is kept)"
    )


def info(log: Core, topic: str, group: str, job: str) -> JobInfo:
    """The job's status; UnknownJob when the queue holds no such job."""
    partition, offset = _checked(topic, group, job)
    store = log.store
    if isinstance(store, JobsRemotely):  # a server's store (http://): its own core answers
        return from_json(store.job_status(topic, group, job))
    now = log.clock()
    try:
        look = _store(log).job_look(group, topic, partition, offset, now)
    except (UnknownTopic, UnknownPartition):
        raise _unknown(topic, job) from None
    return _status(log, topic, job, partition, offset, look, now)


def _status(log: Core, topic: str, job: str, partition: int, offset: int, look: JobLook, now: int) -> JobInfo:
    row, held = look.row, look.held
    # Without a row (nothing a runner or a cancel wrote) the record says whether it is
    # a job: one sent to the queue's topic by hand would read waiting, then done once a
    # runner dead-lettered it as "not a job record".
    record = _job_record(log, topic, job, partition, offset, look.last_offset) if row is None else None
    attempts = row.attempts if row is not None else 0
    body = _body(row)
    if row is not None and row.state in FINAL:
        return JobInfo(job, row.state, attempts, body.get("result"), body.get("error"), row.updated)
    updated = row.updated if row is not None else None
    if held is not None:  # the group holds it: waiting, delayed or leased
        if held.leased:
            return JobInfo(job, RUNNING, max(attempts, held.deliveries), None, None, updated)
        if row is not None and row.state == FAILED:
            return JobInfo(job, FAILED, attempts, None, body.get("error"), updated)
        return JobInfo(job, DELAYED if held.due > now else WAITING, attempts, None, None, updated)
    if offset > look.scanned:  # not taken by the group yet
        if record is None:
            record = _record(log, topic, partition, offset) if offset <= look.last_offset else None
        if record is None:
            raise _unknown(topic, job)
        due = due_at(record[1], record[3])
        return JobInfo(job, DELAYED if due > now else WAITING, 0, None, None, None)
    # The group finished the record.
    if row is not None:
        # A runner started it and never recorded an end: its lease ran out
        # until the queue's max deliveries dead-lettered it (or the group was purged).
        reason = body.get("error") or "its runner stopped before it finished, until max deliveries"
        return JobInfo(job, DEAD_LETTERED, attempts, None, reason, updated)
    # Finished with no row: by a consumer that is not a runner, or its row expired.
    return JobInfo(job, DONE, 0, None, "no result is kept for it (finished longer ago than result_ttl)")


def _job_record(log: Core, topic: str, job: str, partition: int, offset: int, last_offset: int) -> Any:
    """The record of `job`; UnknownJob when it is not there or is not a job."""
    record = _record(log, topic, partition, offset) if offset <= last_offset else None
    if record is None:
        raise _unknown(topic, job)
    try:
        value = Message(record).data
    except ValueError:  # not JSON
        value = None
    if job_call(value) is None:
        raise UnknownJob(
            f"{job!r} of queue {topic!r} is not a job: the record at {topic}/{partition} offset {offset} "
            'was not enqueued by a job runner (a job\'s value is {"job": name, "payload": ...})'
        )
    return record


def _record(log: Core, topic: str, partition: int, offset: int) -> Any:
    rows = log.store.read(topic, partition, offset - 1, 1)
    return rows[0] if rows and rows[0][0] == offset else None


def _body(row: JobRow | None) -> dict[str, Any]:
    if row is None or row.body is None:
        return {}
    try:
        body = json.loads(row.body)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def cancel(log: Core, topic: str, group: str, job: str, ttl_ms: int) -> JobInfo:
    """Cancel a job that waits, is delayed or waits for a retry: no runner
    will run it (the next one to receive it acks it unrun). JobConflict when
    it runs or has finished; cancelling a cancelled job again is a no-op."""
    partition, offset = _checked(topic, group, job)
    store = log.store
    if isinstance(store, JobsRemotely):
        return from_json(store.job_cancel(topic, group, job))
    now = log.clock()
    current = info(log, topic, group, job)
    if current.status == CANCELLED:
        return current
    if current.status not in (WAITING, DELAYED, FAILED):
        raise JobConflict(f"job {job!r} is {current.status}: only a waiting or delayed job can be cancelled")
    row = JobRow(CANCELLED, current.attempts, None, now, now + ttl_ms)
    won = _store(log).job_cancel(group, topic, partition, offset, row)
    if won is None:  # a runner leased it since we looked
        raise JobConflict(f"job {job!r} is running: a runner took it as it was being cancelled")
    if won.state != CANCELLED:
        raise JobConflict(f"job {job!r} is {won.state}: it finished as it was being cancelled")
    return JobInfo(job, CANCELLED, current.attempts, None, None, now)


def start(log: Core, topic: str, group: str, job: str, attempts: int, ttl_ms: int) -> JobRow:
    """A runner's record that it runs a job again (a redelivery): the row
    there afterwards. Should the runner die too, the job's status says
    dead-lettered once the queue gives up on it, not done."""
    partition, offset = _checked(topic, group, job)
    store = log.store
    if isinstance(store, JobsRemotely):
        return JobRow(**store.job_start(topic, group, job, attempts, ttl_ms))
    now = log.clock()
    row = JobRow(RUNNING, attempts, None, now, now + ttl_ms)
    return _store(log).job_put(group, topic, partition, offset, row, (RUNNING, FAILED))


def begin(log: Core, topic: str, group: str, job: str, attempts: int, ttl_ms: int) -> str:
    """What a runner does with a job it leased, before running it: the job's
    status. A final one (cancelled, or done by an earlier delivery whose ack
    was lost) means do not run it; a redelivery also records its start."""
    partition, offset = _checked(topic, group, job)
    store = log.store
    if isinstance(store, JobStore):  # one read of the row: the lease says the rest
        state = store.job_state(group, topic, partition, offset)
        status = state if state in FINAL else RUNNING
    else:
        status = info(log, topic, group, job).status
    if status in FINAL or attempts <= 1:
        return status
    return start(log, topic, group, job, attempts, ttl_ms).state


def done(queue: Queue, delivery: Delivery, value: Any, ttl_ms: int) -> None:
    """A runner's end of a job that returned `value`: its row and its ack, in
    one transaction where the store can (LeaseLost as `Queue.ack`)."""
    job = job_id(delivery.partition, delivery.offset)
    log, store = queue.log, queue.log.store
    if not isinstance(store, JobStore):
        finish(log, queue.topic, queue.group, job, DONE, {"result": value}, delivery.delivery_count, ttl_ms)
        queue.ack(delivery)
        return
    now = log.clock()
    row = JobRow(DONE, delivery.delivery_count, _end_text({"result": value}), now, now + ttl_ms)
    store.job_done(
        queue.group,
        queue.topic,
        delivery.partition,
        delivery.offset,
        row,
        (RUNNING, FAILED),
        delivery.receipt,
    )


def finish(
    log: Core, topic: str, group: str, job: str, state: str, body: Any, attempts: int, ttl_ms: int
) -> JobRow:
    """A runner's record of how a run ended: DONE with {"result": value},
    FAILED (a retry follows) or DEAD_LETTERED with {"error": text}. It
    replaces only a started or failed job's row (never a cancel)."""
    partition, offset = _checked(topic, group, job)
    if state not in (DONE, FAILED, DEAD_LETTERED):
        raise InvalidRequest(f"a run ends done, failed or dead-lettered, not {state!r}")
    if not isinstance(body, dict) or not set(body) <= {"result", "error"}:
        raise InvalidRequest('a run\'s end is {"result": value} or {"error": text}')
    text = _end_text(body)
    store = log.store
    if isinstance(store, JobsRemotely):
        return JobRow(**store.job_finish(topic, group, job, state, json.loads(text), attempts, ttl_ms))
    now = log.clock()
    row = JobRow(state, attempts, text, now, now + ttl_ms)
    return _store(log).job_put(group, topic, partition, offset, row, (RUNNING, FAILED))


def _end_text(body: dict[str, Any]) -> str:
    """A run's end as its row keeps it. A value JSON cannot hold is kept as
    its str(); one too large is not kept, and says so."""
    text = json.dumps(body, default=str, separators=(",", ":"))
    if len(text) > MAX_RESULT_BYTES:
        size = len(text)
        text = json.dumps(
            {"error": f"the result ({size} bytes of JSON) is over {MAX_RESULT_BYTES}: not kept"}
        )
    return text


def prune(log: Core, limit: int = 2000) -> int:
    """Forget the jobs' rows whose time ran out, `limit` at a time; how many went."""
    store = log.store
    if not isinstance(store, JobStore):
        return 0
    gone = 0
    now = log.clock()
    while True:
        n = store.job_prune(now, limit)
        gone += n
        if n < limit:
            return gone


def from_json(d: dict[str, Any]) -> JobInfo:
    """A JobInfo from the JSON a server answers (`JobInfo.to_json`)."""
    fields: dict[str, Any] = {f: d.get(f) for f in JobInfo._fields}
    return JobInfo(**fields)


PENDING = object()  # `outcome` of a job that has not finished


def outcome(job: JobInfo) -> Any:
    """What `result()` gives for this status: the handler's value once done,
    PENDING before; JobFailed (dead-lettered) or JobCancelled raised."""
    if job.status == DONE:
        if job.error is not None:  # done, but its value is not kept (expired, or too large)
            raise UnknownJob(f"job {job.id!r} is done; its result is not kept: {job.error}")
        return job.result
    if job.status == DEAD_LETTERED:
        raise JobFailed(f"job {job.id!r} was dead-lettered: {job.error}", DEAD_LETTERED, job.error)
    if job.status == CANCELLED:
        raise JobCancelled(f"job {job.id!r} was cancelled before it ran")
    return PENDING


def check_timeout(timeout: Any) -> float | None:
    """result()'s timeout: None waits as long as it takes."""
    return None if timeout is None else check_seconds("timeout", timeout, MAX_RESULT_TTL_S)


def wait(ask: Callable[[], JobInfo], job: str, timeout: float | None) -> Any:
    """`outcome` of `ask()` once the job finished, asking again until then, up
    to `timeout` seconds (None: as long as it takes); ResultTimeout after."""
    limit = check_timeout(timeout)
    deadline = None if limit is None else time.monotonic() + limit
    delay = 0.0
    while True:
        value = outcome(ask())
        if value is not PENDING:
            return value
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise ResultTimeout(f"job {job!r} has not finished after {timeout} s")
        delay = next_poll(delay)
        time.sleep(delay if left is None else min(delay, left))


def next_poll(delay: float) -> float:
    """How long result() waits before it asks again: from 20 ms, doubling to
    half a second (a row's change wakes no one: it is not an append)."""
    return min(0.5, max(0.02, delay * 2))
