"""One exception tree, rooted at TidelogError.

Fronts convert these at their edge (HTTP status codes, CLI exit codes); the
core and the stores raise nothing else on bad input.
"""

from __future__ import annotations


class TidelogError(Exception):
    """Base of every error tidelog raises on purpose."""

    code = "error"


class ConfigurationError(TidelogError):
    """A setting, URL or optional dependency is wrong or missing."""

    code = "configuration"


class PortInUse(ConfigurationError):
    """A server cannot listen on a port: another program holds it, or it
    is not this machine's to take. Raised before anything was opened."""

    code = "port_in_use"


class CrashLoop(TidelogError):
    """A server's worker processes kept dying faster than the supervisor
    may restart them: it stopped the others and gave up."""

    code = "crash_loop"


class InvalidRequest(TidelogError):
    """The caller asked for something malformed; nothing was changed."""

    code = "invalid_request"


class InvalidName(InvalidRequest):
    """A topic, group, producer or stream name outside ``^[A-Za-z0-9._-]{1,200}$``."""

    code = "invalid_name"


class InvalidValue(InvalidRequest):
    """A value, key or header that cannot be encoded."""

    code = "invalid_value"


class MessageTooLarge(InvalidRequest):
    """A record (value, key and headers) over its topic's ``max_message_bytes``."""

    code = "message_too_large"


class InvalidStreamId(InvalidRequest):
    """A stream entry id that is malformed, or not greater than the stream's last."""

    code = "invalid_stream_id"


class StreamIdTooSmall(InvalidStreamId):
    """A stream entry id at or below the stream's last id (Redis's XADD rule)."""

    code = "stream_id_too_small"


class WrongEventLoop(InvalidRequest):
    """An asyncio log used from another event loop than the one it was opened on."""

    code = "wrong_event_loop"


class NotFound(TidelogError):
    """What the request names does not exist."""

    code = "not_found"


class UnknownTopic(NotFound):
    """No topic of that name (reads never create one)."""

    code = "unknown_topic"


class UnknownPartition(NotFound):
    """A partition number past the topic's partitions."""

    code = "unknown_partition"


class UnknownGroup(NotFound):
    """No group of that name."""

    code = "unknown_group"


class UnknownJob(NotFound):
    """No job of that id in the queue, or its result is no longer kept."""

    code = "unknown_job"


class Conflict(TidelogError):
    """The request contradicts what is already stored."""

    code = "conflict"


class TopicConflict(Conflict):
    """The topic exists with other partitions or settings than asked for."""

    code = "topic_conflict"


class GroupConflict(Conflict):
    """A group exists with other settings than asked (its ordering)."""

    code = "group_conflict"


class WrongType(Conflict):
    """A topic used as a stream that is not one (a stream has one partition)."""

    code = "wrong_type"


class GroupExists(Conflict):
    """A group of that name already exists (in another mode, or created twice)."""

    code = "group_exists"


class GroupActive(Conflict):
    """A change that needs a stream group without live members (an offset reset) while it has some."""

    code = "group_active"


class JobConflict(Conflict):
    """A cancel of a job that runs or has finished (only a waiting or delayed job can be cancelled)."""

    code = "job_conflict"


class JobFailed(TidelogError):
    """`result()` of a job that will never give one: dead-lettered after its
    last failure (`error` says what the handler raised) or cancelled."""

    code = "job_failed"

    def __init__(self, message: str, status: str = "dead-lettered", error: str | None = None):
        super().__init__(message)
        self.status = status
        self.error = error


class JobCancelled(JobFailed):
    """`result()` of a job that was cancelled before it ran."""

    code = "job_cancelled"

    def __init__(self, message: str, status: str = "cancelled", error: str | None = None):
        super().__init__(message, status, error)


class ResultTimeout(TidelogError):
    """`result(timeout=...)` ran out before the job finished; it may still run."""

    code = "result_timeout"


class OffsetOutOfRange(InvalidRequest):
    """An offset outside what a partition holds.

    `first` and `last` carry the partition's bounds when they are known, so a
    caller can reset to one of them.
    """

    code = "offset_out_of_range"

    def __init__(self, message: str, first: int | None = None, last: int | None = None):
        super().__init__(message)
        self.first = first
        self.last = last


class GroupError(TidelogError):
    """A group operation refused because of membership or ownership."""

    code = "group_error"


class NotAssigned(GroupError):
    """The member does not own the partition it tried to read or commit."""

    code = "not_assigned"


class StaleGeneration(GroupError):
    """A commit from an older generation of the group's assignment."""

    code = "stale_generation"


class LeaseLost(GroupError):
    """The lease expired or was taken by another member: the receipt is no longer valid."""

    code = "lease_lost"


class StoreError(TidelogError):
    """The store failed for a reason that is not the caller's input.

    The driver's own error (sqlite3's, psycopg's) is chained as `__cause__`.
    """

    code = "store_error"


class StoreFull(StoreError):
    """The store has no room for the write: the disk (or the database's
    size limit) is full. Nothing of the refused write was kept, acknowledged
    writes are intact, and reads still work; free space or let retention
    remove records, then write again."""

    code = "store_full"


class Closed(TidelogError):
    """The log, consumer or server was closed."""

    code = "closed"
