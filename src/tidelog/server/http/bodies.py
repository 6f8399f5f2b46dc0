"""Request parsing: the body limit, JSON, and fields that name themselves in errors."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from starlette.requests import Request

from ...errors import InvalidRequest
from .errors import BodyTooLarge

# orjson reads integers past 64 bits as floats; such bodies go through the
# standard library, which keeps them exact.
_LONG_INT = re.compile(rb"\d{20}")


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
    body: dict[str, Any], name: str, minimum: int = 0, maximum: int | None = None, **kw: Any
) -> Any:
    value = field(body, name, int, **kw)
    if isinstance(value, int) and (value < minimum or (maximum is not None and value > maximum)):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise InvalidRequest(f"field {kw.get('where', '') + name!r} must be {bound}, got {value}")
    return value


def no_unknown(body: dict[str, Any], known: set[str] | frozenset[str], where: str = "the body") -> None:
    unknown = set(body) - known
    if unknown:
        raise InvalidRequest(
            f"{where} has unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )


def _article(names: str) -> str:
    return {"str": "a string", "int": "an integer", "dict": "an object", "list": "an array"}.get(names, names)


def query_int(request: Request, name: str, default: int, minimum: int = 0, maximum: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"query parameter {name!r} must be an integer, got {raw[:40]!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise InvalidRequest(f"query parameter {name!r} must be {bound}, got {value}")
    return value


def query_limit(request: Request, name: str, default: int, maximum: int) -> int:
    """A how-many parameter (`limit`, `max`, `batch`): at least 1, and held to
    `maximum` when it asks for more, as Redis's COUNT and SQS's
    MaxNumberOfMessages serve what they can instead of refusing. A client
    reads the rest with its next request."""
    return min(query_int(request, name, default, 1), maximum)


def limit_field(body: dict[str, Any], name: str, default: int, maximum: int) -> int:
    """`query_limit` for a JSON body's field."""
    value: int = int_field(body, name, 1, default=default)
    return min(value, maximum)


def query_wait(request: Request, cap: float) -> float:
    """`wait=` seconds for a long-poll: 0 to 30, then held to the server's cap."""
    raw = request.query_params.get("wait")
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(
            f"query parameter 'wait' must be a number of seconds, got {raw[:40]!r}"
        ) from None
    if not 0 <= value <= 30:  # also refuses nan
        raise InvalidRequest(f"query parameter 'wait' must be between 0 and 30 seconds, got {raw[:40]}")
    return min(value, cap)


def query_seconds(request: Request, name: str, default: float | None = None) -> float | None:
    """A number of seconds from the query string (range checks are the core's)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(
            f"query parameter {name!r} must be a number of seconds, got {raw[:40]!r}"
        ) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidRequest(f"query parameter {name!r} must be a finite number of seconds")
    return value


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
    return raw


def path_int(request: Request, name: str) -> int:
    raw = request.path_params[name]
    if not raw.isdigit() or len(raw) > 9:
        raise InvalidRequest(f"{name} in the path must be an integer >= 0, got {raw[:40]!r}")
    return int(raw)
