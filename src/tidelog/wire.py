"""The JSON shape of a record over HTTP, shared by the server and the http:// store.

A value travels as `value` with a `format`, the same three formats a record
is stored in (see `tidelog.records`):

    json   the value is the JSON itself (a JSON string is stored as text,
           as `producer.send("x")` stores a str)
    text   the value is the string
    bytes  the value is base64

Keys and header values are bytes. They travel as text when they are UTF-8
(`key`, a header's `value`) and as base64 otherwise (`key_base64`,
`value_base64`), so every record round-trips exactly.

Standard library only: the http:// store must not need the server's extras.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from .errors import InvalidRequest
from .records import (
    FMT_TEXT,
    NewRecord,
    _json_dumps,
    decode_headers,
    decode_meta,
    encode_headers,
    encode_meta,
)
from .store.base import Row

FORMATS = ("json", "text", "bytes")
RECORD_FIELDS = frozenset({"value", "format", "key", "key_base64", "headers", "partition"})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any, where: str) -> bytes:
    if not isinstance(text, str):
        raise InvalidRequest(f"{where} must be a base64 string, not {_kind(text)}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where} is not valid base64") from None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _text_or_b64(out: dict[str, Any], field: str, data: bytes) -> None:
    try:
        out[field] = data.decode()
    except UnicodeDecodeError:
        out[field + "_base64"] = b64(data)


# server side: rows out, records in ------------------------------------------------


def row_to_wire(topic: str, partition: int, row: Row, raw_json: Callable[[str], Any]) -> dict[str, Any]:
    """A store row (Message layout) as JSON. `raw_json` embeds stored JSON text as is."""
    offset, timestamp, stored, meta = row[0], row[1], row[2], row[3]
    fmt, key, headers, producer = decode_meta(meta)
    out: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset, "timestamp": timestamp}
    if isinstance(stored, bytes):
        out["format"], out["value"] = "bytes", b64(stored)
    elif fmt == FMT_TEXT:
        out["format"], out["value"] = "text", stored
    else:
        out["format"], out["value"] = "json", raw_json(stored)
    out["key"] = None
    if key is not None:
        del out["key"]
        _text_or_b64(out, "key", key)
    wire_headers = []
    for name, value in decode_headers(headers):
        pair: dict[str, Any] = {"name": name}
        _text_or_b64(pair, "value", value)
        wire_headers.append(pair)
    out["headers"] = wire_headers
    out["producer"] = producer
    return out


def _headers_in(raw: Any, where: str) -> list[tuple[str, bytes]] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        pairs = []
        for name, value in raw.items():
            if not isinstance(value, str):
                raise InvalidRequest(f"{where}[{name!r}] must be a string, not {_kind(value)}")
            pairs.append((name, value.encode()))
        return pairs
    if not isinstance(raw, list):
        raise InvalidRequest(f"{where} must be an object or a list, not {_kind(raw)}")
    pairs = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], str)
        ):
            pairs.append((item[0], item[1].encode()))
            continue
        if not isinstance(item, dict):
            raise InvalidRequest(f"{at} must be an object with name and value, not {_kind(item)}")
        name = item.get("name")
        if not isinstance(name, str):
            raise InvalidRequest(f"{at}.name must be a string, not {_kind(name)}")
        extra = set(item) - {"name", "value", "value_base64"}
        if extra:
            raise InvalidRequest(f"{at} has unknown field(s) {', '.join(sorted(extra))}")
        if ("value" in item) == ("value_base64" in item):
            raise InvalidRequest(f"{at} needs exactly one of value, value_base64")
        if "value" in item:
            value = item["value"]
            if not isinstance(value, str):
                raise InvalidRequest(f"{at}.value must be a string, not {_kind(value)}")
            pairs.append((name, value.encode()))
        else:
            pairs.append((name, unb64(item["value_base64"], f"{at}.value_base64")))
    return pairs


def _value_in(item: dict[str, Any], at: str) -> Any:
    if "value" not in item:
        raise InvalidRequest(f"{at}.value is required")
    value = item["value"]
    fmt = item.get("format", "json")
    if fmt == "json":
        return value
    if fmt == "text":
        if not isinstance(value, str):
            raise InvalidRequest(f"{at}.value must be a string when format is text, not {_kind(value)}")
        return value
    if fmt == "bytes":
        return unb64(value, f"{at}.value")
    raise InvalidRequest(f"{at}.format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def record_in(item: Any, at: str) -> tuple[Any, int | None, Any]:
    """(value or NewRecord, explicit partition or None, key or None) from a wire record."""
    if not isinstance(item, dict):
        raise InvalidRequest(f"{at} must be an object, not {_kind(item)}")
    if len(item) == 1 and "value" in item:  # the common record: a value and nothing else
        return item["value"], None, None
    unknown = set(item) - RECORD_FIELDS
    if unknown:
        raise InvalidRequest(f"{at} has unknown field(s) {', '.join(sorted(unknown))}")
    value = _value_in(item, at)
    key = item.get("key")
    if key is not None and not isinstance(key, str):
        raise InvalidRequest(f"{at}.key must be a string, not {_kind(key)}")
    if "key_base64" in item and item["key_base64"] is not None:
        if key is not None:
            raise InvalidRequest(f"{at} has both key and key_base64; send one")
        key = unb64(item["key_base64"], f"{at}.key_base64")
    headers = _headers_in(item.get("headers"), f"{at}.headers")
    partition = item.get("partition")
    if partition is not None and (type(partition) is not int or partition < 0):
        raise InvalidRequest(f"{at}.partition must be an integer >= 0, not {partition!r}")
    if key is None and headers is None:
        return value, partition, None
    return NewRecord(value, key, headers), partition, key


# client side: records out, rows in ---------------------------------------------------


def stored_to_wire(stored: bytes | str, meta: bytes | None) -> tuple[dict[str, Any], str | None]:
    """A record as the core encoded it, as a wire record; and its producer."""
    fmt, key, headers, producer = decode_meta(meta)
    if type(stored) is bytes:
        out: dict[str, Any] = {"value": b64(stored), "format": "bytes"}
    elif fmt == FMT_TEXT:
        out = {"value": stored, "format": "text"}
    else:
        out = {"value": json.loads(stored)}
    if key is not None:
        out["key_base64"] = b64(key)
    if headers:
        out["headers"] = [{"name": n, "value_base64": b64(v)} for n, v in decode_headers(headers)]
    return out, producer


def wire_to_row(item: dict[str, Any]) -> Row:
    """A wire record back into a store row (Message layout), byte for byte."""
    fmt = item["format"]
    if fmt == "bytes":
        stored: bytes | str = base64.b64decode(item["value"])
    elif fmt == "text":
        stored = item["value"]
    else:
        stored = _json_dumps(item["value"])
    key: bytes | None
    if "key_base64" in item:
        key = base64.b64decode(item["key_base64"])
    else:
        key = None if item.get("key") is None else item["key"].encode()
    headers = encode_headers(
        [
            (h["name"], base64.b64decode(h["value_base64"]) if "value_base64" in h else h["value"].encode())
            for h in item.get("headers") or ()
        ],
        written=True,  # a record read back: one an older version wrote is delivered as it is
    )
    meta = encode_meta(FMT_TEXT if fmt == "text" else None, key, headers, item.get("producer"))
    return (item["offset"], item["timestamp"], stored, meta)
