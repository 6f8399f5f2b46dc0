"""The HTTP API's bodies as typed models: what a route takes and answers.

One source for two readers: the OpenAPI document (openapi.py) is generated
from these types and the route table (operations.py), and a route that
decodes its body with `bodies.decode(raw, Model)` is validated by the same
types, in one pass of msgspec's decoder (chosen over pydantic by
measurement: see docs/benchmarks.md, "Typed bodies").

Conventions:

- `Body` is a request body: unknown fields are refused (additionalProperties
  false). An optional field is `UNSET` when absent, so the document lists it
  as optional without also allowing null; a field that takes null as "not
  given" says so with `| None`.
- `Answer` is a response body: the fields a client can rely on.
- A model's docstring is its description in the document: notes for the
  reader of this code are comments.
- Names are stated with their pattern (`Name`) but checked by
  `config.check_name` in the route, which answers InvalidName (code
  `invalid_name`) with the name's rules, as every front does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from ...bounds import MAX_DELAY_S, MAX_DELIVERIES, MAX_OFFSET, MAX_TIMESTAMP_MS, MAX_VISIBILITY_S
from ...config import NAME_RE, TXN_RE
from ...errors import InvalidRequest
from ...log import MAX_BATCH
from ...records import NewRecord
from ...results import MAX_RESULT_TTL_S
from ...results import STATUSES as JOB_STATUSES
from ...wire import unb64
from .bodies import kind

# -- the shared field types -----------------------------------------------------------

Name = Annotated[str, Meta(extra_json_schema={"type": "string", "pattern": f"^{NAME_RE.pattern}$"})]
# Every integer is bounded (tidelog.bounds): offsets to 64 bits, times to what a double holds exactly.
Offset = Annotated[int, Meta(ge=0, le=MAX_OFFSET)]
TimeMs = Annotated[int, Meta(ge=0, le=MAX_TIMESTAMP_MS, description="ms since epoch")]
Stamp = Annotated[int, Meta(description="ms since epoch")]
Partitions = Annotated[int, Meta(ge=1, le=10_000)]
Seconds = Annotated[float, Meta(ge=0, le=MAX_VISIBILITY_S)]
Wait = Annotated[float, Meta(ge=0, le=30, description="long-poll seconds")]
Chunk = Annotated[int, Meta(ge=1, le=100_000, description="records a step")]
Format = Literal["json", "text", "bytes"]
Receipt = Annotated[str, Meta(description="the opaque receipt of a delivery")]
Receipts = Annotated[
    list[Receipt],
    Meta(
        min_length=1,
        max_length=10_000,
        description="several deliveries, settled in one store transaction; each succeeds or is "
        "listed in the answer's `failed` (index, error) on its own",
    ),
]
TopicPartition = tuple[Name, Annotated[int, Meta(ge=0)]]
JobId = Annotated[str, Meta(pattern="^[0-9]{1,6}-[0-9]{1,19}$", examples=["0-42"])]
Attempts = Annotated[int, Meta(ge=1, le=(1 << 31) - 1)]
TtlMs = Annotated[int, Meta(ge=1, le=int(MAX_RESULT_TTL_S * 1000))]
Binary = Annotated[str, Meta(extra_json_schema={"format": "binary"})]
Base64 = Annotated[str, Meta(extra_json_schema={"contentEncoding": "base64"})]
AnyObject = dict[str, Any]

_MS = Annotated[int, Meta(ge=0, le=(1 << 63) - 1, description="milliseconds")]
_DURATION_TEXT = Annotated[
    str, Meta(pattern="^[0-9]+(\\.[0-9]+)?(ms|s|m|h|d|w)?$", examples=["7d", "12h", "500ms"])
]
_BYTES = Annotated[int, Meta(ge=0, le=(1 << 63) - 1, description="bytes")]
_SIZE_TEXT = Annotated[
    str, Meta(pattern="^[0-9]+(\\.[0-9]+)?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$", examples=["1GiB", "500MB"])
]
Duration = _MS | _DURATION_TEXT
Size = _BYTES | _SIZE_TEXT


class Body(Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """A request body: unknown fields are refused."""


class Answer(Struct, kw_only=True, omit_defaults=True):
    """A response body."""


# -- errors ---------------------------------------------------------------------------


class ErrorDetail(Answer, kw_only=True):
    code: str
    message: str


class Error(Answer, kw_only=True):
    error: ErrorDetail


# -- records --------------------------------------------------------------------------


class HeaderIn(Body, kw_only=True):
    name: str
    value: str | UnsetType = UNSET
    value_base64: Base64 | UnsetType = UNSET


class RecordIn(Body, kw_only=True):
    value: Annotated[Any, Meta(description="the JSON value; the string itself for text; base64 for bytes")]
    format: Format = "json"
    key: str | None = None
    key_base64: Base64 | None = None
    # A header is {"name", "value" or "value_base64"}, or a [name, value] pair of strings.
    headers: dict[str, str] | list[HeaderIn | tuple[str, str]] | None = None
    partition: Offset | None = None

    def to_record(self, at: str) -> tuple[Any, int | None, str | bytes | None]:
        """(value or NewRecord, explicit partition or None, key or None), as
        `wire.record_in` reads an untyped one: the rules a type cannot state."""
        value = self.value
        if self.format == "bytes":
            value = unb64(value, f"{at}.value")
        elif self.format == "text" and not isinstance(value, str):
            raise InvalidRequest(f"{at}.value must be a string when format is text, not {kind(value)}")
        key: str | bytes | None = self.key
        if self.key_base64 is not None:
            if key is not None:
                raise InvalidRequest(f"{at} has both key and key_base64; send one")
            key = unb64(self.key_base64, f"{at}.key_base64")
        if key is None and self.headers is None:
            return value, self.partition, None
        return NewRecord(value, key, self._headers(f"{at}.headers")), self.partition, key

    def _headers(self, at: str) -> list[tuple[str, bytes]] | None:
        if self.headers is None:
            return None
        if isinstance(self.headers, dict):
            return [(name, text.encode()) for name, text in self.headers.items()]
        pairs = []
        for i, header in enumerate(self.headers):
            if isinstance(header, tuple):
                pairs.append((header[0], header[1].encode()))
            elif isinstance(header.value, str) == isinstance(header.value_base64, str):
                raise InvalidRequest(f"{at}[{i}] needs exactly one of value, value_base64")
            elif isinstance(header.value, str):
                pairs.append((header.name, header.value.encode()))
            else:
                pairs.append((header.name, unb64(header.value_base64, f"{at}[{i}].value_base64")))
        return pairs


Records = Annotated[list[RecordIn], Meta(min_length=1, max_length=MAX_BATCH)]


class HeaderOut(Answer, kw_only=True):
    name: str
    value: str | UnsetType = UNSET
    value_base64: str | UnsetType = UNSET


class RecordOut(Answer, kw_only=True):
    topic: str
    partition: int
    offset: int
    timestamp: Stamp
    format: Format
    value: Any
    key: str | None | UnsetType = UNSET
    key_base64: str | UnsetType = UNSET
    headers: list[HeaderOut]
    producer: str | None | UnsetType = UNSET


class Delivery(RecordOut, kw_only=True):
    delivery_count: int
    receipt: Receipt
    lease_deadline: Stamp


class Peeked(RecordOut, kw_only=True):
    delivery_count: Annotated[int, Meta(description="deliveries so far")] | UnsetType = UNSET
    due: Annotated[int, Meta(description="ms since epoch; 0: nacked to the front")] | UnsetType = UNSET
    priority: int | UnsetType = UNSET
    delayed: Annotated[bool, Meta(description="not due yet")] | UnsetType = UNSET


class RecordsOut(Answer, kw_only=True):
    records: list[RecordOut]


# -- topics ---------------------------------------------------------------------------


class TopicConfig(Body, kw_only=True):
    """Topic settings; durations and sizes also as text (7d, 12h, 1GiB). A bad one is a 400 naming it."""

    max_message_bytes: Annotated[int, Meta(ge=1, le=1 << 30)] | _SIZE_TEXT | UnsetType = UNSET
    retention_ms: (
        Annotated[Duration | None, Meta(description="default 7d; null: no time bound")] | UnsetType
    ) = UNSET
    retention_bytes: (
        Annotated[Size | None, Meta(description="per partition; default unlimited")] | UnsetType
    ) = UNSET
    retention: Literal["time", "consumed"] | UnsetType = UNSET
    cleanup_policy: Literal["delete", "compact", "compact,delete"] | UnsetType = UNSET
    min_compaction_lag_ms: Duration | UnsetType = UNSET
    delete_retention_ms: Duration | UnsetType = UNSET


class CreateTopic(Body, kw_only=True):
    name: Name
    partitions: Partitions | UnsetType = UNSET
    config: TopicConfig | UnsetType = UNSET


class TopicOut(Answer, kw_only=True):
    name: str
    partitions: int
    config: AnyObject
    created: Stamp


class ChangeTopic(Body, kw_only=True):
    config: TopicConfig


class GrowTopic(Body, kw_only=True):
    partitions: Partitions


# -- produce --------------------------------------------------------------------------


# POST /v1/topics/{topic}/records: decoded and validated by this type.
class Produce(Body, kw_only=True):
    records: Records
    partition: Offset | None = None
    producer: Name | None = None
    timestamp: TimeMs | None = None


class Batch(Body, kw_only=True):
    topic: Name
    partition: Offset | None = None
    key: str | None = None
    producer: Name | None = None
    timestamp: TimeMs | None = None
    records: Annotated[list[RecordIn], Meta(min_length=1, max_length=MAX_BATCH)]


# POST /v1/records: decoded and validated by this type.
class ProduceBatches(Body, kw_only=True):
    batches: Annotated[list[Batch], Meta(min_length=1)]
    # Checked by config.check_txn in the route, which words the rule.
    txn: (
        Annotated[
            str,
            Meta(
                extra_json_schema={"pattern": f"^{TXN_RE.pattern}$"},
                description="an idempotent write: a txn id seen before writes nothing and answers that write",
            ),
        ]
        | None
    ) = None
    txn_since: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=MAX_TIMESTAMP_MS,
                description="ms since epoch: a txn id recorded by a write stamped earlier "
                "no longer counts (a dedup window); this write takes it over",
            ),
        ]
        | None
    ) = None


class Placed(Answer, kw_only=True):
    partition: int
    offset: int


class Produced(Answer, kw_only=True):
    topic: str
    timestamp: Stamp
    records: list[Placed]


# -- the pub/sub routes (miniqueue's /api) ----------------------------------------------


class EnsureTopic(Struct, kw_only=True, omit_defaults=True):
    name: Name


class PublishPayload(Struct, kw_only=True, omit_defaults=True):
    payload: Any


class AckUpTo(Struct, kw_only=True, omit_defaults=True):
    group: Name
    lastAckedId: Offset  # noqa: N815 -- miniqueue's field name


# -- stream groups --------------------------------------------------------------------


class CreateGroup(Body, kw_only=True):
    name: Name
    mode: Literal["stream"] | UnsetType = UNSET


class OffsetBody(Body, kw_only=True):
    topic: Name
    partition: Offset
    offset: Offset


class MemberCommit(Body, kw_only=True):
    member_id: Name
    generation: Offset | UnsetType = UNSET
    topic: Name | UnsetType = UNSET
    partition: Annotated[int, Meta(ge=0, le=9999)] | UnsetType = UNSET
    offset: Offset | UnsetType = UNSET


class Join(Body, kw_only=True):
    topics: Annotated[list[Name], Meta(min_length=1)]
    member_id: Name | UnsetType = UNSET
    session_timeout: Annotated[float, Meta(ge=0.1, le=3600)] = 10
    assignor: Literal["range", "roundrobin", "sticky"] | UnsetType = UNSET
    start: Literal["earliest", "latest"] | UnsetType = UNSET


class Member(Body, kw_only=True):
    member_id: Name


class Poll(Body, kw_only=True):
    member_id: Name
    max_messages: (
        Annotated[
            int, Meta(ge=1, description="at most 100000 are answered; a larger value is held to 100000")
        ]
        | None
    ) = None
    wait: Annotated[float, Meta(ge=0, le=30, description="long-poll seconds")] | None = None


class Release(Body, kw_only=True):
    member_id: Name
    partitions: list[TopicPartition] | UnsetType = UNSET


class MemberView(Answer, kw_only=True):
    group: str | UnsetType = UNSET
    member_id: str | UnsetType = UNSET
    generation: int | UnsetType = UNSET
    assignment: list[TopicPartition] | UnsetType = UNSET
    revoke: (
        Annotated[list[TopicPartition], Meta(description="commit these; poll releases them")] | UnsetType
    ) = UNSET


class Reset(Body, kw_only=True):
    topic: Name
    to: Literal["earliest", "latest", "offset", "time"]
    value: Annotated[int, Meta(ge=0, description="the offset, or ms since epoch")] | UnsetType = UNSET
    partition: Offset | UnsetType = UNSET


# -- dead letters ---------------------------------------------------------------------


class DeadLetterPick(Body, kw_only=True):
    offsets: (
        Annotated[frozenset[Annotated[int, Meta(ge=1, le=MAX_OFFSET)]], Meta(min_length=1, max_length=10_000)]
        | UnsetType
    ) = UNSET
    origin: Name | UnsetType = UNSET
    dry_run: bool = False


class Redriven(Answer, kw_only=True):
    dead_letter: str | UnsetType = UNSET
    moved: list[AnyObject] | UnsetType = UNSET
    skipped: list[int] | UnsetType = UNSET
    dry_run: bool | UnsetType = UNSET


class Purged(Answer, kw_only=True):
    dead_letter: str | UnsetType = UNSET
    removed: list[int] | UnsetType = UNSET
    skipped: list[int] | UnsetType = UNSET
    dry_run: bool | UnsetType = UNSET


# -- queue groups ---------------------------------------------------------------------


class QueueName(Answer, kw_only=True):
    topic: str | UnsetType = UNSET
    group: str | UnsetType = UNSET


class QueueList(Answer, kw_only=True):
    queues: list[QueueName] | UnsetType = UNSET


class OpenQueue(Body, kw_only=True):
    max_deliveries: Annotated[int, Meta(ge=1, le=MAX_DELIVERIES)] | UnsetType = UNSET
    dead_letter: Name | UnsetType = UNSET
    start: Literal["earliest", "latest"] | UnsetType = UNSET
    ordering: (
        Annotated[
            Literal["none", "key"], Meta(description="key: a key's records one at a time, in offset order")
        ]
        | UnsetType
    ) = UNSET


# POST /v1/queues/{topic}/messages: decoded and validated by this type.
class Send(Body, kw_only=True):
    records: Records
    delay: Annotated[float, Meta(ge=0, le=MAX_DELAY_S)] | None = None
    priority: Annotated[int, Meta(ge=0, le=9)] = 0
    # At most 128 bytes (queues.check_dedup_id, in the route: a length in bytes).
    dedup_id: (
        Annotated[
            str,
            Meta(
                min_length=1,
                description="at most 128 bytes: sent again within the topic's dedup_window_ms, "
                "nothing is appended and the first send's offsets are answered",
            ),
        ]
        | None
    ) = None
    partition: Offset | None = None
    producer: Name | None = None


class Received(Answer, kw_only=True):
    messages: list[Delivery] | UnsetType = UNSET
    next_due: int | None | UnsetType = UNSET


class Ack(Body, kw_only=True):
    receipt: Receipt | UnsetType = UNSET
    receipts: Receipts | UnsetType = UNSET


_HELD = "ms since epoch, server clock; held to 12 h ahead"


class Nack(Body, kw_only=True):
    receipt: Receipt | UnsetType = UNSET
    receipts: Receipts | UnsetType = UNSET
    back: bool | UnsetType = UNSET
    delay: Seconds | UnsetType = UNSET
    due: Annotated[int, Meta(ge=0, le=MAX_TIMESTAMP_MS, description=_HELD)] | UnsetType = UNSET


class Extend(Body, kw_only=True):
    receipt: Receipt | UnsetType = UNSET
    receipts: Receipts | UnsetType = UNSET
    seconds: Seconds | UnsetType = UNSET
    deadline: Annotated[int, Meta(ge=0, le=MAX_TIMESTAMP_MS, description=_HELD)] | UnsetType = UNSET


class Reject(Body, kw_only=True):
    receipt: Receipt
    reason: Annotated[str, Meta(description="the dead letter's reason header (default: rejected)")] | None = (
        None
    )


class PeekedList(Answer, kw_only=True):
    messages: list[Peeked] | UnsetType = UNSET


class Empty(Body, kw_only=True):
    """No fields."""


class PurgedQueue(Answer, kw_only=True):
    purged: int | UnsetType = UNSET


# -- jobs -----------------------------------------------------------------------------


class JobInfo(Answer, kw_only=True):
    id: str
    status: Annotated[str, Meta(extra_json_schema={"enum": list(JOB_STATUSES)})]
    attempts: int
    result: Annotated[Any, Meta(description="the handler's return value (done)")] | UnsetType = UNSET
    error: str | None | UnsetType = UNSET
    updated: Annotated[int | None, Meta(description="ms since epoch")] | UnsetType = UNSET


class JobRow(Answer, kw_only=True):
    state: str | UnsetType = UNSET
    attempts: int | UnsetType = UNSET
    body: str | None | UnsetType = UNSET
    updated: int | UnsetType = UNSET
    expires: int | UnsetType = UNSET


class StartJob(Body, kw_only=True):
    attempts: Attempts
    ttl_ms: TtlMs


class FinishJob(Body, kw_only=True):
    state: Literal["done", "failed", "dead-lettered"]
    result: Annotated[Any, Meta(description="the handler's value (done)")] | UnsetType = UNSET
    error: Annotated[str, Meta(description="the failure (failed, dead-lettered)")] | UnsetType = UNSET
    attempts: Attempts
    ttl_ms: TtlMs
