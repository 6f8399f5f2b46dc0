"""Record types and the encoding of values, keys and headers.

A value is stored as one of three formats so that `msg.data` gives back an
equal object: bytes stay bytes, a str is UTF-8 text, anything else is JSON.
Stores keep bytes as bytes and text or JSON as text.

Everything else a record may carry (key, headers, producer, the marker that
tells plain text from JSON) is packed into one optional `meta` blob, which is
None for the common record that has none of them: a store then writes and
reads two payload columns, which is what keeps sends and fetches cheap.

meta layout: one flags byte, then the key (u32 length + bytes) if
F_KEY, the producer (u16 length + UTF-8) if F_PRODUCER, and the headers blob
(to the end) if F_HEADERS.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple, overload

from .bounds import QUEUE_HEADERS, check_queue_header
from .errors import InvalidValue
from .store.base import Row, WireBatch

# Format marker: a str value is JSON unless the record says it is plain text.
FMT_TEXT = 1

F_KEY = 1
F_PRODUCER = 2
F_HEADERS = 4
F_TEXT = 8

Headers = list[tuple[str, bytes]]

_json_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_json_loads = json.loads


def encode_value(value: Any) -> tuple[bytes | str, int | None]:
    """Return (stored value, format marker) for a payload."""
    if type(value) is bytes:
        return value, None
    if isinstance(value, str):
        return _valid_text(str(value)), FMT_TEXT
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value), None
    try:
        return _valid_text(_json_dumps(value)), None
    except (TypeError, ValueError) as e:
        raise InvalidValue(
            f"value of type {type(value).__name__} cannot be encoded: {e}; "
            "send bytes, str, or a JSON-serialisable object"
        ) from None


def _valid_text(text: str) -> str:
    # A lone surrogate has no UTF-8 form; no store could keep it. The ASCII
    # test is a fast scan in C that spares the common case the encoding.
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise InvalidValue("value is not valid Unicode (it holds a lone surrogate)") from None
    return text


@overload
def encode_key(key: None) -> None: ...


@overload
def encode_key(key: bytes | str | bytearray | memoryview | int) -> bytes: ...


def encode_key(key: Any) -> bytes | None:
    """A key as bytes: bytes as is, str as UTF-8, None stays None."""
    if key is None or type(key) is bytes:
        return key
    if isinstance(key, str):
        try:
            return key.encode()
        except UnicodeEncodeError:
            raise InvalidValue("key is not valid Unicode (it holds a lone surrogate)") from None
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode()
    raise InvalidValue(f"key must be bytes, str or int, not {type(key).__name__}")


_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

# A header value's length that stands for Kafka's null value (no bytes follow):
# no value of 4 GiB is ever written (a record is bounded far below), so every
# headers blob written before null values were kept reads as it did.
NULL_VALUE = 0xFFFFFFFF
_NULL_LENGTH = _U32.pack(NULL_VALUE)


def encode_headers(headers: Any, *, written: bool = False, nulls: bool = False) -> bytes | None:
    """Encode headers (a dict or (name, str|bytes) pairs) to a compact blob.

    Layout: for each header, u16 name length, name (UTF-8), u32 value length,
    value. Order is kept; names may repeat, as in Kafka. The queue's own
    headers (`tidelog-deliver-at`, `tidelog-priority`) must hold values in
    their range (`tidelog.bounds`), unless `written`: headers of a record
    already in the log, encoded again as they are (a queue reads any value
    safely; see `tidelog.leasing`). With `nulls`, a value of None is Kafka's
    null value, kept as a length of NULL_VALUE and no bytes: the Kafka
    listener hands it back as null, while tidelog's headers, (str, bytes)
    pairs, read it as empty bytes (`decode_headers`).
    """
    if not headers:
        return None
    pairs: Iterable[Any] = headers.items() if isinstance(headers, dict) else headers
    out = bytearray()
    try:
        for pair in pairs:
            name, value = pair
            if not isinstance(name, str):
                raise InvalidValue(f"header name must be str, not {type(name).__name__}")
            if isinstance(value, str):
                value = value.encode()
            elif isinstance(value, (bytes, bytearray, memoryview)):
                value = bytes(value)
            elif value is not None or not nulls:
                raise InvalidValue(f"header {name!r} value must be str or bytes, not {type(value).__name__}")
            if name in QUEUE_HEADERS and not written:
                # A queue reads these: a value it cannot use is refused at the write.
                check_queue_header(name, value or b"")
            raw_name = name.encode()
            if len(raw_name) > 0xFFFF:
                raise InvalidValue(f"header name longer than 65535 bytes: {name[:40]!r}...")
            out += _U16.pack(len(raw_name)) + raw_name
            out += _NULL_LENGTH if value is None else _U32.pack(len(value)) + value
    except UnicodeEncodeError:
        raise InvalidValue(
            "a header name or value is not valid Unicode (it holds a lone surrogate)"
        ) from None
    except (TypeError, ValueError):
        raise InvalidValue("headers must be a dict or a list of (name, value) pairs") from None
    return bytes(out) if out else None


def decode_headers(blob: bytes | None) -> Headers:
    """Headers from their stored blob: a list of (name, bytes), a null value
    (Kafka's, `encode_headers(nulls=True)`) as empty bytes."""
    if not blob:
        return []
    out: Headers = []
    i, n = 0, len(blob)
    while i < n:
        (ln,) = _U16.unpack_from(blob, i)
        i += 2
        name = blob[i : i + ln].decode()
        i += ln
        (lv,) = _U32.unpack_from(blob, i)
        i += 4
        if lv == NULL_VALUE:
            out.append((name, b""))
            continue
        out.append((name, bytes(blob[i : i + lv])))
        i += lv
    return out


def encode_meta(
    fmt: int | None, key: bytes | None, headers: bytes | None, producer: str | None
) -> bytes | None:
    """Pack a record's format, key, headers and producer into one blob (None when all are absent)."""
    if fmt is None and key is None and headers is None and producer is None:
        return None
    flags = F_TEXT if fmt == FMT_TEXT else 0
    out = bytearray(1)
    if key is not None:
        flags |= F_KEY
        out += _U32.pack(len(key)) + key
    if producer is not None:
        flags |= F_PRODUCER
        raw = producer.encode()
        out += _U16.pack(len(raw)) + raw
    if headers:
        flags |= F_HEADERS
        out += headers
    out[0] = flags
    return bytes(out)


def key_meta_prefix(n: int) -> bytes:
    """What `encode_meta(None, key, None, None)` puts before a key of `n`
    bytes: a front that makes a meta for every record of a batch (Kafka's
    produce) looks these up by the key's length and appends the key."""
    return bytes((F_KEY,)) + _U32.pack(n)


def meta_key(meta: bytes | None) -> bytes | None:
    """The key alone from a meta blob (a receive ordered by key asks for it per record)."""
    if meta is None or not meta[0] & F_KEY:
        return None
    (n,) = _U32.unpack_from(meta, 1)
    return bytes(meta[5 : 5 + n])


def decode_meta(meta: bytes | None) -> tuple[int | None, bytes | None, bytes | None, str | None]:
    """(format, key, headers blob, producer) from a meta blob."""
    if meta is None:
        return None, None, None, None
    flags = meta[0]
    i = 1
    key = producer = None
    if flags & F_KEY:
        (n,) = _U32.unpack_from(meta, i)
        key = bytes(meta[i + 4 : i + 4 + n])
        i += 4 + n
    if flags & F_PRODUCER:
        (n,) = _U16.unpack_from(meta, i)
        producer = bytes(meta[i + 2 : i + 2 + n]).decode()
        i += 2 + n
    headers = bytes(meta[i:]) if flags & F_HEADERS else None
    return (FMT_TEXT if flags & F_TEXT else None), key, headers, producer


def decode_data(stored: bytes | str, fmt: int | None) -> Any:
    """A stored value back to what was sent: bytes, str or a JSON value."""
    if type(stored) is bytes:
        return stored
    if fmt == FMT_TEXT:
        return stored
    return _json_loads(stored)


class Message(tuple[Any, ...]):
    """A record as read from a partition.

    A tuple underneath (like kafka-python's ConsumerRecord) so that a fetch of
    a thousand records builds them in C; the accessors decode lazily. The
    tuple holds (offset, timestamp, stored value, meta); topic and partition
    live on a subclass made once per partition, so they cost nothing per
    record.
    """

    __slots__ = ()
    topic: str = ""
    partition: int = 0

    offset: int = property(itemgetter(0))  # type: ignore[assignment]
    timestamp: int = property(itemgetter(1))  # type: ignore[assignment]

    @property
    def value(self) -> bytes:
        """The payload as raw bytes."""
        v = self[2]
        return v if type(v) is bytes else v.encode()

    @property
    def data(self) -> Any:
        """The payload decoded: JSON to an object, text to str, bytes to bytes."""
        v = self[2]
        if type(v) is bytes:
            return v
        meta = self[3]
        if meta is not None and meta[0] & F_TEXT:
            return v
        return _json_loads(v)

    @property
    def key(self) -> bytes | None:
        """The record's key, or None."""
        return None if self[3] is None else decode_meta(self[3])[1]

    @property
    def headers(self) -> Headers:
        """The record's headers as (name, bytes) pairs."""
        return [] if self[3] is None else decode_headers(decode_meta(self[3])[2])

    @property
    def producer(self) -> str | None:
        """The id of the producer that sent the record, or None."""
        return None if self[3] is None else decode_meta(self[3])[3]

    @property
    def format(self) -> str:
        """'bytes', 'text' or 'json': how the value was sent."""
        if type(self[2]) is bytes:
            return "bytes"
        meta = self[3]
        return "text" if meta is not None and meta[0] & F_TEXT else "json"

    def __eq__(self, other: object) -> bool:
        # Compared by topic and partition, not by class: the class cache below
        # may make a second class for the same partition after it is trimmed.
        return (
            isinstance(other, Message)
            and self.partition == other.partition
            and self.topic == other.topic
            and tuple.__eq__(self, other)
        )

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self[0]))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.topic, self.partition, tuple(self)))

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, partition={self.partition}, offset={self[0]}, "
            f"timestamp={self[1]}, key={self.key!r}, value={self.value[:60]!r})"
        )


