"""How the command line prints: records as NDJSON, views as tables or JSON.

A record line carries topic, partition, offset, timestamp, key, format,
data, headers and producer. `data` is the value as the record holds it: a
JSON value, a string for text, and for bytes `{"base64": "..."}`; `format`
says which ("json", "text" or "bytes") so that a JSON object shaped like the
marker is never mistaken for bytes. A key or header value that is not UTF-8
is printed with the same marker.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import click
from tabulate import tabulate

import tidelog

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
dumps = _dumps  # a value as compact JSON text, for the lines other modules build


def bytes_field(raw: bytes | None) -> Any:
    """A key or header value: text when it is UTF-8, else the base64 marker."""
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def record_line(msg: tidelog.Message) -> str:
    """One record as a line of NDJSON.

    A JSON value is spliced in as stored (the core wrote it as compact,
    one-line JSON) rather than parsed and encoded again: that halves the
    cost of a line.
    """
    fmt = msg.format
    if fmt == "json":
        data = msg.value.decode()
    elif fmt == "text":
        data = _dumps(msg.data)
    else:
        data = _dumps({"base64": base64.b64encode(msg.value).decode()})
    key = msg.key
    headers = msg.headers
    producer = msg.producer
    return (
        f'{{"topic":{_dumps(msg.topic)},"partition":{msg.partition},"offset":{msg.offset},'
        f'"timestamp":{msg.timestamp},"key":{"null" if key is None else _dumps(bytes_field(key))},'
        f'"format":"{fmt}","data":{data},'
        f'"headers":{_dumps([[name, bytes_field(value)] for name, value in headers]) if headers else "[]"},'
        f'"producer":{"null" if producer is None else _dumps(producer)}}}\n'
    )


def write_records(out: TextIO, messages: Iterable[tidelog.Message]) -> None:
    out.writelines(map(record_line, messages))


def emit(obj: Any) -> None:
    """One JSON document on a line of stdout."""
    click.echo(_dumps(obj))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> None:
    """An aligned table with a header row, as `kubectl get` prints them.

    Cells are never parsed as numbers (a topic named "1e5" stays "1e5");
    the columns in `right` (counts and offsets) are aligned right.
    """
    rows = list(rows)
    if not rows:
        click.echo("  ".join(headers))
        return
    align = ["right" if i in right else "left" for i in range(len(headers))]
    click.echo(tabulate(rows, headers=list(headers), tablefmt="plain", disable_numparse=True, colalign=align))


def when(ms: int) -> str:
    """A timestamp (ms since epoch) as UTC ISO 8601, for human views."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
