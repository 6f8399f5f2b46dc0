"""The commands of the Redis protocol front: each a thin translation of the
core API (`tidelog.streams.Streams`, `tidelog.Log`, queue groups).

A handler takes the connection and the arguments after the command name and
returns a reply value (see resp_codec.encode) or ready bytes. Store calls
run in threads (`conn.server.run`); XADD and PUBLISH go to the server's one
writer task, which commits concurrent ones together.
"""

from __future__ import annotations

import hmac
import re
import time
from typing import Any

from ... import __version__
from ...errors import InvalidStreamId, UnknownGroup, UnknownTopic
from ...streams import MAX_ID, ZERO, Add, Entry, StreamId, parse_id
from ..throttle import retry_message
from .codec import (
    NOT_INTEGER,
    NULL_ARRAY,
    SYNTAX,
    RespError,
    Simple,
    Verbatim,
    arity_error,
    text,
)
from .server import NO_REPLY, Commands, Connection
from .subscribe import subscribe

OK = Simple("OK")
PONG = Simple("PONG")
REDIS_VERSION = "7.0.0"  # the protocol level we speak, for clients that look
# A read of at most this many entries runs where the command does when the
# store's reads wait for nothing (server.read); a larger one goes to a thread.
SMALL_READ = 100
SMALL_STREAMS = 16  # XREAD finds where to start in this many streams where it runs, more in a thread


# argument helpers ------------------------------------------------------------


# Every integer argument is a 64-bit signed number, as Redis reads it, and
# each command narrows it further to what the store can hold (a delivery
# count is 32 bits on PostgreSQL, XAUTOCLAIM's COUNT stays below Redis's own
# LONG_MAX / 10): a value out of range is refused here with Redis's words,
# never handed to the store to overflow there.
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
I32_MAX = (1 << 31) - 1


# Redis's string2ll: no sign but minus, no leading zero, no space, no underscore (int() takes those).
DECIMAL = re.compile(rb"-?(?:0|[1-9][0-9]{0,19})")


def integer(raw: bytes, minimum: int = 0, error: str = NOT_INTEGER, maximum: int = I64_MAX) -> int:
    """`raw` as a decimal integer in [minimum, maximum], else RespError(error)."""
    if DECIMAL.fullmatch(raw) is None:
        raise RespError(error)
    n = int(raw)
    if not minimum <= n <= maximum:
        raise RespError(error)
    return n


def stream_id(raw: bytes, missing_seq: int = 0) -> StreamId:
    try:
        return parse_id(raw, missing_seq)
    except InvalidStreamId:
        raise RespError("ERR Invalid stream ID specified as stream command argument") from None


def range_start(raw: bytes) -> StreamId:
    if raw == b"-":
        return ZERO
    if raw == b"+":
        return MAX_ID
    if raw.startswith(b"("):
        sid = stream_id(raw[1:], 0)
        if sid == MAX_ID:
            raise RespError("ERR invalid start ID for the interval")
        return sid.next()
    return stream_id(raw, 0)


def range_end(raw: bytes) -> StreamId:
    if raw == b"+":
        return MAX_ID
    if raw == b"-":
        return ZERO
    if raw.startswith(b"("):
        sid = stream_id(raw[1:], (1 << 64) - 1)
        if sid == ZERO:
            raise RespError("ERR invalid end ID for the interval")
        return sid.prev()
    return stream_id(raw, (1 << 64) - 1)


def entry_reply(e: Entry) -> list:
    flat: list[bytes] = []
    for name, value in e.fields:
        flat.append(name)
        flat.append(value)
    return [str(e.id), flat]


def nogroup(key: str, group: str, where: str = "") -> RespError:
    return RespError(f"NOGROUP No such key '{key}' or consumer group '{group}'{where}")


def nogroup_for_key(key: str, group: str) -> RespError:
    return RespError(f"NOGROUP No such consumer group '{group}' for key name '{key}'")


# connection ------------------------------------------------------------------


async def cmd_ping(conn: Connection, args: list[bytes]) -> Any:
    if len(args) > 1:
        raise arity_error("ping")
    return args[0] if args else PONG


