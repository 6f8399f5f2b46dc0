"""A fuzzer for the Redis front's reader, over raw sockets to a real server
process: random bytes and frames that are almost right (lengths that lie,
are negative, huge or not numbers; frames cut short; inline commands;
nested arrays; RESP3 types a client has no business sending), before and
after AUTH.

After each frame the connection is half-closed, so the server answers what
it read and then hangs up (no wait on a clock). Then: a fresh connection is
still answered PING, the server's memory stays within a bound, and the
store is unchanged unless the frame held a write command an authenticated
client may send (tests/dumps.py compares the whole store).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.conftest import STORE_KINDS
from dumps import dump
from resp_client import RespProcess
from tidelog.server.limits import Limits
from tidelog.server.resp.framing import RequestReader

TOKEN = "fuzz"
RSS_BOUND_MB = 64  # what the server may grow by over the whole run
WRITES = (b"XADD", b"PUBLISH", b"XGROUP", b"DEL", b"XTRIM", b"XACK", b"XCLAIM", b"XAUTOCLAIM")
WRITES += (b"XREADGROUP", b"SUBSCRIBE")
WORDS = [b"PING", b"ECHO", b"XLEN", b"XRANGE", b"XREAD", b"HELLO", b"AUTH", b"CLIENT", b"SELECT"]
WORDS += [b"QUIT", b"ACK", b"TOPICS", b"INFO", b"COMMAND", *WRITES]
NUMBERS = [0, 1, 2, 3, 5, 10, 11, 999, 1000, 16384, 16385, 1 << 20, 1 << 26, 2**31, 2**63 - 1, 2**63]
NUMBERS += [2**64, 2_000_000_000, -1, -2, -(2**63)]
NOT_NUMBERS = [b"", b"x", b"1x", b" 5", b"+5", b"0x10", b"-", b"1e3", b"9" * 25]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    gen = STORE_KINDS[request.param](tmp_path)
    yield next(gen)
    gen.close()


def number() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(NUMBERS).map(lambda n: str(n).encode()),
        st.integers(-3, 40).map(lambda n: str(n).encode()),
        st.sampled_from(NOT_NUMBERS),
    )


def argument() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(WORDS),
        st.sampled_from([b"s", b"work", b"*", b"$", b"0", b">", b"g", b"c", b"f", b"v", TOKEN.encode()]),
        st.binary(max_size=40),
    )


def element() -> st.SearchStrategy[bytes]:
    """One element of an array: a bulk string, or something almost one."""
    return st.one_of(
        argument().map(lambda a: b"$%d\r\n%b\r\n" % (len(a), a)),  # right
        st.tuples(number(), st.binary(max_size=30)).map(lambda t: b"$" + t[0] + b"\r\n" + t[1] + b"\r\n"),
        st.tuples(st.sampled_from(b"*%~>|"), number()).map(lambda t: bytes([t[0]]) + t[1] + b"\r\n"),
        st.sampled_from(
            [b":12\r\n", b"+OK\r\n", b"-ERR x\r\n", b"_\r\n", b",1.5\r\n", b"#t\r\n", b"(123\r\n"]
        ),
        st.sampled_from([b"=5\r\ntxt:a\r\n", b"!3\r\nerr\r\n", b"$-1\r\n", b"*-1\r\n", b"*0\r\n"]),
        st.binary(max_size=12),
    )


def frame() -> st.SearchStrategy[bytes]:
    command = st.tuples(st.sampled_from(WORDS), st.lists(argument(), max_size=6)).map(
        lambda t: (
            b"*%d\r\n" % (1 + len(t[1])) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in (t[0], *t[1]))
        )
    )
    wrong_array = st.tuples(number(), st.lists(element(), max_size=6)).map(
        lambda t: b"*" + t[0] + b"\r\n" + b"".join(t[1])
    )
    any_type = st.tuples(st.sampled_from(b"*$%~>|:+-_,#(=!"), number(), st.binary(max_size=20)).map(
        lambda t: bytes([t[0]]) + t[1] + b"\r\n" + t[2]
    )
    inline = st.tuples(
        st.lists(argument(), min_size=0, max_size=8), st.sampled_from([b"\r\n", b"\n", b""])
    ).map(lambda t: b" ".join(t[0]) + t[1])
    write = st.sampled_from(
        [
            b"*3\r\n$7\r\nPUBLISH\r\n$4\r\nwork\r\n$3\r\njob\r\n",
            b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n",
        ]
    )
    one = st.one_of(command, wrong_array, any_type, inline, write, st.binary(max_size=200))
    pipelined = st.lists(one, min_size=1, max_size=4).map(b"".join)
    cut = st.tuples(pipelined, st.integers(0, 400)).map(lambda t: t[0][: t[1]])
    return st.one_of(pipelined, cut)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    commands=st.lists(
        st.lists(
            st.one_of(
                st.binary(max_size=20),
                st.sampled_from([b"*1000", b"$99999", b"\r\n*2000000000\r\n", b"%1000", b"*", b"$"]),
                st.integers(900, 3000).map(lambda n: b"v" * n),  # lengths of four digits: looked at first
            ),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 5000), max_size=20),
    authenticated=st.booleans(),
    auth_after=st.integers(1, 4),
)
def test_valid_commands_read_back_whatever_the_reads(commands, cuts, authenticated, auth_after):
    # The reader itself: well-formed commands, values that look like headers,
    # cut into reads anywhere (a header split in two included), come out whole
    # and in order, before AUTH (the exact parser) and after it (hiredis, fed
    # up to each header it must not see unchecked), and across AUTH, which
    # hands the exact parser's read-ahead to hiredis.
    data = b"".join(
        b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in c) for c in commands
    )
    if not authenticated:  # Redis 7's unauthenticated bounds
        commands = [c[:10] for c in commands]
        data = b"".join(
            b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a[:16384]) for a in c)
            for c in commands
        )
    reader = RequestReader(Limits(), authenticated)
    got = []
    pos = 0
    for cut in [*cuts, len(data)]:
        if pos >= len(data):
            break
        reader.take(data[pos : pos + cut])
        pos += cut
        while (command := reader.next_command()) is not None:
            got.append(command)
            if len(got) == auth_after:
                reader.authenticate()
    assert got == commands


def exchange(server: RespProcess, data: bytes, authenticate: bool) -> bytes:
    """Send `data` (after AUTH when told), half-close, and read all the server says until it hangs up."""
    client = server.raw(authenticate)
    sock = client.sock
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the server already refused and closed: what it said is read below
    try:
        return client.rest()
    finally:
        client.close()


def test_the_reader_survives_what_clients_send(url, tried):
    server = RespProcess(url, TOKEN)
    base = server.rss_mb()
    counts = {"cases": 0, "refused": 0, "wrote": 0}
    state = {"before": dump(url)}

    @settings(
        max_examples=60 if url.startswith("postgresql") else 120,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=frame(), authenticate=st.booleans())
    def check(data: bytes, authenticate: bool) -> None:
        said = exchange(server, data, authenticate)
        counts["cases"] += 1
        counts["refused"] += b"-ERR Protocol error" in said
        assert server.ping()  # a fresh connection is answered
        assert server.rss_mb() < base + RSS_BOUND_MB
        after = dump(url)
        if after != state["before"]:
            # Only an authenticated client's write command may change the store.
            assert authenticate and any(word in data.upper() for word in WRITES), (data, said)
            counts["wrote"] += 1
            state["before"] = after

    try:
        check()
    finally:
        server.close()
    tried(**counts)
