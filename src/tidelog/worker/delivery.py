"""What both engines share: the POST body, one attempt, and the commit rule.

A batch is the records of one partition, in offset order, posted as

    {"topic": "orders", "partition": 0, "messages": [
      {"offset": 7, "timestamp": 1767225600000, "key": "user-7", "format": "json",
       "data": {"orderId": 1}, "headers": [["trace", "abc"]]}, ...]}

`data` is the value as `Message.data` gives it: a JSON value, a string for
text, and `{"base64": "..."}` for bytes; `format` ("json", "text" or
"bytes") says which, so a JSON object shaped like the marker is never taken
for bytes. A key or a header value is a string when it is UTF-8, else
`{"base64": "..."}`. Headers are [name, value] pairs in order (names may
repeat). These are the conventions of the command line's record lines.

The commit rule: the group's offset moves to the batch's last offset only
when the endpoint answered 2xx and the whole answer arrived. Any other
status (3xx included: redirects are not followed), a timeout or a broken
connection is a failure, and the same batch is posted again.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import httpx

from ..records import Message
from .config import Feed

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class Attempt(NamedTuple):
    """How one POST went. `cause` labels failures in metrics and logs:
    "http_<status>", "timeout" or "connection"."""

    ok: bool
    cause: str | None = None
    detail: str = ""


def bytes_field(raw: bytes | None) -> Any:
    """A key or header value: text when it is UTF-8, else the base64 marker."""
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def message_json(
    offset: int,
    timestamp: int,
    key: bytes | None,
    fmt: str,
    value: bytes | str,
    headers: Sequence[tuple[str, bytes]] | None,
) -> str:
    """One message of the body as JSON text.

    A JSON value is spliced in as stored (the core wrote it as compact JSON)
    rather than parsed and encoded again.
    """
    if fmt == "json":
        data = value if isinstance(value, str) else value.decode()
    elif fmt == "text":
        data = _dumps(value if isinstance(value, str) else value.decode())
    else:
        raw = value if isinstance(value, bytes) else value.encode()
        data = _dumps({"base64": base64.b64encode(raw).decode()})
    return (
        f'{{"offset":{offset},"timestamp":{timestamp},'
        f'"key":{"null" if key is None else _dumps(bytes_field(key))},"format":"{fmt}","data":{data},'
        f'"headers":{_dumps([[n, bytes_field(v)] for n, v in headers]) if headers else "[]"}}}'
    )


def messages_json(messages: Iterable[Message]) -> list[str]:
    return [message_json(m[0], m[1], m.key, m.format, m[2], m.headers) for m in messages]


def body(topic: str, partition: int, messages: list[str]) -> bytes:
    return (f'{{"topic":{_dumps(topic)},"partition":{partition},"messages":[{",".join(messages)}]}}').encode()


def request_headers(feed: Feed) -> dict[str, str]:
    return {"content-type": "application/json", **dict(feed.headers)}


def timeout(feed: Feed) -> httpx.Timeout:
    """`timeout` bounds each step of a request: connecting, sending, waiting for the answer."""
    return httpx.Timeout(feed.timeout_ms / 1000)


def judge(status: int) -> Attempt:
    """The commit rule."""
    if 200 <= status < 300:
        return Attempt(True)
    return Attempt(False, f"http_{status}", f"the endpoint answered {status}")


def failure(error: httpx.HTTPError) -> Attempt:
    if isinstance(error, httpx.TimeoutException):
        return Attempt(False, "timeout", f"no answer within the timeout ({type(error).__name__})")
    return Attempt(False, "connection", f"{type(error).__name__}: {error}")


def post(client: httpx.Client, url: str, content: bytes) -> Attempt:
    """One POST, the answer read to its end (a connection cut mid-answer is a failure)."""
    try:
        response = client.post(url, content=content)
    except httpx.HTTPError as e:
        return failure(e)
    return judge(response.status_code)


async def post_async(client: httpx.AsyncClient, url: str, content: bytes) -> Attempt:
    try:
        response = await client.post(url, content=content)
    except httpx.HTTPError as e:
        return failure(e)
    return judge(response.status_code)