async def cmd_echo(conn: Connection, args: list[bytes]) -> Any:
    return args[0]


async def cmd_quit(conn: Connection, args: list[bytes]) -> Any:
    conn.closing = True
    return OK


async def cmd_select(conn: Connection, args: list[bytes]) -> Any:
    if integer(args[0], minimum=I64_MIN) != 0:
        raise RespError("ERR DB index is out of range")
    return OK


def _check_password(conn: Connection, password: bytes, user: bytes = b"default") -> None:
    token = conn.server.token
    if token is None:
        raise RespError(
            "ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    throttle = conn.server.throttle
    wait = throttle.wait(conn.host, "resp")
    if wait:  # refused unread, the right password too: see server/throttle.py
        raise RespError(f"ERR {retry_message(wait)}")
    if not hmac.compare_digest(password, token.encode()) or user != b"default":
        throttle.failed(conn.host, "resp")
        raise RespError("WRONGPASS invalid username-password pair or user is disabled.")
    throttle.passed(conn.host)
    conn.authenticated = True


async def cmd_auth(conn: Connection, args: list[bytes]) -> Any:
    if len(args) > 2:
        raise SYNTAX_ERROR
    _check_password(conn, args[-1], args[0] if len(args) == 2 else b"default")
    return OK


SYNTAX_ERROR = RespError(SYNTAX)


async def cmd_hello(conn: Connection, args: list[bytes]) -> Any:
    proto = conn.proto
    i = 0
    if args:
        try:
            proto = int(args[0])
        except ValueError:
            raise RespError("ERR Protocol version is not an integer or out of range") from None
        if proto not in (2, 3):
            raise RespError("NOPROTO unsupported protocol version")
        i = 1
    while i < len(args):
        option = args[i].upper()
        if option == b"AUTH" and i + 2 < len(args):
            _check_password(conn, args[i + 2], args[i + 1])
            i += 3
        elif option == b"SETNAME" and i + 1 < len(args):
            conn.name = text(args[i + 1])
            i += 2
        else:
            raise RespError(f"ERR Syntax error in HELLO option '{text(args[i])}'")
    if conn.server.token is not None and not conn.authenticated:
        raise RespError(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
        )
    conn.proto = proto
    return {
        "server": "redis",
        "version": REDIS_VERSION,
        "proto": proto,
        "id": conn.id,
        "mode": "standalone",
        "role": "master",
        "modules": [],
    }


async def cmd_client(conn: Connection, args: list[bytes]) -> Any:
    sub = args[0].upper()
    if sub == b"SETNAME" and len(args) == 2:
        if b" " in args[1]:
            raise RespError("ERR Client names cannot contain spaces, newlines or special characters.")
        conn.name = text(args[1])
        return OK
    if sub == b"GETNAME" and len(args) == 1:
        return conn.name
    if sub == b"ID" and len(args) == 1:
        return conn.id
    if sub == b"SETINFO" and len(args) == 3:
        attr = args[1].upper()
        if attr not in (b"LIB-NAME", b"LIB-VER"):
            raise RespError(f"ERR Unrecognized option '{text(args[1])}'")
        conn.lib[text(attr).lower()] = text(args[2])
        return OK
    if sub in (b"SETNAME", b"GETNAME", b"ID", b"SETINFO"):
        raise RespError(f"ERR wrong number of arguments for 'client|{text(sub).lower()}' command")
    raise RespError(f"ERR unknown subcommand '{text(args[0])}'. Try CLIENT HELP.")


async def cmd_command(conn: Connection, args: list[bytes]) -> Any:
    names = sorted(COMMANDS)
    if not args:
        return [_command_info(n) for n in names]
    sub = args[0].upper()
    if sub == b"COUNT":
        return len(names)
    if sub == b"INFO":
        return [_command_info(text(a).lower()) if text(a).lower() in COMMANDS else None for a in args[1:]]
    if sub == b"DOCS":
        wanted = [text(a).lower() for a in args[1:]] or names
        return {
            n: {"summary": SUMMARIES.get(n, ""), "since": "7.0.0", "group": "stream"}
            for n in wanted
            if n in COMMANDS
        }
    if sub == b"LIST":
        return names
    raise RespError(f"ERR unknown subcommand '{text(args[0])}'. Try COMMAND HELP.")


def _command_info(name: str) -> list:
    _, arity, first_key = COMMANDS[name]
    return [name, arity, [Simple("fast")], first_key, first_key, 1 if first_key else 0]


async def cmd_info(conn: Connection, args: list[bytes]) -> Any:
    topics = await conn.server.run(conn.server.log.topics)
    lines = [
        "# Server",
        f"redis_version:{REDIS_VERSION}",
        f"tidelog_version:{__version__}",
        "redis_mode:standalone",
        f"tcp_port:{conn.server.port}",
        f"uptime_in_seconds:{int(time.monotonic() - conn.server.started)}",
        "",
        "# Clients",
        f"connected_clients:{len(conn.server.connections)}",
        f"blocked_clients:{conn.server.blocked}",
        f"maxclients:{conn.server.limits.max_connections}",
        "",
        "# Stats",
        f"rejected_connections:{conn.server.refused}",
        "",
        "# Keyspace",
    ]
    if topics:
        streams = sum(1 for t in topics if t.partitions == 1)
        lines.append(f"db0:keys={len(topics)},expires=0,avg_ttl=0,streams={streams}")
    return Verbatim("\r\n".join(lines) + "\r\n")


# streams ---------------------------------------------------------------------


async def cmd_xadd(conn: Connection, args: list[bytes]) -> Any:
    key = text(args[0])
    i = 1
    nomkstream = False
    maxlen = minid = None
    while i < len(args):
        option = args[i].upper()
        if option == b"NOMKSTREAM":
            nomkstream = True
            i += 1
        elif option in (b"MAXLEN", b"MINID") and i + 1 < len(args):
            i += 1
            if args[i] in (b"=", b"~"):
                i += 1
            if i >= len(args):
                raise SYNTAX_ERROR
            if option == b"MAXLEN":
                maxlen = _maxlen(args[i])
            else:
                minid = stream_id(args[i])
            i += 1
            if i + 1 < len(args) and args[i].upper() == b"LIMIT":
                _limit(args[i + 1])  # an approximation hint: we trim exactly
                i += 2
        else:
            break
    if i >= len(args):
        raise arity_error("xadd")
    raw_id = args[i]
    pairs = args[i + 1 :]
    if not pairs or len(pairs) % 2:
        raise arity_error("xadd")
    sid: tuple[int, int | None] | None
    if raw_id == b"*":
        sid = None
    elif raw_id.endswith(b"-*"):
        sid = (stream_id(raw_id[:-2]).ms, None)
    else:
        parsed = stream_id(raw_id)
        sid = (parsed.ms, parsed.seq)
    fields = list(zip(pairs[::2], pairs[1::2]))
    return conn.server.writer.submit(Add(key, fields, sid, nomkstream, maxlen, minid), _xadd_reply)


def _maxlen(raw: bytes) -> int:
    if integer(raw, minimum=I64_MIN) < 0:
        raise RespError("ERR The MAXLEN argument must be >= 0.")
    return integer(raw)


def _limit(raw: bytes) -> int:
    if integer(raw, minimum=I64_MIN) < 0:
        raise RespError("ERR The LIMIT argument must be >= 0.")
    return integer(raw)


def _xadd_reply(result: Any) -> Any:
    if isinstance(result, Exception):
        raise result
    return None if result is None else str(result)


async def cmd_xlen(conn: Connection, args: list[bytes]) -> Any:
    return await conn.server.read(conn.server.streams.length, text(args[0]))


async def _range(conn: Connection, args: list[bytes], reverse: bool) -> Any:
    key = text(args[0])
    if reverse:
        end, start = range_end(args[1]), range_start(args[2])
    else:
        start, end = range_start(args[1]), range_end(args[2])
    count = None
    if len(args) == 5 and args[3].upper() == b"COUNT":
        count = integer(args[4], minimum=I64_MIN)
        if count < 0:
            count = 0
    elif len(args) != 3:
        raise SYNTAX_ERROR
    run = conn.server.read if count is not None and count <= SMALL_READ else conn.server.run
    entries = await run(conn.server.streams.range, key, start, end, count, reverse)
    return [entry_reply(e) for e in entries]


async def cmd_xrange(conn: Connection, args: list[bytes]) -> Any:
    return await _range(conn, args, False)


async def cmd_xrevrange(conn: Connection, args: list[bytes]) -> Any:
    return await _range(conn, args, True)


def _read_options(
    args: list[bytes], group: bool
) -> tuple[int | None, int | None, bool, list[bytes], list[bytes]]:
    count = block = None
    noack = False
    i = 0
    while i < len(args):
        option = args[i].upper()
        if option == b"COUNT" and i + 1 < len(args):
            count = integer(args[i + 1], minimum=I64_MIN)
            count = None if count <= 0 else count
            i += 2
        elif option == b"BLOCK" and i + 1 < len(args):
            block = integer(
                args[i + 1], minimum=I64_MIN, error="ERR timeout is not an integer or out of range"
            )
            if block < 0:
                raise RespError("ERR timeout is negative")
            if block > I64_MAX - int(time.time() * 1000):
                raise RespError("ERR timeout is out of range")  # Redis: the deadline must fit 64 bits
            i += 2
        elif option == b"NOACK" and group:
            noack = True
            i += 1
        elif option == b"STREAMS":
            rest = args[i + 1 :]
            if not rest or len(rest) % 2:
                raise RespError(
                    "ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' must be specified."
                    if group
                    else "ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must be specified."
                )
            half = len(rest) // 2
            return count, block, noack, rest[:half], rest[half:]
        else:
            raise SYNTAX_ERROR
    raise SYNTAX_ERROR


def _streams_reply(conn: Connection, found: list[tuple[str, list[Entry]]]) -> Any:
    if not found:
        return NULL_ARRAY
    if conn.proto == 3:
        return {key: [entry_reply(e) for e in entries] for key, entries in found}
    return [[key, [entry_reply(e) for e in entries]] for key, entries in found]


async def cmd_xread(conn: Connection, args: list[bytes]) -> Any:
    count, block, _, keys, ids = _read_options(args, group=False)
    streams = conn.server.streams
    names = [text(k) for k in keys]
    parsed = [None if raw == b"$" else stream_id(raw) for raw in ids]

    def positions() -> list[int]:
        return [
            streams.last_offset(name) if sid is None else streams.offset_after(name, sid)
            for name, sid in zip(names, parsed)
        ]

    after = await (conn.server.read if len(names) <= SMALL_STREAMS else conn.server.run)(positions)

    def read() -> list[tuple[str, list[Entry]]]:
        found = []
        for name, offset in zip(names, after):
            entries = streams.read_after(name, offset, count)
            if entries:
                found.append((name, entries))
        return found

    small = count is not None and count * len(names) <= SMALL_READ
    found = await conn.wait_for(names, read, block, small)
    return _streams_reply(conn, found)


async def cmd_xreadgroup(conn: Connection, args: list[bytes]) -> Any:
    if len(args) < 6 or args[0].upper() != b"GROUP":
        raise SYNTAX_ERROR if len(args) >= 6 else arity_error("xreadgroup")
    group, consumer = text(args[1]), text(args[2])
    count, block, noack, keys, ids = _read_options(args[3:], group=True)
    streams = conn.server.streams
    names = [text(k) for k in keys]
    for raw in ids:
        if raw == b"$":
            raise RespError(
                "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history "
                "of this consumer by specifying a proper ID, or use the > ID to get new messages. "
                "The $ ID would just return an empty result set."
            )
    parsed = [None if raw == b">" else stream_id(raw) for raw in ids]

    def read() -> list[tuple[str, list[Entry]]]:
        found = []
        for name, sid in zip(names, parsed):
            try:
                if sid is None:
                    entries = streams.read_group(name, group, consumer, count, noack)
                else:
                    entries = streams.read_history(name, group, consumer, sid, count)
                    found.append((name, entries))  # history replies list every stream
                    continue
            except UnknownGroup:
                raise nogroup(name, group, " in XREADGROUP with GROUP option") from None
            if entries:
                found.append((name, entries))
        return found

    history = any(sid is not None for sid in parsed)
    found = await conn.wait_for(names, read, None if history else block)
    return _streams_reply(conn, found)


async def cmd_xack(conn: Connection, args: list[bytes]) -> Any:
    key, group = text(args[0]), text(args[1])
    ids = [stream_id(raw) for raw in args[2:]]
    try:
        return await conn.server.run(conn.server.streams.ack, key, group, ids)
    except UnknownGroup:
        return 0  # Redis: acking in a group that does not exist acks nothing


async def cmd_xpending(conn: Connection, args: list[bytes]) -> Any:
    key, group = text(args[0]), text(args[1])
    streams = conn.server.streams
    try:
        if len(args) == 2:
            count, first, last, per = await conn.server.run(streams.pending_summary, key, group)
            return [
                count,
                None if first is None else str(first),
                None if last is None else str(last),
                None if not per else [[c or "", str(n)] for c, n in per],
            ]
        rest = args[2:]
        min_idle = 0
        if rest[0].upper() == b"IDLE":
            if len(rest) < 2:
                raise SYNTAX_ERROR
            min_idle = integer(rest[1])
            rest = rest[2:]
        if len(rest) not in (3, 4):
            raise SYNTAX_ERROR
        start, end = range_start(rest[0]), range_end(rest[1])
        count = integer(rest[2], minimum=I64_MIN)
        consumer = text(rest[3]) if len(rest) == 4 else None
        rows = await conn.server.run(streams.pending, key, group, start, end, count, consumer, min_idle)
        return [[str(sid), c, idle, n] for sid, c, idle, n in rows]
    except UnknownGroup:
        raise nogroup(key, group) from None


async def cmd_xclaim(conn: Connection, args: list[bytes]) -> Any:
    key, group, consumer = text(args[0]), text(args[1]), text(args[2])
    min_idle = integer(args[3], error="ERR Invalid min-idle-time argument for XCLAIM")
    ids: list[StreamId] = []
    i = 4
    while i < len(args):
        try:
            ids.append(parse_id(args[i]))
            i += 1
        except InvalidStreamId:
            break
    options: dict[str, Any] = {}
    while i < len(args):
        option = args[i].upper()
        if option in (b"IDLE", b"TIME", b"RETRYCOUNT") and i + 1 < len(args):
            name = {b"IDLE": "idle_ms", b"TIME": "time_ms", b"RETRYCOUNT": "retrycount"}[option]
            options[name] = integer(
                args[i + 1],
                error=f"ERR Invalid {text(option).upper()} option argument for XCLAIM",
                # a delivery count is a 32-bit integer in the PostgreSQL store
                maximum=I32_MAX if option == b"RETRYCOUNT" else I64_MAX,
            )
            i += 2
        elif option in (b"FORCE", b"JUSTID"):
            options[text(option).lower()] = True
            i += 1
        elif option == b"LASTID" and i + 1 < len(args):
            stream_id(args[i + 1])
            i += 2
        else:
            raise RespError(f"ERR Unrecognized XCLAIM option '{text(args[i])}'")
    if not ids:
        raise arity_error("xclaim")
    try:
        got = await conn.server.run(
            lambda: conn.server.streams.claim(key, group, consumer, min_idle, ids, **options)
        )
    except UnknownGroup:
        raise nogroup(key, group) from None
    if options.get("justid"):
        return [str(sid) for sid in got]
    return [entry_reply(e) for e in got]


async def cmd_xautoclaim(conn: Connection, args: list[bytes]) -> Any:
    key, group, consumer = text(args[0]), text(args[1]), text(args[2])
    min_idle = integer(args[3], error="ERR Invalid min-idle-time argument for XAUTOCLAIM")
    start = range_start(args[4])
    count, justid = 100, False
    i = 5
    while i < len(args):
        option = args[i].upper()
        if option == b"COUNT" and i + 1 < len(args):
            # Redis's bound (LONG_MAX / its attempts factor): count + 1 rows are asked of the store.
            count = integer(args[i + 1], minimum=1, error="ERR COUNT must be > 0", maximum=I64_MAX // 10)
            i += 2
        elif option == b"JUSTID":
            justid = True
            i += 1
        else:
            raise SYNTAX_ERROR
    try:
        following, got = await conn.server.run(
            conn.server.streams.autoclaim, key, group, consumer, min_idle, start, count, justid
        )
    except UnknownGroup:
        raise nogroup(key, group) from None
    claimed = [str(sid) for sid in got] if justid else [entry_reply(e) for e in got]
    return [str(following), claimed, []]


async def cmd_xgroup(conn: Connection, args: list[bytes]) -> Any:
    sub = args[0].upper()
    streams = conn.server.streams
    run = conn.server.run
    arity = {
        b"CREATE": (4, 7),
        b"SETID": (4, 6),
        b"DESTROY": (3, 3),
        b"CREATECONSUMER": (4, 4),
        b"DELCONSUMER": (4, 4),
    }
    if sub not in arity:
        if sub == b"HELP":
            return [
                "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are: CREATE SETID DESTROY CREATECONSUMER DELCONSUMER"
            ]
        raise RespError(f"ERR unknown subcommand '{text(args[0])}'. Try XGROUP HELP.")
    low, high = arity[sub]
    if not low <= len(args) <= high:
        raise RespError(f"ERR wrong number of arguments for 'xgroup|{text(sub).lower()}' command")
    key, group = text(args[1]), text(args[2])
    if sub in (b"CREATE", b"SETID"):
        sid = None if args[3] == b"$" else stream_id(args[3])
        mkstream = False
        options = iter(args[4:])
        for option in options:
            if option.upper() == b"MKSTREAM" and sub == b"CREATE":
                mkstream = True
            elif option.upper() == b"ENTRIESREAD":
                # Accepted and checked as Redis checks it; the group's cursor says how far it read.
                if integer(next(options, b""), minimum=I64_MIN) < -1:
                    raise RespError("ERR value for ENTRIESREAD must be positive or -1")
            else:
                raise SYNTAX_ERROR
        if sub == b"CREATE":
            try:
                await run(streams.create_group, key, group, sid, mkstream)
            except UnknownTopic:
                raise RespError(
                    "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "
                    "to use the MKSTREAM option to create an empty stream automatically."
                ) from None
            return OK
        try:
            await run(streams.set_group_id, key, group, sid)
        except UnknownGroup:
            raise nogroup_for_key(key, group) from None
        return OK
    if sub == b"DESTROY":
        return int(await run(streams.destroy_group, key, group))
    consumer = text(args[3])
    try:
        if sub == b"CREATECONSUMER":
            return int(await run(streams.create_consumer, key, group, consumer))
        return await run(streams.delete_consumer, key, group, consumer)
    except UnknownGroup:
        raise nogroup_for_key(key, group) from None


async def cmd_xinfo(conn: Connection, args: list[bytes]) -> Any:
    sub = args[0].upper()
    streams = conn.server.streams
    if sub == b"HELP":
        return ["XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are: CONSUMERS GROUPS STREAM"]
    if sub not in (b"STREAM", b"GROUPS", b"CONSUMERS"):
        raise RespError(f"ERR unknown subcommand '{text(args[0])}'. Try XINFO HELP.")
    want = 3 if sub == b"CONSUMERS" else 2
    if len(args) != want:
        raise RespError(f"ERR wrong number of arguments for 'xinfo|{text(sub).lower()}' command")
    key = text(args[1])
    try:
        if sub == b"STREAM":
            info = await conn.server.run(streams.info, key)
            first, last = info["first-entry"], info["last-entry"]
            return {
                "length": info["length"],
                "radix-tree-keys": 1,
                "radix-tree-nodes": 2,
                "last-generated-id": str(info["last-generated-id"]),
                "max-deleted-entry-id": "0-0",
                "entries-added": info["entries-added"],
                "recorded-first-entry-id": str(info["recorded-first-entry-id"]),
                "groups": info["groups"],
                "first-entry": None if first is None else entry_reply(first),
                "last-entry": None if last is None else entry_reply(last),
            }
        if sub == b"GROUPS":
            groups = await conn.server.run(streams.groups, key)
            return [{**g, "last-delivered-id": str(g["last-delivered-id"])} for g in groups]
        group = text(args[2])
        try:
            consumers = await conn.server.run(streams.consumers, key, group)
        except UnknownGroup:
            raise nogroup_for_key(key, group) from None
        now = conn.server.log.clock()
        return [
            {
                "name": c.name,
                "pending": c.pending,
                "idle": max(0, now - c.seen),
                "inactive": -1 if c.active is None else max(0, now - c.active),
            }
            for c in consumers
        ]
    except UnknownTopic:
        raise RespError("ERR no such key") from None


async def cmd_xtrim(conn: Connection, args: list[bytes]) -> Any:
    key = text(args[0])
    strategy = args[1].upper()
    rest = args[2:]
    if rest and rest[0] in (b"=", b"~"):
        rest = rest[1:]
    if strategy not in (b"MAXLEN", b"MINID") or not rest or len(rest) not in (1, 3):
        raise SYNTAX_ERROR
    if len(rest) == 3:
        if rest[1].upper() != b"LIMIT":
            raise SYNTAX_ERROR
        _limit(rest[2])
    if strategy == b"MAXLEN":
        maxlen = _maxlen(rest[0])
        return await conn.server.run(lambda: conn.server.streams.trim(key, maxlen=maxlen))
    minid = stream_id(rest[0])
    return await conn.server.run(lambda: conn.server.streams.trim(key, minid=minid))


async def cmd_del(conn: Connection, args: list[bytes]) -> Any:
    streams = conn.server.streams

    def delete() -> int:
        return sum(1 for raw in args if streams.delete(text(raw)))

    return await conn.server.run(delete)


async def cmd_exists(conn: Connection, args: list[bytes]) -> Any:
    log = conn.server.log

    def count() -> int:
        return sum(1 for raw in args if log.store.topic(text(raw)) is not None)

    return await conn.server.read(count)


async def cmd_type(conn: Connection, args: list[bytes]) -> Any:
    info = await conn.server.read(conn.server.log.store.topic, text(args[0]))
    if info is None:
        return Simple("none")
    return Simple("stream" if info.partitions == 1 else "tidelog-topic")


# the single-binary queue command set -----------------------------------------


async def cmd_publish(conn: Connection, args: list[bytes]) -> Any:
    return conn.server.writer.submit_publish(text(args[0]), args[1], _publish_reply)


def _publish_reply(result: Any) -> Any:
    if isinstance(result, Exception):
        raise result
    return OK


async def cmd_topics(conn: Connection, args: list[bytes]) -> Any:
    topics = await conn.server.run(conn.server.log.topics)
    return [t.name for t in topics]


async def cmd_subscribe(conn: Connection, args: list[bytes]) -> Any:
    await subscribe(conn, text(args[0]))
    return NO_REPLY


async def cmd_settle_outside(conn: Connection, args: list[bytes]) -> Any:
    raise RespError(
        "ERR no message to settle: ACK, NACK, BACK, DACK and EXTEND answer a message pushed after SUBSCRIBE"
    )


# name -> (handler, arity as Redis counts it: the name included, negative = at least, first key)
COMMANDS: Commands = {
    "ping": (cmd_ping, -1, 0),
    "echo": (cmd_echo, 2, 0),
    "quit": (cmd_quit, -1, 0),
    "select": (cmd_select, 2, 0),
    "auth": (cmd_auth, -2, 0),
    "hello": (cmd_hello, -1, 0),
    "client": (cmd_client, -2, 0),
    "command": (cmd_command, -1, 0),
    "info": (cmd_info, -1, 0),
    "xadd": (cmd_xadd, -5, 1),
    "xlen": (cmd_xlen, 2, 1),
    "xrange": (cmd_xrange, -4, 1),
    "xrevrange": (cmd_xrevrange, -4, 1),
    "xread": (cmd_xread, -4, 0),
    "xreadgroup": (cmd_xreadgroup, -7, 0),
    "xack": (cmd_xack, -4, 1),
    "xpending": (cmd_xpending, -3, 1),
    "xclaim": (cmd_xclaim, -6, 1),
    "xautoclaim": (cmd_xautoclaim, -6, 1),
    "xgroup": (cmd_xgroup, -2, 2),
    "xinfo": (cmd_xinfo, -2, 2),
    "xtrim": (cmd_xtrim, -4, 1),
    "del": (cmd_del, -2, 1),
    "exists": (cmd_exists, -2, 1),
    "type": (cmd_type, 2, 1),
    "publish": (cmd_publish, 3, 1),
    "topics": (cmd_topics, 1, 0),
    "subscribe": (cmd_subscribe, 2, 1),
    "ack": (cmd_settle_outside, 1, 0),
    "nack": (cmd_settle_outside, 1, 0),
    "back": (cmd_settle_outside, 1, 0),
    "dack": (cmd_settle_outside, -1, 0),
    "extend": (cmd_settle_outside, 1, 0),
}

# One line a command: COMMAND DOCS answers it, and the docs' command table is generated from it.
SUMMARIES = {
    "ping": "Replies PONG, or echoes its argument.",
    "echo": "Replies with its argument.",
    "quit": "Closes the connection (releasing a held SUBSCRIBE message).",
    "select": "Accepts database 0 only.",
    "auth": "Authenticates with the server's token.",
    "hello": "Switches to RESP2 or RESP3, optionally with AUTH and SETNAME.",
    "client": "CLIENT SETNAME, GETNAME, SETINFO and ID.",
    "command": "Describes the commands: COMMAND, COUNT, INFO, DOCS, LIST.",
    "info": "Server, clients and keyspace sections.",
    "xadd": "Appends an entry to a stream (a durable tidelog topic).",
    "xlen": "The number of entries in a stream.",
    "xrange": "Entries between two ids, oldest first (COUNT, exclusive `(id`).",
    "xrevrange": "Entries between two ids, newest first.",
    "xread": "Entries after an id from one or more streams (COUNT, BLOCK woken by the append, `$`).",
    "xreadgroup": "Delivers entries to a consumer of a group (COUNT, BLOCK, NOACK, `>` or an id).",
    "xack": "Acknowledges a group's pending entries.",
    "xpending": "A group's pending entries: summary, or extended with IDLE and a consumer.",
    "xclaim": "Moves pending entries to another consumer (IDLE, TIME, RETRYCOUNT, FORCE, JUSTID).",
    "xautoclaim": "Moves pending entries idle longer than a time to another consumer (COUNT, JUSTID).",
    "xgroup": "Consumer groups: CREATE (MKSTREAM), SETID, DESTROY, CREATECONSUMER, DELCONSUMER.",
    "xinfo": "STREAM, GROUPS and CONSUMERS of a stream.",
    "xtrim": "Removes the oldest entries (MAXLEN or MINID, exactly), with their pending entries.",
    "del": "Deletes streams (topics).",
    "exists": "Counts the keys that exist.",
    "type": "`stream` for a one-partition topic, `tidelog-topic` for a larger one, `none` for a missing key.",
    "publish": "Appends a record to a topic; replies OK once committed.",
    "topics": "Lists the topics.",
    "subscribe": "Turns the connection into a one-message-at-a-time consumer of a topic's queue group "
    "(miniqueue's frames: the value as a bulk string; Redis's pub/sub frames on RESP3).",
    "ack": "After SUBSCRIBE: the pushed message is done.",
    "nack": "After SUBSCRIBE: deliver the pushed message again, at the front.",
    "back": "After SUBSCRIBE: deliver the pushed message again, behind those waiting now.",
    "dack": "After SUBSCRIBE: deliver the pushed message again after the given seconds (1 when none).",
    "extend": "After SUBSCRIBE: keep the pushed message (its lease, and max_hold, start again).",
}