# One made class per (topic, partition), so a fetch builds its messages in C.
# Bounded: a process that reads many short-lived topics would otherwise keep a
# class for each forever. Past the bound the cache starts again; the classes
# in use stay alive through their messages.
MAX_MESSAGE_CLASSES = 4096
_classes: dict[tuple[str, int], type[Message]] = {}


def message_class(topic: str, partition: int) -> type[Message]:
    """The Message subclass that carries `topic` and `partition`."""
    cls = _classes.get((topic, partition))
    if cls is None:
        if len(_classes) >= MAX_MESSAGE_CLASSES:
            _classes.clear()
        cls = type("Message", (Message,), {"__slots__": (), "topic": topic, "partition": partition})
        cls.__module__ = __name__
        cls.__qualname__ = "Message"
        _classes[(topic, partition)] = cls
    return cls


def _rebuild(topic: str, partition: int, row: tuple[Any, ...]) -> Message:
    return tuple.__new__(message_class(topic, partition), row)


def make_messages(topic: str, partition: int, rows: Iterable[Row]) -> list[Message]:
    """Wrap store rows (in Message layout) without a Python-level loop.

    `map(cls, rows)`, not `map(tuple.__new__, repeat(cls), rows)`: calling
    the class passes one argument tuple to `tuple.__new__`, where the unbound
    `__new__` packs two and slices one off (a sixth fewer instructions a
    record, counted under callgrind).
    """
    return list(map(message_class(topic, partition), rows))


