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


class InvalidRequest(TidelogError):
    """The caller asked for something malformed; nothing was changed."""

    code = "invalid_request"


class InvalidName(InvalidRequest):
    code = "invalid_name"


class InvalidValue(InvalidRequest):
    """A value, key or header that cannot be encoded."""

    code = "invalid_value"


class MessageTooLarge(InvalidRequest):
    code = "message_too_large"


class InvalidStreamId(InvalidRequest):
    """A stream entry id that is malformed, or not greater than the stream's last."""

    code = "invalid_stream_id"


class StreamIdTooSmall(InvalidStreamId):
    code = "stream_id_too_small"


class NotFound(TidelogError):
    code = "not_found"


class UnknownTopic(NotFound):
    code = "unknown_topic"


class UnknownPartition(NotFound):
    code = "unknown_partition"


class UnknownGroup(NotFound):
    code = "unknown_group"


class Conflict(TidelogError):
    """The request contradicts what is already stored."""

    code = "conflict"


class TopicConflict(Conflict):
    code = "topic_conflict"


class WrongType(Conflict):
    """A topic used as a stream that is not one (a stream has one partition)."""

    code = "wrong_type"


class GroupExists(Conflict):
    code = "group_exists"


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
    code = "not_assigned"


class StaleGeneration(GroupError):
    code = "stale_generation"


class LeaseLost(GroupError):
    code = "lease_lost"


class StoreError(TidelogError):
    """The store failed for a reason that is not the caller's input."""

    code = "store_error"


class Closed(TidelogError):
    code = "closed"
