"""A client's bytes into commands, every length it announces checked before
anything is allocated for it.

hiredis's C reader parses fast, but it trusts what a client announces:
`*2000000000` makes it reserve two billion slots, fill them as arguments
arrive and free them one by one when the connection ends (seconds with the
event loop blocked). So hiredis is fed only bytes whose headers were checked:

- Before authentication (a token is set and AUTH has not succeeded yet), a
  small exact parser reads one command at a time with Redis 7's bounds for
  unauthenticated clients: 10 arguments, 16 KiB an argument.
- After it, hiredis parses. A scan of each chunk read, at C speed, finds
  every aggregate header (`*`, and RESP3's `%~>|`) that announces 1000 or
  more, and every `$` length with as many digits as max_request. hiredis is
  fed up to such a header, and what it consumed tells what the header is: the next command's count when hiredis stands at
  a command boundary (checked against max_args), an argument's length when
  it stands between arguments (checked against max_request; any other type
  there is refused, as Redis refuses it), or bytes inside a value when it
  holds part of one (nothing to check). Smaller headers cost hiredis at most
  999 slots a level of nesting, 1024 levels, and a command in progress may
  not grow past max_request bytes, so what one connection holds is bounded
  without a Python step per argument on the hot path (pipelined XADD).

A line that does not start with `*` at a command boundary is an inline
command (`PING` typed into telnet), as Redis reads it.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import hiredis

from ..limits import Limits

MAX_INLINE = 64 << 10  # Redis's PROTO_INLINE_MAX_SIZE
HEADER_MAX = 32  # a type byte, a 64-bit number and CRLF fit in it
# Redis 7's bounds for a client that has not authenticated (networking.c).
UNAUTHENTICATED_ARGS = 10
UNAUTHENTICATED_BULK = 16384
INT_MAX = (1 << 31) - 1  # Redis refuses a larger count as invalid, whoever asks

STAR, DOLLAR = ord("*"), ord("$")
# RESP3's aggregate type bytes, mapped to `*` when a read holds any, so that
# one search led by a literal byte finds every aggregate header (a character
# class scans several times slower). Lengths of other types than `$` (`=`,
# `!`) are not looked at: hiredis buffers them like any bytes, and a value
# of such a type is refused once complete, within max_request.
_AGGREGATES = bytes.maketrans(b"%~>|", b"****")
_AGGREGATE = re.compile(rb"\*\d{4}")  # 1000 or more slots: checked before hiredis sees it
_TAIL = re.compile(rb"[*$]\d{0,20}\Z")  # a header cut by the end of a read: kept for the next


# A small read (one command, as most clients send) is checked in one pass
# instead: its shape (every type byte a `*`, every digit a `0`) holds no
# `*0000` (a header announcing 1000 or more) and does not end in a header
# that may be cut. Three C calls: a regex led by a class costs a command's worth.
QUICK_MAX = 4096
_SHAPE = bytes.maketrans(b"$%~>|0123456789", b"*****0000000000")
_CUT = (b"*", b"*0", b"*00", b"*000")


def _marks(data: bytes) -> bytes:
    if b"%" in data or b"~" in data or b">" in data or b"|" in data:
        return data.translate(_AGGREGATES)
    return data


def _bulk_pattern(max_bulk: int) -> re.Pattern[bytes]:
    """Lengths with as many digits as the bound: the ones that may pass it."""
    return re.compile(rb"\$\d{%d}" % len(str(max_bulk)))


class ConnectionClosed(ConnectionError):
    """The client hung up."""


class ProtocolError(Exception):
    """The client broke the protocol; answered with this line, then the connection closes."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.line = f"ERR Protocol error: {reason}"


@dataclass(frozen=True)
class Bounds:
    """What one command may announce."""

    max_args: int
    max_bulk: int
    max_request: int
    authenticated: bool

    @classmethod
    def of(cls, limits: Limits, authenticated: bool) -> Bounds:
        if authenticated:
            return cls(limits.max_args, limits.max_request, limits.max_request, True)
        return cls(UNAUTHENTICATED_ARGS, UNAUTHENTICATED_BULK, limits.max_request, False)

    def count_error(self, count: int | None = None) -> ProtocolError:
        """Redis's words: a count that is no number or past any bound is invalid;
        one past the bound for clients not authenticated yet is said so."""
        if self.authenticated or count is None or count > INT_MAX:
            return ProtocolError("invalid multibulk length")
        return ProtocolError("unauthenticated multibulk length")

    def bulk_error(self, length: int | None = None) -> ProtocolError:
        if self.authenticated or length is None or length < 0 or length > self.max_request:
            return ProtocolError("invalid bulk length")
        return ProtocolError("unauthenticated bulk length")


def _number(raw: bytes | bytearray) -> int | None:
    """The decimal number of a header line (Redis's string2ll: an optional
    minus sign, ASCII digits), None when it is not one."""
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits or not digits.isdigit() or len(digits) > 19:
        return None
    return int(raw)