def make_message(topic: str, partition: int, row: tuple[Any, ...]) -> Message:
    """One store row as a Message of `topic` / `partition`."""
    return tuple.__new__(message_class(topic, partition), row)


@dataclass(frozen=True)
class NewRecord:
    """One record of a batch that carries its own key or headers."""

    value: Any
    key: Any = None
    headers: Any = None


class Prepared(NamedTuple):
    """An encoded batch for one partition, ready for `Log.write`.

    Made by `Producer.prepare`, which raises every bad-input error, so a
    server can refuse one request and still commit the others of a group
    commit.
    """

    topic: str
    partition: int
    values: list[bytes | str]
    metas: list[bytes | None] | None
    timestamp: int | None = None  # ms since epoch; None: the log's clock at write
    wire: WireBatch | None = None  # the bytes a client sent them in, for a store that keeps them


class Sent(NamedTuple):
    """Where a sent record went."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class BatchSent(NamedTuple):
    """Where a sent batch went: `count` records from `first_offset` on."""

    topic: str
    partition: int
    first_offset: int
    # Shadows tuple.count (a method); kept, as it is the public name of the figure.
    count: int  # type: ignore[assignment]
    timestamp: int

    @property
    def last_offset(self) -> int:
        """The batch's last record's offset."""
        return self.first_offset + self.count - 1
