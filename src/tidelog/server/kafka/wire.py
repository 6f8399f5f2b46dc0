"""Kafka's wire through kio: which APIs and versions we serve, requests in, responses out.

kio generates a frozen dataclass for every request and response of every
version from Kafka's own JSON schemas, with a native reader and a writer.
This module holds the little glue around them: the table of versions the
listener answers (ApiVersions), reading a request's header and body from a
frame, and writing a response, built from plain values by `build` so that a
handler writes one dict for every version of its API (fields a version lacks
are left out, fields a handler does not set take their defaults).
"""

from __future__ import annotations

import datetime
import io
import struct
from dataclasses import MISSING, is_dataclass
from functools import cache
from typing import Any, Literal, NamedTuple

from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import read_nullable_legacy_string, read_unsigned_varint
from kio.static.constants import EntityType

from .lengths import check_lengths
from .plans import FieldPlan, plan_of

# The versions the listener answers, by API key: (name, lowest, highest).
# The lowest are Apache Kafka 4's (KIP-896 dropped the versions older
# clients used before record batches; tests/kafka checks them against a
# live Kafka 4 broker's ApiVersions); the highest stop where a version
# would need what tidelog does not keep (topic ids instead of names:
# Produce 13, Fetch 13, Metadata 13, OffsetCommit 10; KIP-848's consumer
# protocol) or where kio's schemas end (DeleteGroups 3).
APIS: dict[int, tuple[str, int, int]] = {
    0: ("produce", 3, 9),
    1: ("fetch", 4, 12),
    2: ("list_offsets", 1, 7),
    3: ("metadata", 0, 12),
    8: ("offset_commit", 2, 8),
    9: ("offset_fetch", 1, 7),
    10: ("find_coordinator", 0, 4),
    11: ("join_group", 0, 9),
    12: ("heartbeat", 0, 4),
    13: ("leave_group", 0, 5),
    14: ("sync_group", 0, 5),
    15: ("describe_groups", 0, 5),
    16: ("list_groups", 0, 5),
    17: ("sasl_handshake", 0, 1),
    18: ("api_versions", 0, 3),
    19: ("create_topics", 2, 7),
    20: ("delete_topics", 1, 5),
    21: ("delete_records", 0, 2),
    22: ("init_producer_id", 0, 4),
    32: ("describe_configs", 1, 4),
    33: ("alter_configs", 0, 2),
    36: ("sasl_authenticate", 0, 2),
    37: ("create_partitions", 0, 3),
    42: ("delete_groups", 0, 2),
    44: ("incremental_alter_configs", 0, 1),
    47: ("offset_delete", 0, 0),
    60: ("describe_cluster", 0, 1),
}
# Kafka 4's broker advertises Produce from v0 though it serves it from v3
# (it closes the connection on v0 to v2, as this listener does): ApiVersions
# says what Kafka's says, so a client that checks for v0 finds it.
ADVERTISED_LOWEST = {0: 0}
API_VERSIONS = 18


def api_keys() -> list[dict[str, int]]:
    """ApiVersions' table: what the listener serves, its floors as Kafka 4 advertises them."""
    return [
        {"api_key": k, "min_version": ADVERTISED_LOWEST.get(k, lo), "max_version": hi}
        for k, (_, lo, hi) in sorted(APIS.items())
    ]


SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class Request(NamedTuple):
    """One decoded request: its API key and version, correlation id, client id and body."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any  # kio's dataclass of that API and version


class UnsupportedRequest(Exception):
    """An API key or version the listener does not serve (the header could be read)."""

    def __init__(self, api_key: int, version: int, correlation_id: int):
        super().__init__(f"API key {api_key} version {version} is not served")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


class MalformedRequest(Exception):
    """A frame that does not decode as the request its header names."""


@cache
def _entity(api_key: int, version: int, kind: Literal[EntityType.request, EntityType.response]) -> Any:
    name = APIS[api_key][0]
    module = load_entity_module(name, version, kind)
    suffix = "Request" if kind is EntityType.request else "Response"
    (cls,) = [
        v
        for k, v in vars(module).items()
        if k.endswith(suffix) and is_dataclass(v) and getattr(v, "__type__", None) is kind
    ]
    return cls


def request_class(api_key: int, version: int) -> Any:
    return _entity(api_key, version, EntityType.request)


def response_class(api_key: int, version: int) -> Any:
    return _entity(api_key, version, EntityType.response)


@cache
def _reader(cls: Any) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: Any) -> Any:
    return entity_writer(cls)


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, version, correlation id) of a frame; MalformedRequest when it is too short."""
    if len(frame) < 8:
        raise MalformedRequest(f"a request of {len(frame)} bytes has no header (8 bytes at least)")
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    return api_key, version, correlation_id


def served(api_key: int, version: int) -> bool:
    api = APIS.get(api_key)
    return api is not None and api[1] <= version <= api[2]


