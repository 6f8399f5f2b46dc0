"""RESP2 and RESP3 replies, and the Redis wording of errors.

Requests are parsed by hiredis's C reader (see resp.py); replies are built
here from Python values: bytes and str are bulk strings, int an integer,
None a null, list an array, dict a map (a flat array in RESP2), and the
wrappers below for simple strings, errors and doubles.
"""

from __future__ import annotations

from typing import Any

from ...errors import (
    GroupExists,
    InvalidStreamId,
    StreamIdTooSmall,
    TidelogError,
    WrongType,
)

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
NOT_INTEGER = "ERR value is not an integer or out of range"
SYNTAX = "ERR syntax error"


class Simple(str):
    """A simple string reply (+...)."""


class Push(list):
    """A pub/sub frame: `>` in RESP3, an array in RESP2 (as Redis sends them)."""


class Verbatim(str):
    """A verbatim text reply (RESP3 `=`; a bulk string in RESP2)."""


class RespError(Exception):
    """A command refused with a Redis error line (its first word is the code)."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line


def text(raw: bytes) -> str:
    """An argument as text (bytes that are not UTF-8 replaced, never refused)."""
    return raw.decode("utf-8", "replace")


def arity_error(name: str) -> RespError:
    return RespError(f"ERR wrong number of arguments for '{name}' command")


def translate(e: Exception) -> str:
    """The Redis error line for a tidelog error."""
    if isinstance(e, RespError):
        return e.line
    if isinstance(e, WrongType):
        # Redis's words first (clients match on them), then why: a stream key
        # is a one-partition topic.
        return f"{WRONGTYPE}: {e}"
    if isinstance(e, GroupExists):
        return "BUSYGROUP Consumer Group name already exists"
    if isinstance(e, StreamIdTooSmall):
        return f"ERR {e}"
    if isinstance(e, InvalidStreamId):
        text = str(e)
        return f"ERR {text}" if text.startswith("The ID") else INVALID_ID
    if isinstance(e, TidelogError):
        return f"ERR {e}"
    return f"ERR internal error: {type(e).__name__}: {e}"


def _one_line(text: str) -> bytes:
    return text.replace("\r", " ").replace("\n", " ").encode()


def error(line: str) -> bytes:
    return b"-" + _one_line(line) + b"\r\n"


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


def encode(value: Any, proto: int = 2) -> bytes:
    out: list[bytes] = []
    _encode(value, proto, out)
    return b"".join(out)


def _encode(value: Any, proto: int, out: list[bytes]) -> None:
    kind = type(value)
    if kind is bytes:
        out.append(b"$%d\r\n%b\r\n" % (len(value), value))
    elif kind is Simple:
        out.append(b"+" + _one_line(value) + b"\r\n")
    elif kind is str:
        raw = value.encode()
        out.append(b"$%d\r\n%b\r\n" % (len(raw), raw))
    elif kind is int or kind is bool:
        out.append(b":%d\r\n" % value)
    elif value is None:
        out.append(b"_\r\n" if proto == 3 else b"$-1\r\n")
    elif kind is Push:
        out.append((b">%d\r\n" if proto == 3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode(item, proto, out)
    elif kind is list or kind is tuple:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode(item, proto, out)
    elif kind is dict:
        out.append(
            (b"%%%d\r\n" if proto == 3 else b"*%d\r\n") % (len(value) if proto == 3 else 2 * len(value))
        )
        for k, v in value.items():
            _encode(k, proto, out)
            _encode(v, proto, out)
    elif kind is Verbatim:
        raw = value.encode()
        if proto == 3:
            out.append(b"=%d\r\ntxt:%b\r\n" % (len(raw) + 4, raw))
        else:
            out.append(b"$%d\r\n%b\r\n" % (len(raw), raw))
    elif kind is float:
        text = repr(value).encode()
        out.append((b",%b\r\n" if proto == 3 else b"$%d\r\n%%b\r\n" % len(text)) % text)
    elif value is NULL_ARRAY:
        out.append(b"_\r\n" if proto == 3 else b"*-1\r\n")
    elif isinstance(value, RespError):
        out.append(error(value.line))
    else:
        _encode(str(value), proto, out)


class _NullArray:
    """The null array: `*-1` in RESP2, `_` in RESP3."""


NULL_ARRAY = _NullArray()
