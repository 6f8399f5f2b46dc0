"""Request parsing: the body limit, JSON, and fields that name themselves in errors."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.requests import Request

from ...bounds import MAX_OFFSET
from ...errors import InvalidRequest
from .errors import BodyTooLarge

# orjson reads integers past 64 bits as floats; such bodies go through the
# standard library, which keeps them exact.
_LONG_INT = re.compile(rb"\d{20}")
# Numbers in a query or a path as a client writes them: ASCII digits, no
# spaces, no sign but a minus, no other script's digits (Python's int() and
# float() take all of those and would answer for a number nobody sent).
_QUERY_INT = re.compile(r"-?[0-9]+")
_QUERY_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


async def read_body(request: Request, max_body: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as it passes `max_body`."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise BodyTooLarge(f"request body is {length} bytes, over the server's limit of {max_body}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise BodyTooLarge(f"request body is over the server's limit of {max_body} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    if not raw:
        raise InvalidRequest("the request body must be JSON; it is empty")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise InvalidRequest(f"malformed JSON body: {e}") from None
    if _LONG_INT.search(raw):
        value = json.loads(raw)
    return value


async def json_object(request: Request, max_body: int) -> dict[str, Any]:
    body = parse_json(await read_body(request, max_body))
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {kind(body)}")
    return body


JSON_TYPES: dict[type, str] = {dict: "object", list: "array", str: "string"}


def kind(value: Any) -> str:
    return "null" if value is None else JSON_TYPES.get(type(value), type(value).__name__)


def field(
    body: dict[str, Any], name: str, typ: type | tuple[type, ...], *, default: Any = ..., where: str = ""
) -> Any:
    """body[name], checked against `typ`; a missing or mistyped field is a 400 naming it."""
    label = f"{where}{name}"
    if name not in body or (body[name] is None and default is not ...):
        if default is ...:
            raise InvalidRequest(f"field {label!r} is required")
        return default
    value = body[name]
    if not isinstance(value, typ) or (isinstance(value, bool) and typ is int):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise InvalidRequest(f"field {label!r} must be {_article(names)}, not {kind(value)}")
    return value


def int_field(
    body: dict[str, Any], name: str, minimum: int = 0, maximum: int | None = MAX_OFFSET, **kw: Any
) -> Any:
    """body[name], an integer from `minimum` to `maximum` (64 bits unless told: every
    integer is bounded). `maximum=None` leaves the top to the core, which knows a
    better word for it: an offset past a partition's end is OffsetOutOfRange."""
    value = field(body, name, int, **kw)
    if isinstance(value, int) and (value < minimum or (maximum is not None and value > maximum)):
        shown = str(value) if abs(value) < 1 << 64 else f"{str(value)[:20]}..."
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise InvalidRequest(f"field {kw.get('where', '') + name!r} must be {bound}, got {shown}")
    return value


def no_unknown(body: dict[str, Any], known: set[str] | frozenset[str], where: str = "the body") -> None:
    unknown = set(body) - known
    if unknown:
        raise InvalidRequest(
            f"{where} has unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )


def _article(names: str) -> str:
    return {"str": "a string", "int": "an integer", "dict": "an object", "list": "an array"}.get(names, names)


def query_int(
    request: Request, name: str, default: int, minimum: int = 0, maximum: int | None = MAX_OFFSET
) -> int:
    """An integer from the query string, `minimum` to `maximum` (a 64-bit offset by default)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not _QUERY_INT.fullmatch(raw):
        raise InvalidRequest(f"query parameter {name!r} must be an integer, got {raw[:40]!r}")
    # int() refuses over 4300 digits: such a number is out of range, not malformed.
    value = int(raw) if len(raw) <= 40 else (-1 if raw[0] == "-" else 1) << 200
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise InvalidRequest(f"query parameter {name!r} must be {bound}, got {raw[:40]}")
    return value


def query_limit(request: Request, name: str, default: int, maximum: int) -> int:
    """A how-many parameter (`limit`, `max`, `batch`): at least 1, and held to
    `maximum` when it asks for more, as Redis's COUNT and SQS's
    MaxNumberOfMessages serve what they can instead of refusing. A client
    reads the rest with its next request."""
    return min(query_int(request, name, default, 1, None), maximum)


def limit_field(body: dict[str, Any], name: str, default: int, maximum: int) -> int:
    """`query_limit` for a JSON body's field."""
    value: int = int_field(body, name, 1, default=default)
    return min(value, maximum)


def _query_number(request: Request, name: str) -> float | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not _QUERY_NUMBER.fullmatch(raw):
        raise InvalidRequest(f"query parameter {name!r} must be a number of seconds, got {raw[:40]!r}")
    return float(raw)  # a number too large for a double is inf, which every range refuses


def query_wait(request: Request, cap: float) -> float:
    """`wait=` seconds for a long-poll: 0 to 30, then held to the server's cap."""
    value = _query_number(request, "wait")
    if value is None:
        return 0.0
    if not 0 <= value <= 30:
        raise InvalidRequest(f"query parameter 'wait' must be between 0 and 30 seconds, got {value:g}")
    return min(value, cap)


def query_seconds(request: Request, name: str, default: float | None = None) -> float | None:
    """A number of seconds from the query string (range checks are the core's)."""
    value = _query_number(request, name)
    return default if value is None else value


def number_field(body: dict[str, Any], name: str, *, default: Any = ...) -> Any:
    """A number of seconds from a JSON body (int or float; range checks are the core's)."""
    value = field(body, name, (int, float), default=default)
    if isinstance(value, bool):
        raise InvalidRequest(f"field {name!r} must be a number, not a boolean")
    return value


def query_bool(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise InvalidRequest(f"query parameter {name!r} must be true or false, got {raw[:40]!r}")


def query_str(request: Request, name: str, required: bool = True) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        if required:
            raise InvalidRequest(f"query parameter {name!r} is required")
        return None
    if "\ufffd" in raw:
        query_dict(request)  # undecodable text is refused, never stored as U+FFFD
    return raw


def query_dict(request: Request) -> dict[str, str]:
    """The query's parameters (the last of each name), as UTF-8 text.

    Starlette decodes a query leniently: a byte that is not UTF-8 (`%ff`)
    becomes U+FFFD and the text a client sent is lost without a word. A
    parameter here is what the client sent, or an InvalidRequest.
    """
    raw = request.scope.get("query_string", b"").decode("latin-1")
    try:
        return dict(parse_qsl(raw, keep_blank_values=True, encoding="utf-8", errors="strict"))
    except UnicodeDecodeError:
        raise InvalidRequest(
            "the query string holds text that is not UTF-8: percent-encode text as UTF-8 bytes"
        ) from None


def path_int(request: Request, name: str, maximum: int = MAX_OFFSET) -> int:
    """An integer from 0 to `maximum` in the path."""
    raw = request.path_params[name]
    if not raw.isascii() or not raw.isdigit():
        raise InvalidRequest(f"{name} in the path must be an integer >= 0, got {raw[:40]!r}")
    if len(raw) > 40 or int(raw) > maximum:
        raise InvalidRequest(f"{name} in the path must be between 0 and {maximum}, got {raw[:40]}")
    return int(raw)