def parse_request(frame: bytes) -> Request:
    """Decode a whole frame (without its size prefix).

    UnsupportedRequest for an API or version outside `APIS`, MalformedRequest
    when the bytes do not decode. Bytes after the body are ignored, as Kafka's
    broker ignores them: librdkafka's all-topics Metadata v12 carries three
    (confluent-kafka's `list_topics()`), and Kafka answers it.
    """
    api_key, version, correlation_id = peek_header(frame)
    if not served(api_key, version):
        raise UnsupportedRequest(api_key, version, correlation_id)
    cls = request_class(api_key, version)
    try:
        # The header's client id is a legacy string in every header version;
        # a flexible header (v2) adds tagged fields after it, which we skip.
        client_id, size = read_nullable_legacy_string(frame, 8)
        at = 8 + size
        if cls.__flexible__:
            at = _skip_tags(frame, at)
        check_lengths(cls, frame, at)  # before kio's reader reserves room for what they claim
        body, size = _reader(cls)(frame, at)
    except MalformedRequest:
        raise
    except Exception as e:  # kio's readers raise several kinds on bad bytes
        raise MalformedRequest(f"{APIS[api_key][0]} v{version} does not decode: {e}") from None
    if at + size > len(frame):
        raise MalformedRequest(
            f"{APIS[api_key][0]} v{version} ends at byte {at + size} of a {len(frame)}-byte frame"
        )
    return Request(api_key, version, correlation_id, client_id, body)


def _skip_tags(frame: bytes, at: int) -> int:
    count, size = read_unsigned_varint(frame, at)
    at += size
    for _ in range(count):
        _, size = read_unsigned_varint(frame, at)
        at += size
        length, size = read_unsigned_varint(frame, at)
        at += size + length
        if at > len(frame):
            raise MalformedRequest("a tagged field runs past the frame")
    return at


def encode_response(request: Request, body: Any) -> bytes:
    """A response frame (size prefix, header, body) for `request`.

    ApiVersions answers with header v0 whatever its version (Kafka's rule,
    so a client that sent a version we do not know can still read it).
    """
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(struct.pack(">i", request.correlation_id))
    cls: Any = type(body)
    if cls.__flexible__ and request.api_key != API_VERSIONS:
        out.write(b"\0")  # the response header's empty tagged fields
    _writer(cls)(out, body)
    size = out.tell() - 4
    out.seek(0)
    out.write(struct.pack(">i", size))
    # BytesIO hands its own buffer over, not a copy: a fetch's answer is megabytes.
    return out.getvalue()


def respond(request: Request, values: dict[str, Any]) -> bytes:
    """`encode_response` of `build(response class of the request, values)`."""
    return encode_response(request, build(response_class(request.api_key, request.version), values))


# Responses of a known shape -------------------------------------------------------

# kio's writer is Python: a Produce response of one partition costs about
# 90 us to build and write, near a microsecond a record of a 100-record
# batch. A client sends the same shape of request again and again (the
# same topics and partitions, all answered without error), and those
# answers differ only in a few i64 numbers (base offsets), so kio writes
# each shape once with marks where the numbers go, and its bytes are
# reused with the numbers and the correlation id written in.
_SHAPES: dict[Any, tuple[bytes, tuple[int, ...]] | None] = {}
MAX_SHAPES = 1024
_MARK = 0x5E << 56  # an i64 whose first byte ('^') no name the listener serves holds
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


def respond_numbers(request: Request, shape: Any, make: Any, numbers: list[int]) -> bytes:
    """`respond(request, make(numbers))`, for a response that differs from
    any other of the same `shape` only in `numbers`: i64 fields, each
    written once. The first of a shape is written by kio with marks for
    the numbers; a shape whose marks cannot be told apart is always
    written by kio."""
    key = (request.api_key, request.version, shape)
    if key not in _SHAPES:
        marks = [_MARK | i for i in range(len(numbers))]
        frame = respond(request._replace(correlation_id=0), make(marks))
        packed = [_I64.pack(m) for m in marks]
        found = None
        if all(frame.count(p) == 1 for p in packed):
            found = (frame, tuple(frame.index(p) for p in packed))
        if len(_SHAPES) >= MAX_SHAPES:
            _SHAPES.clear()
        _SHAPES[key] = found
    known = _SHAPES[key]
    if known is None:
        return respond(request, make(numbers))
    frame, positions = known
    out = bytearray(frame)
    _I32.pack_into(out, 4, request.correlation_id)
    for at, n in zip(positions, numbers):
        _I64.pack_into(out, at, n)
    return bytes(out)


# Building a response from plain values -------------------------------------------


_ZERO: dict[str, Any] = {
    "string": "",
    "bytes": b"",
    "bool": False,
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "uuid": None,
    "float64": 0.0,
}


def build(cls: Any, values: dict[str, Any]) -> Any:
    """An instance of kio's `cls` from plain values: ints for error codes and
    milliseconds, lists of dicts for arrays of entities. Names `cls` lacks
    are ignored; fields not given take their default or their zero."""
    kwargs: dict[str, Any] = {}
    for plan in plan_of(cls):
        if plan.name in values:
            value = values[plan.name]
        elif plan.default is not MISSING:
            continue
        elif plan.optional:
            value = None
        elif plan.kind in ("entities", "primitives"):
            value = ()
        elif plan.kind == "entity":
            value = {}
        else:
            value = _ZERO.get(plan.kafka_type, 0)
        kwargs[plan.name] = _convert(plan, value)
    return cls(**kwargs)


def _convert(plan: FieldPlan, value: Any) -> Any:
    if value is None:
        return None
    if plan.kind == "entities":
        return tuple(v if is_dataclass(v) else build(plan.inner, v) for v in value)
    if plan.kind == "entity":
        return value if is_dataclass(value) else build(plan.inner, value)
    if plan.kind == "primitives":
        return tuple(value)
    kafka_type = plan.kafka_type
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value
