"""tidelog's errors as Kafka's error codes: the one table the Kafka listener answers from."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...errors import (
    GroupError,
    InvalidName,
    InvalidRequest,
    InvalidValue,
    MessageTooLarge,
    NotAssigned,
    OffsetOutOfRange,
    StaleGeneration,
    StoreError,
    TopicConflict,
    UnknownPartition,
    UnknownTopic,
)

# Most specific first: the first class an error is an instance of decides.
_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (UnknownTopic, ErrorCode.unknown_topic_or_partition),
    (UnknownPartition, ErrorCode.unknown_topic_or_partition),
    (InvalidName, ErrorCode.invalid_topic_exception),
    (MessageTooLarge, ErrorCode.message_too_large),
    (InvalidValue, ErrorCode.invalid_record),
    (OffsetOutOfRange, ErrorCode.offset_out_of_range),
    (TopicConflict, ErrorCode.topic_already_exists),
    (StaleGeneration, ErrorCode.illegal_generation),
    (NotAssigned, ErrorCode.unknown_member_id),
    (GroupError, ErrorCode.illegal_generation),
    (InvalidRequest, ErrorCode.invalid_request),
    # The store failed (a full disk, a lost connection): Kafka's clients retry this one.
    (StoreError, ErrorCode.kafka_storage_error),
]


def error_code(e: BaseException) -> ErrorCode:
    """The Kafka error code a client is answered with for `e`."""
    for cls, code in _CODES:
        if isinstance(e, cls):
            return code
    return ErrorCode.unknown_server_error


class Refused(Exception):
    """A request, or a part of one, refused with Kafka's code before anything was
    written: for the answers Kafka gives that no tidelog error stands for."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