class RequestReader:
    """The commands in one connection's bytes, in order.

    `take(data)` for each chunk read, then `next_command()` until it answers
    None. A ProtocolError is raised once the commands before it are taken.
    `authenticate()` when AUTH succeeds: the bounds widen from the next
    command on.
    """

    def __init__(self, limits: Limits, authenticated: bool):
        self.limits = limits
        self.bounds = Bounds.of(limits, authenticated)
        self.bulk_pattern = _bulk_pattern(limits.max_request)
        self.parser = hiredis.Reader()
        self.ready: deque[list[bytes]] = deque()
        self.error: ProtocolError | None = None
        self.pending = bytearray()  # before authentication: bytes for the exact parser, from `start`
        self.start = 0
        self.held = b""  # after it: the end of a read that may be a header cut in two
        self.partial = False  # hiredis holds part of a command
        self.command_bytes = 0  # bytes fed since the last command boundary (an upper bound)

    def authenticate(self) -> None:
        self.bounds = Bounds.of(self.limits, True)

    def has_command(self) -> bool:
        """A command (or the protocol error that ends them) is ready to take."""
        return bool(self.ready) or self.error is not None or len(self.pending) > self.start

    def close(self) -> None:
        """Drop what the connection held (its memory goes back with it)."""
        self.parser = hiredis.Reader()
        self.ready.clear()
        self.pending, self.start = bytearray(), 0
        self.held = b""

    # taking bytes ------------------------------------------------------------------

    def take(self, data: bytes) -> None:
        if self.error is not None:
            return  # the connection is closing: nothing more is read
        if self.pending or not self.bounds.authenticated:
            self.pending += data
            if len(self.pending) - self.start > self.bounds.max_request + MAX_INLINE:
                self.error = self.too_large()
            return
        if len(data) <= QUICK_MAX and not self.held and (self.partial or data[0] == STAR):
            shape = data.translate(_SHAPE)
            if b"*0000" not in shape and not shape.endswith(_CUT):
                self._feed(data, 0, len(data))  # nothing in it to check first
                return
        self._take(data)

    def next_command(self) -> list[bytes] | None:
        """The next complete command, None when more bytes are needed."""
        while True:
            if self.ready:
                return self.ready.popleft()
            if self.error is not None:
                raise self.error
            if not self.pending:
                return None
            if not self.bounds.authenticated:
                try:
                    command = self._parse_one()
                except ProtocolError as e:
                    self.error = e
                    raise
                if command is None or command:
                    return command
                continue  # an empty command (`*0`, a blank line): skipped, as Redis skips it
            # Authenticated with bytes the exact parser read ahead of AUTH: hiredis takes them.
            data = bytes(self.pending[self.start :])
            self.pending, self.start = bytearray(), 0
            self._take(data)

    # after authentication: hiredis, fed up to each large header --------------------

    def _take(self, data: bytes) -> None:
        if self.held:
            data, self.held = self.held + data, b""
        end = len(data)
        marks = _marks(data)
        tail = _TAIL.search(marks, max(0, end - HEADER_MAX))
        if tail is not None:
            self.held, end = data[tail.start() :], tail.start()
        bounds = self.bounds
        pos = scan = 0  # fed up to pos; headers searched from scan
        aggregate = _AGGREGATE.search(marks, 0, end)
        bulk = self.bulk_pattern.search(marks, 0, end)
        while pos < end:
            if not self.partial and data[pos] != STAR:
                after = self._inline(data, pos, end)
                if after is None:
                    return
                pos = scan = after
                continue
            if aggregate is not None and aggregate.start() < scan:
                aggregate = _AGGREGATE.search(marks, scan, end)
            if bulk is not None and bulk.start() < scan:
                bulk = self.bulk_pattern.search(marks, scan, end)
            if aggregate is None and bulk is None:
                stop = end
            else:
                stop = min(m.start() for m in (aggregate, bulk) if m is not None)
            if stop > pos:
                self._feed(data, pos, stop)
                if self.error is not None:
                    return
                pos = stop
            if stop == end:
                return
            scan = stop + 1
            if self.parser.has_data():
                continue  # hiredis holds part of a value: these bytes are inside it
            if not self.partial and data[stop] != STAR:
                continue  # a command boundary, not an array: an inline command, read at the top
            line_end = data.find(b"\r\n", stop, stop + HEADER_MAX)
            if line_end < 0:
                if end - stop < HEADER_MAX:
                    self.held = data[stop:end] + self.held  # the rest of the line comes next
                    return
                line_end = stop + HEADER_MAX
            number = _number(data[stop + 1 : line_end])
            if not self.partial:  # the next command's argument count
                if number is None or number > bounds.max_args:
                    self.error = bounds.count_error(number)
                    return
            elif data[stop] != DOLLAR:  # an argument must be a bulk string, as Redis reads it
                self.error = ProtocolError(f"expected '$', got '{chr(data[stop])}'")
                return
            elif number is None or number < 0 or number > bounds.max_bulk:
                self.error = bounds.bulk_error(number)
                return
            scan = line_end + 2

    def _feed(self, data: bytes, start: int, stop: int) -> None:
        parser, bounds, ready = self.parser, self.bounds, self.ready
        fed = stop - start
        parser.feed(data, start, fed)
        # A command that ends in this feed is no longer than this: below the
        # bound (the rule) its size is not computed.
        measure = self.command_bytes + fed > bounds.max_request
        partial, command_bytes = True, self.command_bytes + fed
        try:
            while (frame := parser.gets()) is not False:
                if parser.has_data():
                    command_bytes = fed  # what follows the command: no more than this feed
                else:
                    partial, command_bytes = False, 0
                if type(frame) is list and frame:
                    if len(frame) > bounds.max_args:
                        raise bounds.count_error(len(frame))
                    if measure and sum(map(len, frame)) > bounds.max_request:
                        raise self.too_large()
                    for arg in frame:
                        if type(arg) is not bytes:
                            raise ProtocolError(f"expected '$', got {_kind(arg)}")
                    ready.append(frame)
                elif frame is not None and frame != []:  # `*-1` and `*0` are skipped, as Redis skips them
                    raise ProtocolError(f"expected '*', got {_kind(frame)}")
        except hiredis.ProtocolError as e:
            self.error = ProtocolError(str(e).removeprefix("Protocol error, "))
        except ProtocolError as e:
            self.error = e
        self.partial, self.command_bytes = partial, command_bytes
        if partial and command_bytes > bounds.max_request:
            self.error = self.too_large()

    def too_large(self) -> ProtocolError:
        return ProtocolError(f"request larger than {self.bounds.max_request} bytes")

    def _inline(self, data: bytes, pos: int, end: int) -> int | None:
        """Take the inline command at pos; where the next one starts, None when its line is not complete."""
        newline = data.find(b"\n", pos, end)
        if newline < 0:
            if end - pos > MAX_INLINE:
                self.error = ProtocolError("too big inline request")
            else:
                self.held = data[pos:end] + self.held
            return None
        if newline - pos > MAX_INLINE:
            self.error = ProtocolError("too big inline request")
            return None
        args = data[pos:newline].split()
        if len(args) > self.bounds.max_args:
            self.error = self.bounds.count_error(len(args))
            return None
        if args:
            self.ready.append(args)
        return newline + 1

    # before authentication: one command at a time, exactly -------------------------

    def _parse_one(self) -> list[bytes] | None:
        """The first command in `pending` ([] for an empty one), None when it is not complete."""
        buf, first = self.pending, self.start
        bounds = self.bounds
        if buf[first] != STAR:
            newline = buf.find(b"\n", first, first + MAX_INLINE + 1)
            if newline < 0:
                if len(buf) - first > MAX_INLINE:
                    raise ProtocolError("too big inline request")
                return None
            words = bytes(buf[first:newline]).split()
            self._consumed(newline + 1)
            if len(words) > bounds.max_args:
                raise bounds.count_error(len(words))
            return words
        line_end = buf.find(b"\r\n", first, first + HEADER_MAX)
        if line_end < 0:
            if len(buf) - first >= HEADER_MAX:
                raise bounds.count_error()
            return None
        count = _number(buf[first + 1 : line_end])
        if count is None or count > bounds.max_args:
            raise bounds.count_error(count)
        pos = line_end + 2
        args: list[bytes] = []
        for _ in range(max(count, 0)):
            if pos >= len(buf):
                return None
            if buf[pos] != DOLLAR:
                raise ProtocolError(f"expected '$', got '{chr(buf[pos])}'")
            line_end = buf.find(b"\r\n", pos, pos + HEADER_MAX)
            if line_end < 0:
                if len(buf) - pos >= HEADER_MAX:
                    raise bounds.bulk_error()
                return None
            length = _number(buf[pos + 1 : line_end])
            if length is None or length < 0 or length > bounds.max_bulk:
                raise bounds.bulk_error(length)
            start = line_end + 2
            if start + length + 2 > len(buf):
                return None
            args.append(bytes(buf[start : start + length]))
            pos = start + length + 2  # the CRLF after a value is skipped unread, as Redis does
        self._consumed(pos)
        return args

    def _consumed(self, upto: int) -> None:
        """The exact parser took `pending` up to `upto`: move past it, and let go
        of the bytes taken once they are many (not a copy a command)."""
        if upto >= len(self.pending):
            self.pending, self.start = bytearray(), 0
        elif upto > MAX_INLINE:
            del self.pending[:upto]
            self.start = 0
        else:
            self.start = upto


def _kind(value: object) -> str:
    """How a RESP value a client sent reads in an error (the type byte Redis would name)."""
    byte = {int: ":", list: "*", dict: "%", float: ",", bool: "#", type(None): "_"}.get(type(value))
    return f"'{byte}'" if byte else type(value).__name__
