"""Every route with bad input: a clear 4xx, and a refused request writes nothing.

A sweep over the HTTP API (/v1, /api, /publish, the console and its live
figures): each integer in a path, query or body gets values out of range
(negative, 2^63, 10^30, not a number), each free text in a query gets an
undecodable byte (`%ff`), each queue number a value past its bound. Every
answer must be below 500; every refused one (and every GET) must leave the
store's dump (tests/dumps.py) as it was. Runs on SQLite and PostgreSQL; the
counts reach the run's summary through the `tried` fixture.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import httpx
import pytest

import tidelog
from dumps import dump
from pgschema import postgres_schema
from tidelog.server.http import receipts
from tidelog.server.http.thread import ServerThread

BIG = [2**63, 10**30, 2**64 + 1]
BAD_INTS: list[Any] = [-1, *BIG, "x", 1.5, True]
# Not numbers as a client writes them (spaces, a plus, other scripts' digits) are refused too.
MALFORMED = ["x", "1.5", "1e3", " 7", "+1", "٣", "0x10"]
BAD_QUERY_INTS = ["-1", str(2**63), str(10**30), *MALFORMED]
# A how-many parameter above its maximum is held to it (test_http_limits.py): only these are refused.
BAD_COUNTS = ["0", "-1", *MALFORMED]
BAD_WAITS = ["-1", "31", "1e300", "inf", "nan", str(2**63), "x", " 7", "+1", "٣"]
COUNTS = {"limit", "max", "batch"}
BAD_SECONDS: list[Any] = [-1, 1e300, 1e16, 2**63, 10**30, "x", True]
BAD_QUERY_SECONDS = ["-1", "1e300", "1e16", str(2**63), "inf", "nan", "x"]


class Case(NamedTuple):
    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    data: dict[str, Any] | None = None
    expect: tuple[int, ...] = (400, 404, 409, 413)


def _with(base: dict[str, Any] | None, name: str, value: Any) -> dict[str, Any]:
    out = dict(base or {})
    out[name] = value
    return out


def _body_ints(method: str, path: str, body: dict[str, Any], names: list[str], params=None) -> Iterator[Case]:
    for name in names:
        for bad in BAD_INTS:
            yield Case(method, path, params, _with(body, name, bad))


def _query_ints(method: str, path: str, names: list[str], base=None, body=None) -> Iterator[Case]:
    for name in names:
        bads = BAD_COUNTS if name in COUNTS else BAD_WAITS if name == "wait" else BAD_QUERY_INTS
        for bad in bads:
            yield Case(method, path, _with(base, name, bad), body)
        if name in COUNTS:
            yield Case(method, path, _with(base, name, str(10**30)), body, expect=(200, 201))


def _path_ints(method: str, template: str, body=None, params=None) -> Iterator[Case]:
    for bad in ["-1", str(2**63), str(10**30), "x", "٣"]:
        yield Case(method, template.format(bad), params, body)


def cases(receipt: str, stale: str) -> Iterator[Case]:
    """Bad requests on every route; `receipt` is a live lease's token, `stale` an earlier one's."""
    # topics
    yield from _body_ints("POST", "/v1/topics", {"name": "new"}, ["partitions"])
    for setting in ["retention_ms", "retention_bytes", "max_message_bytes", "dedup_window_ms"]:
        for bad in [-1, *BIG, "forever", True]:
            yield Case("POST", "/v1/topics", None, {"name": "new", "config": {setting: bad}})
            yield Case("PATCH", "/v1/topics/t", None, {"config": {setting: bad}})
    yield from _body_ints("POST", "/v1/topics/t/partitions", {}, ["partitions"])
    yield Case("POST", "/v1/topics/t/partitions", None, {"partitions": 1})  # fewer than it has
    # produce
    one = {"records": [{"value": 1}]}
    yield from _body_ints("POST", "/v1/topics/t/records", one, ["partition", "timestamp"])
    for bad in BAD_INTS:
        yield Case("POST", "/v1/topics/t/records", None, {"records": [{"value": 1, "partition": bad}]})
        yield Case("POST", "/v1/topics/missing/records", None, {"records": [{"value": 1, "partition": bad}]})
    batch = {"topic": "t", "records": [{"value": 1}]}
    for name in ["partition", "timestamp"]:
        for bad in BAD_INTS:
            yield Case("POST", "/v1/records", None, {"batches": [_with(batch, name, bad)]})
            yield Case("POST", "/v1/records", None, {"batches": [_with({**batch, "topic": "nt"}, name, bad)]})
    yield from _body_ints("POST", "/v1/records", {"batches": [batch]}, ["txn_since"])
    # reads
    yield from _path_ints("GET", "/v1/topics/t/partitions/{}/records")
    yield from _query_ints("GET", "/v1/topics/t/partitions/0/records", ["after", "limit", "wait"])
    yield Case("GET", "/v1/topics/t/partitions/0/records", {"after": str(2**63 - 1)}, expect=(200, 400, 404))
    yield Case("GET", "/v1/topics/t/partitions/9/records")
    yield Case("GET", "/v1/topics/missing/partitions/0/records")
    yield from _query_ints("GET", "/v1/changes", ["wait"])
    for bad in ["-2", str(2**63), str(10**30), *MALFORMED]:
        yield Case("GET", "/v1/changes", {"after": bad})
    # stream groups
    yield from _query_ints("GET", "/v1/groups/g/topics/t/records", ["partition", "max", "wait"])
    yield Case("GET", "/v1/groups/g/topics/t/records", {"partition": "9"})
    yield Case("GET", "/v1/groups/nobody/topics/missing/records")
    yield Case("GET", "/v1/groups/nobody/topics/t/records", expect=(200,))  # a read registers nothing
    yield from _path_ints("GET", "/v1/groups/g/topics/t/partitions/{}")
    yield Case("GET", "/v1/groups/g/topics/t/partitions/9")
    yield Case("GET", "/v1/groups/nobody/topics/t/partitions/0", expect=(200, 404))
    commit = {"topic": "t", "partition": 0, "offset": 1}
    for route in ["commit", "seek"]:
        yield from _body_ints("POST", f"/v1/groups/g/{route}", commit, ["partition", "offset"])
        yield from _body_ints("POST", f"/v1/groups/fresh/{route}", commit, ["partition", "offset"])
        yield Case("POST", f"/v1/groups/fresh/{route}", None, {**commit, "topic": "missing"})
        yield Case("POST", f"/v1/groups/fresh/{route}", None, {**commit, "offset": 999})
        yield Case("POST", f"/v1/groups/fresh/{route}", None, {**commit, "partition": 9})
    member = {"member_id": "m-1", "topic": "t", "partition": 0, "offset": 1}
    yield from _body_ints("POST", "/v1/groups/g/commit", member, ["partition", "offset", "generation"])
    for bad in BAD_SECONDS:
        yield Case("POST", "/v1/groups/fresh/join", None, {"topics": ["t"], "session_timeout": bad})
    yield Case("POST", "/v1/groups/fresh/join", None, {"topics": ["missing"]})
    for bad in [0, -1, "x", 1.5, True]:
        yield Case("POST", "/v1/groups/g/poll", None, {"member_id": "m-1", "max_messages": bad})
    for bad in BAD_SECONDS:
        yield Case("POST", "/v1/groups/g/poll", None, {"member_id": "m-1", "wait": bad})
    for bad in BAD_INTS:
        yield Case("POST", "/v1/groups/g/release", None, {"member_id": "m-1", "partitions": [["t", bad]]})
    reset = {"topic": "t", "to": "offset", "value": 1}
    yield from _body_ints("POST", "/v1/groups/g/reset", reset, ["value", "partition"])
    yield from _body_ints("POST", "/v1/groups/fresh/reset", reset, ["value", "partition"])
    for bad in BAD_INTS:
        yield Case("POST", "/v1/groups/g/reset", None, {"topic": "t", "to": "time", "value": bad})
    yield Case("POST", "/v1/groups/fresh/reset", None, {**reset, "topic": "missing"})
    # SSE: refused before the stream starts
    yield from _query_ints("GET", "/v1/topics/t/stream", ["partition"], {"group": "fresh"})
    yield Case("GET", "/v1/topics/missing/stream", {"group": "fresh"})
    yield Case("GET", "/v1/topics/t/stream", {"group": "fresh", "partition": "9"})
    # retention
    yield from _query_ints("POST", "/v1/topics/t/clean", ["chunk"])
    yield from _query_ints("POST", "/v1/clean", ["chunk"])
    # dead letters
    for bad in BAD_INTS:
        yield Case("POST", "/v1/topics/t.dlq/redrive", None, {"offsets": [bad]})
    # queues
    yield from _body_ints("POST", "/v1/queues/t", {}, ["max_deliveries"], {"group": "fresh"})
    yield Case("POST", "/v1/queues/t", {"group": "fresh"}, {"max_deliveries": 10**6})
    send = {"records": [{"value": 1}]}
    for topic in ["t", "nt"]:
        path = f"/v1/queues/{topic}/messages"
        yield from _body_ints("POST", path, send, ["partition", "priority"], {"group": "fresh"})
        for bad in BAD_SECONDS:
            yield Case("POST", path, {"group": "fresh"}, {**send, "delay": bad})
        yield Case("POST", path, {"group": "fresh"}, {**send, "delay": 400 * 86400})
        yield Case("POST", path, {"group": "fresh"}, {**send, "priority": 10})
        big_header = {"value": 1, "headers": {"tidelog-deliver-at": str(2**63)}}
        yield Case("POST", path, {"group": "fresh"}, {"records": [big_header]})
        yield Case("POST", f"/v1/topics/{topic}/records", None, {"records": [big_header]})
        bad_priority = {"value": 1, "headers": {"tidelog-priority": "99"}}
        yield Case("POST", f"/v1/topics/{topic}/records", None, {"records": [bad_priority]})
    for group in ["q", "fresh"]:
        path = "/v1/queues/t/receive"
        yield from _query_ints("POST", path, ["max", "wait"], {"group": group})
        for bad in [*BAD_QUERY_SECONDS, "0", str(13 * 3600)]:
            yield Case("POST", path, {"group": group, "visibility_timeout": bad})
    yield Case("POST", "/v1/queues/missing/receive", {"group": "fresh"})
    for group in ["q", "fresh"]:
        g = {"group": group}
        for route in ["ack", "nack", "extend", "reject"]:
            path = f"/v1/queues/t/{route}"
            extra = {"seconds": 1} if route == "extend" else {}
            yield Case("POST", path, g, {"receipt": "bogus", **extra})
            forged = base64.urlsafe_b64encode(f"{group}:t:0:1:1:abcdef".encode()).decode().rstrip("=")
            yield Case("POST", path, g, {"receipt": forged, **extra})
            yield Case("POST", path, g, {"receipts": ["bogus", forged], **extra}, expect=(200, 400, 404, 409))
        for bad in BAD_SECONDS:
            yield Case("POST", "/v1/queues/t/nack", g, {"receipt": receipt, "delay": bad})
            yield Case("POST", "/v1/queues/t/extend", g, {"receipt": receipt, "seconds": bad})
            yield Case("POST", "/v1/queues/t/nack", g, {"receipts": [receipt], "delay": bad})
        for bad in BAD_INTS:
            yield Case("POST", "/v1/queues/t/nack", g, {"receipt": receipt, "due": bad})
            yield Case("POST", "/v1/queues/t/extend", g, {"receipt": receipt, "deadline": bad})
        yield Case("GET", "/v1/queues/t/stats", g, expect=(200,))
    yield Case("POST", "/v1/queues/t/ack", {"group": "q"}, {"receipt": stale}, expect=(409,))
    yield Case("POST", "/v1/queues/t/ack", {"group": "q"}, {"receipts": [stale]}, expect=(200,))
    yield Case("GET", "/v1/queues/missing/stats", {"group": "fresh"})
    # /api and miniqueue
    yield from _query_ints("GET", "/api/topics/one/pull", ["batch", "wait"], {"group": "fresh"})
    yield Case("GET", "/api/topics/one/pull", {"group": "fresh"}, expect=(200,))
    yield Case("GET", "/api/topics/missing/pull", {"group": "fresh"})
    yield from _body_ints("POST", "/api/topics/one/ack", {"group": "fresh"}, ["lastAckedId"])
    yield Case("POST", "/api/topics/one/ack", None, {"group": "fresh", "lastAckedId": 99})
    yield Case("POST", "/api/topics/missing/ack", None, {"group": "fresh", "lastAckedId": 1})
    yield from _query_ints("POST", "/publish/t", ["partition"], body=b"x")
    yield from _query_ints("POST", "/publish/nt", ["partition"], body=b"x")
    # undecodable text in a path is a bad name, never a topic named U+FFFD
    for path in ["/v1/topics/%ff/partitions/0/records", "/v1/queues/%ff/stats", "/console/topics/%ff"]:
        yield Case("GET", path)
    yield Case("POST", "/publish/%ff", None, b"x")
    yield Case("POST", "/v1/queues/%e2%82/messages", None, {"records": [{"value": 1}]})
    yield Case("POST", "/publish/t?key=%ff", None, b"x")
    yield Case("POST", "/publish/nt?key=a%e2%82", None, b"x")
    # the console (pages answer HTML, their twins JSON)
    for prefix in ["/console", "/console/api"]:
        # (a person types these: spaces around a number are trimmed, not refused)
        for name in ["partition", "after"]:
            for bad in ["-1", str(2**63), str(10**30), "x", "1.5", "+1", "٣"]:
                yield Case("GET", f"{prefix}/topics/t", {name: bad})
        yield Case("GET", f"{prefix}/topics/t?key=%ff")
        yield Case("GET", f"{prefix}/topics/t", {"from_time": "9" * 40})
        yield Case("GET", f"{prefix}/topics/t?from_time=%ff")
        yield Case("GET", f"{prefix}/queues/t/fresh", expect=(200, 404))
        yield Case("GET", f"{prefix}/groups/nobody")
        yield Case("GET", f"{prefix}/topics/missing")
    for bad in [str(2**63), str(10**30), "0", "999"]:
        yield Case("GET", f"/console/topics/t/partitions/0/records/{bad}")
    for bad in [str(2**63), str(10**30), "9"]:
        yield Case("GET", f"/console/topics/t/partitions/{bad}/records/1")
    form = {"value": "1", "format": "json"}
    for bad in ["-1", str(2**63), str(10**30), "x"]:
        yield Case("POST", "/console/topics/t/produce", data={**form, "partition": bad}, expect=FORM)
        yield Case("POST", "/console/topics/nt/produce", data={**form, "partition": bad}, expect=FORM)
        for to, field in [("offset", "offset"), ("time", "time")]:
            data = {"topic": "t", "to": to, field: bad, "confirm": "yes"}
            yield Case("POST", "/console/groups/nobody/reset", data=data, expect=FORM)
            yield Case("POST", "/console/groups/g/reset", data={**data, "partition": bad}, expect=FORM)
        yield Case("POST", "/console/queues/t/q/redrive", data={"offset": bad}, expect=FORM)


# A console form refused is its page again with the error, 200 or 4xx.
FORM = (200, 400, 404, 409)


def _setup(url: str) -> tuple[str, str]:
    """Topics, a stream group with a commit, a queue group with a lease; (live receipt, stale receipt)."""
    clock = [1_800_000_000_000]
    log = tidelog.open(url, clock=lambda: clock[0])
    try:
        log.create_topic("t", 2)
        log.create_topic("one", 1)
        producer = log.producer()
        for i in range(4):
            producer.send("t", {"i": i}, key=f"k{i}", partition=i % 2)
            producer.send("one", {"i": i})
        log.consumer("g").commit("t", 0, 1)
        q = log.queue("t", "q", visibility_timeout=10)
        first = q.receive(max_messages=10)
        clock[0] += 11_000
        again = q.receive(max_messages=10)  # the same records, delivered again
        assert sorted(d.offset for d in again) == sorted(d.offset for d in first)
        q.ack(again[0])
        stale = next(d for d in first if (d.partition, d.offset) == (again[0].partition, again[0].offset))
        live = again[1]
        q.reject(again[2])  # a dead letter, for redrive
        return receipts.encode("q", live), receipts.encode("q", stale)
    finally:
        log.close()


@pytest.fixture(params=["sqlite", "postgres"])
def served(request, tmp_path) -> Iterator[tuple[str, str, str, str]]:
    """(store URL, server URL, live receipt, stale receipt)."""
    if request.param == "sqlite":
        url = str(tmp_path / "sweep.db")
        live, stale = _setup(url)
        with ServerThread(url, clean_interval=0, console_interval=0) as server:
            yield url, server.url, live, stale
    else:
        with postgres_schema() as url:
            live, stale = _setup(url)
            with ServerThread(url, clean_interval=0, console_interval=0) as server:
                yield url, server.url, live, stale


def _send(client: httpx.Client, case: Case) -> tuple[int, str]:
    """(status, body) of a case; an event stream that opened is closed at once."""
    kwargs: dict[str, Any] = {"params": case.params}
    if isinstance(case.json, bytes):
        kwargs["content"] = case.json
    elif case.json is not None:
        kwargs["json"] = case.json
    if case.data is not None:
        kwargs["data"] = case.data
    with client.stream(case.method, case.path, **kwargs) as response:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response.status_code, ""
        return response.status_code, response.read().decode(errors="replace")


def test_every_route_refuses_bad_input_and_writes_nothing(served, tried):
    """Dumps are compared around each run of refusals and reads (a batch): a
    change means one of that batch wrote. TIDELOG_TEST_SWEEP_EACH=1 dumps
    around every case instead, to find which."""
    url, base, live, stale = served
    each = bool(os.environ.get("TIDELOG_TEST_SWEEP_EACH"))
    wrong: list[str] = []
    refused = reads = 0
    all_cases = list(cases(live, stale))
    batch: list[str] = []
    before = dump(url)

    def check_batch() -> None:
        nonlocal before
        after = dump(url)
        if batch and after != before:
            changed = sorted(t for t in after if after[t] != before.get(t))
            wrong.append(f"one of these changed {changed}:\n  " + "\n  ".join(batch))
        batch.clear()
        before = after

    with httpx.Client(base_url=base, timeout=10) as client:
        # The console's forms carry its CSRF token, as a browser posting them
        # would: what is swept is the form's checks behind that one.
        found = re.search(r'name="csrf" value="([^"]+)"', client.get("/console/topics/t").text)
        assert found, "the console's page holds no CSRF token"
        csrf = found.group(1)
        for case in all_cases:
            if case.data is not None and case.path.startswith("/console/"):
                case = case._replace(data={"csrf": csrf, **case.data})
            quiet = case.method == "GET" or min(case.expect) >= 400  # must write nothing
            if not quiet and batch:
                check_batch()
            what = f"{case.method} {case.path} {case.params} {case.json or case.data}"[:300]
            try:
                status, text = _send(client, case)
            except httpx.TimeoutException:
                wrong.append(f"no answer in 10 s: {what}")
                continue
            if status >= 500:
                wrong.append(f"{status} {what}: {text[:200]}")
            elif status not in case.expect:
                wrong.append(f"{status} (expected {case.expect}) {what}: {text[:200]}")
            refusal = status >= 400 or (case.data is not None and 'class="error' in text)
            refused += refusal
            reads += case.method == "GET" and not refusal
            if refusal or case.method == "GET":
                batch.append(f"{status} {what}")
                if each:
                    check_batch()
            else:
                before = dump(url)  # a write that was allowed to succeed
        check_batch()
    tried(cases=len(all_cases), refused=refused, reads=reads, wrong=len(wrong))
    assert not wrong, "\n".join(wrong)
