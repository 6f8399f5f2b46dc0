"""Request parsing: the body limit, JSON, typed bodies, and fields that name themselves in errors."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import msgspec
import msgspec.inspect
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


T = TypeVar("T")


_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}  # one a model, made on first use


def _decoder(typ: type[T]) -> msgspec.json.Decoder[T]:
    decoder = _DECODERS.get(typ)
    if decoder is None:
        decoder = _DECODERS[typ] = msgspec.json.Decoder(typ)
    return decoder


def decode(raw: bytes, typ: type[T]) -> T:
    """The body as a `typ` (a model of models.py), decoded and validated in
    one pass; what the model refuses is a 400 that names the field, in the
    words of the hand-written checks (`field`, `int_field`, `no_unknown`)."""
    if not raw:
        raise InvalidRequest("the request body must be JSON; it is empty")
    try:
        return _decoder(typ).decode(raw)
    except msgspec.ValidationError as e:
        raise InvalidRequest(_refusal(str(e), typ)) from None
    except msgspec.DecodeError as e:
        raise InvalidRequest(f"malformed JSON body: {e}") from None


async def read_model(request: Request, max_body: int, typ: type[T]) -> T:
    """The body (within `max_body`) as a `typ`: `read_body`, then `decode`."""
    return decode(await read_body(request, max_body), typ)


# msgspec's messages: "<what> - at `$.records[0].key`", or "<what>" about the body itself.
_EXPECTED = re.compile(r"Expected `([^`]+)`, got `(\w+)`")
_BOUND = re.compile(r"Expected `\w+` (>=|<=|>|<) (\S+)")
_LENGTH = re.compile(r"Expected `(?:array|object|str)` of length (>=|<=) (\d+)")
_FIELD = re.compile(r"Object (missing required|contains unknown) field `([^`]+)`")
_STEP = re.compile(r"\.([^.\[]+)|\[([^\]]*)\]")
_ARTICLES = {"int": "an integer", "str": "a string", "object": "an object", "array": "an array"}
_ARTICLES |= {"bool": "a boolean", "float": "a number", "bytes": "a base64 string"}


def _refusal(said: str, typ: type) -> str:
    what, _, at = said.partition(" - at `")
    path = at.rstrip("`").removeprefix("$").removeprefix(".")
    name = f"field {path!r}"
    if m := _FIELD.match(what):
        if m.group(1) == "missing required":
            return f"field {(f'{path}.' if path else '') + m.group(2)!r} is required"
        known = sorted(_fields(_info_at(typ, path)))
        where = path or "the body"
        return f"{where} has unknown field(s) {m.group(2)}" + (
            f"; known: {', '.join(known)}" if known else ""
        )
    if m := _EXPECTED.match(what):
        wanted = " or ".join(_ARTICLES.get(t, t) for t in m.group(1).split(" | ") if t != "null")
        got = "string" if m.group(2) == "str" else m.group(2)  # as `kind` names it
        if not path:
            return f"the request body must be {wanted.replace('an object', 'a JSON object')}, not {got}"
        return f"{name} must be {wanted}, not {got}"
    if m := _LENGTH.match(what):
        return f"{name} must hold at {'least' if m.group(1) == '>=' else 'most'} {m.group(2)} item(s)"
    if m := _BOUND.match(what):
        return f"{name} must be {m.group(1)} {m.group(2)}"
    if what.startswith("Invalid enum value"):
        options = [str(v) for info in _info_at(typ, path) for v in getattr(info, "values", ())]
        return f"{name} must be one of {', '.join(options)}, not {what.removeprefix('Invalid enum value ')}"
    if what.startswith("Expected `str` matching regex"):
        return f"{name} does not match {what.removeprefix('Expected `str` matching regex ')}"
    if what == "Invalid base64 encoded string":
        return f"{name} is not valid base64"
    return f"{name}: {what}" if path else what


def _info_at(typ: type, path: str) -> list[Any]:
    """What the model allows at `path` (records[0].format): one msgspec type
    info a member of each union on the way."""
    infos: list[Any] = [msgspec.inspect.type_info(typ)]
    for field_name, _ in _STEP.findall(f".{path}" if path else ""):
        nxt: list[Any] = []
        for info in _members(infos):
            if field_name and isinstance(info, msgspec.inspect.StructType):
                nxt += [f.type for f in info.fields if f.encode_name == field_name]
            elif not field_name and isinstance(info, msgspec.inspect.ListType | msgspec.inspect.DictType):
                nxt.append(getattr(info, "item_type", None) or getattr(info, "value_type", None))
        infos = nxt
    return _members(infos)


def _members(infos: list[Any]) -> list[Any]:
    out = []
    for info in infos:
        while isinstance(info, msgspec.inspect.Metadata):
            info = info.type
        out += _members(list(info.types)) if isinstance(info, msgspec.inspect.UnionType) else [info]
    return out


def _fields(infos: list[Any]) -> list[str]:
    return [
        f.encode_name for info in infos if isinstance(info, msgspec.inspect.StructType) for f in info.fields
    ]


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
