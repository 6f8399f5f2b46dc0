"""Fuzz every route of the app with hypothesis: query strings and bodies
shaped like each route's own (its parameter and field names from the
OpenAPI document, the console's form fields) and unlike them (random JSON,
bytes, text), against a real server on each store.

- Never a 5xx and never a traceback (or any error) in the server's log.
- A refused request (4xx) changes nothing: the whole store is dumped before
  and after it (tests/dumps.py).

Examples are few a route (bounded; `derandomize` makes a run repeat the
last). Long-polls are held to a short cap
on these servers; the SSE stream is opened and closed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dumps import dump
from pgschema import postgres_schema
from tidelog.server.http.openapi import spec
from tidelog.server.http.thread import ServerThread

websockets = pytest.importorskip("websockets")

FIVE_XX_EXAMPLES = 15
REFUSAL_EXAMPLES = 8
CLIENT_TIMEOUT_S = 5.0
# A record for every subscriber the fuzzer starts: none waits for one.
SUBSCRIBE_RECORDS = 400


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    query: tuple[str, ...] = ()
    body: str | None = None  # "json", "bytes", "ndjson", "form", or None
    schema: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def id(self) -> str:
        return f"{self.method} {self.template}"


def _routes() -> list[Route]:
    found = []
    for template, ops in spec()["paths"].items():
        for method, op in ops.items():
            query = tuple(p["name"] for p in op.get("parameters", []) if p["in"] == "query")
            content = op.get("requestBody", {}).get("content", {})
            kind, schema = None, {}
            if "application/json" in content:
                kind, schema = "json", content["application/json"].get("schema", {})
            elif "application/octet-stream" in content:
                kind = "bytes"
            elif "application/x-ndjson" in content:
                kind = "ndjson"
            if template == "/subscribe/{topic}" and method == "get":
                continue  # the WebSocket: fuzzed by frames below
            found.append(Route(method.upper(), template, query, kind, schema))
    # What the OpenAPI document leaves out: the documents, and the console.
    found += [
        Route("GET", "/openapi.json"),
        Route("GET", "/docs"),
        Route("GET", "/"),
        Route("GET", "/console/"),
        Route("GET", "/console/login"),
        Route("POST", "/console/login", body="form", schema={"fields": ["token"]}),
        Route("POST", "/console/logout"),
        Route("GET", "/console/topics/{topic}", ("partition", "after", "key", "from_time")),
        Route("GET", "/console/api/topics/{topic}", ("partition", "after", "key", "from_time")),
        Route("GET", "/console/topics/{topic}/partitions/{partition}/records/{offset}"),
        Route("GET", "/console/groups/{group}"),
        Route("GET", "/console/api/groups/{group}"),
        Route("GET", "/console/queues/{topic}/{group}"),
        Route("GET", "/console/api/queues/{topic}/{group}"),
        Route("GET", "/console/api/"),
        Route(
            "POST",
            "/console/topics/{topic}/produce",
            body="form",
            schema={"fields": ["value", "format", "key", "headers", "partition"]},
        ),
        Route(
            "POST",
            "/console/groups/{group}/reset",
            body="form",
            schema={"fields": ["topic", "to", "offset", "time", "partition", "confirm"]},
        ),
        Route(
            "POST",
            "/console/queues/{topic}/{group}/redrive",
            body="form",
            schema={"fields": ["which", "offset"]},
        ),
    ]
    return found


ROUTES = _routes()

# --- strategies -------------------------------------------------------------------------

# FRESH becomes a name no request used before (fresh()): a refusal that
# registers what it names shows, whatever the routes fuzzed before made.
FRESH = "FRESH"
NAMES = st.sampled_from(["orders", "jobs", "mq", FRESH, "orders.dlq", "0", "a"])
BAD_NAMES = st.text(min_size=0, max_size=24).filter(lambda s: s not in (".", ".."))
GROUPS = st.sampled_from(["g", "billing", FRESH, "jobs", "mailer"])
_fresh = itertools.count()


def fresh(case: Case) -> Case:
    """The case with each FRESH made a name of its own."""
    n = f"fresh-{next(_fresh)}"
    body = case.body.replace(FRESH.encode(), n.encode()) if case.body else case.body
    return Case(case.path.replace(FRESH, n), case.query.replace(FRESH, n), body)


NUMBERS = st.one_of(
    st.sampled_from([-1, 0, 1, 2, 7, 100, 10_000, 2**31, 2**63, 10**30]),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
QUERY_VALUES = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "true", "false", "nan", "inf", "1e400", "10" * 12, "0x10"]),
    NUMBERS.map(str),
    st.text(max_size=16),
)


def _path_value(name: str) -> st.SearchStrategy[str]:
    if name in ("partition", "offset"):
        return st.one_of(st.sampled_from(["0", "1", "-1", "99", "x", "1.5"]), NUMBERS.map(str))
    if name == "group":
        return st.one_of(GROUPS, GROUPS, BAD_NAMES)
    return st.one_of(NAMES, NAMES, BAD_NAMES)


# A field's likely values by its name: enough of them valid to get past the
# first check and reach the ones behind it.
BY_NAME: dict[str, st.SearchStrategy[Any]] = {
    "topic": NAMES,
    "name": NAMES,
    "group": GROUPS,
    "dead_letter": NAMES,
    "partition": st.integers(-1, 3),
    "partitions": st.integers(-1, 5),
    "offset": st.integers(-1, 5),
    "lastAckedId": st.integers(-1, 5),
    "after": st.integers(-1, 5),
    "value": JSON,
    "payload": JSON,
}


def _shaped(schema: Any, depth: int = 0, name: str | None = None) -> st.SearchStrategy[Any]:
    """Values shaped like `schema` (and its field's name), with random JSON
    mixed in at every level."""
    if not isinstance(schema, dict) or depth > 4:
        return JSON
    options: list[st.SearchStrategy[Any]] = []
    if name in BY_NAME:
        options.append(BY_NAME[name])
    if "enum" in schema:
        options.append(st.sampled_from(schema["enum"]))
    if "properties" in schema:
        props = {k: _shaped(v, depth + 1, k) for k, v in schema["properties"].items()}
        required = {k: props.pop(k) for k in schema.get("required", []) if k in props}
        options.append(st.fixed_dictionaries(required, optional=props))
        options.append(st.fixed_dictionaries({}, optional={**required, **props}))
    if schema.get("type") == "array" or "items" in schema:
        options.append(st.lists(_shaped(schema.get("items", {}), depth + 1), max_size=3))
    for key in ("oneOf", "anyOf"):
        options += [_shaped(s, depth + 1) for s in schema.get(key, [])]
    kind = schema.get("type")
    if kind == "integer":
        options.append(NUMBERS)
    elif kind == "string":
        options.append(st.text(max_size=20))
    elif kind == "boolean":
        options.append(st.booleans())
    elif kind == "number":
        options.append(NUMBERS)
    options.append(SCALARS if options else JSON)
    return st.one_of(options)


PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "topic": NAMES,
    "name": NAMES,
    "group": GROUPS,
    "dead_letter": st.just("orders.dlq"),
    "partition": st.integers(0, 2),
    "partitions": st.integers(1, 4),
    "offset": st.integers(0, 3),
    "lastAckedId": st.integers(0, 3),
    "after": st.integers(0, 3),
    "wait": st.sampled_from([0, 0.01]),
    "max": st.integers(1, 5),
    "limit": st.integers(1, 5),
    "batch": st.integers(1, 5),
    "visibility_timeout": st.integers(1, 60),
    "max_deliveries": st.integers(1, 5),
    "chunk": st.integers(1, 100),
    "value": st.one_of(st.integers(0, 9), st.text(max_size=8)),
    "payload": st.one_of(st.integers(0, 9), st.text(max_size=8)),
}


def _plausible(schema: Any, name: str | None = None, depth: int = 0) -> st.SearchStrategy[Any]:
    """A value `schema` likely takes (required fields, plausible numbers and
    names): what gets past a route's first checks to the ones behind them."""
    if name in PLAUSIBLE:
        return PLAUSIBLE[name]
    if not isinstance(schema, dict) or depth > 4:
        return st.integers(0, 3)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "properties" in schema:
        props = {k: _plausible(v, k, depth + 1) for k, v in schema["properties"].items()}
        required = {k: props.pop(k) for k in schema.get("required", []) if k in props}
        return st.fixed_dictionaries(required, optional=props)
    if "items" in schema or schema.get("type") == "array":
        return st.lists(_plausible(schema.get("items", {}), None, depth + 1), min_size=1, max_size=3)
    for key in ("oneOf", "anyOf"):
        if schema.get(key):
            return st.one_of([_plausible(s, name, depth + 1) for s in schema[key]])
    kind = schema.get("type")
    if kind == "integer":
        return st.integers(schema.get("minimum", 0), schema.get("minimum", 0) + 5)
    if kind == "number":
        return st.floats(0, 10)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        return st.sampled_from(["x", "k", "orders"])
    return st.one_of(st.integers(0, 3), st.text(max_size=4))


COMMANDS = st.one_of(
    st.sampled_from(
        ["INIT", "ACK", "NACK", "BACK", "DACK 0", "DACK 1", "DACK -1", "DACK x", "EXTEND", "BOGUS"]
    ),
    st.text(max_size=12),
)


def _body(route: Route) -> st.SearchStrategy[bytes | None]:
    junk = st.one_of(st.binary(max_size=64), st.text(max_size=40).map(str.encode))
    if route.body == "json":
        plausible = _plausible(route.schema).map(lambda v: json.dumps(v).encode())
        shaped = _shaped(route.schema).map(lambda v: json.dumps(v, allow_nan=True).encode())
        return st.one_of(plausible, shaped, JSON.map(lambda v: json.dumps(v).encode()), junk, st.none())
    if route.body == "bytes":
        return st.one_of(st.binary(max_size=256), st.none())
    if route.body == "ndjson":
        lines = st.lists(st.one_of(COMMANDS.map(json.dumps), COMMANDS), min_size=1, max_size=6)
        return st.one_of(st.just(["INIT"]).map(json.dumps).map(lambda s: [s]), lines).map(
            lambda ls: "".join(line + "\n" for line in ls).encode()
        )
    if route.body == "form":
        fields = st.sampled_from([*route.schema["fields"], "x"])
        pairs = st.lists(st.tuples(fields, QUERY_VALUES), max_size=6)
        return st.one_of(pairs.map(lambda p: urlencode(p).encode()), junk)
    return st.one_of(st.none(), junk)


@dataclass
class Case:
    path: str
    query: str
    body: bytes | None


def cases(route: Route) -> st.SearchStrategy[Case]:
    names = [part[1:-1] for part in route.template.split("/") if part.startswith("{")]
    path_values = st.fixed_dictionaries({n: _path_value(n) for n in names})
    plausible = st.fixed_dictionaries({}, optional={k: _plausible({}, k).map(str) for k in route.query})
    known = st.sampled_from(route.query) if route.query else st.nothing()
    keys = st.one_of(
        known, known, st.sampled_from(["group", "partition", "wait", "token", "x"]), st.text(max_size=6)
    )
    junk = st.lists(st.tuples(keys, QUERY_VALUES), max_size=4)
    query = st.one_of(plausible.map(lambda d: list(d.items())), junk).map(urlencode)

    def build(values: dict[str, str], q: str, body: bytes | None) -> Case:
        path = route.template
        for name, value in values.items():
            path = path.replace("{" + name + "}", quote(value, safe="") or "%20")
        return Case(path, q, body)

    return st.builds(build, path_values, query, _body(route))


# --- the servers --------------------------------------------------------------------------


class Complaints(logging.Handler):
    """Every error (or traceback) any logger of this process says."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def said(self) -> str:
        return "\n".join(self.format(r) for r in self.records)


@dataclass
class Served:
    kind: str
    url: str
    store: str
    complaints: Complaints
    # Seeded, and every request since refused (4xx): a refusal changes nothing (the
    # refusal test shows it of every route), so the store is still as seed() left it.
    seeded: bool = False


def client(served: Served, timeout: float) -> httpx.Client:
    """A client of the server, which is plain http: verify=False spares loading the CA
    bundle, 19 ms of CPU a client (two a test were half this module's CPU)."""
    return httpx.Client(base_url=served.url, timeout=timeout, verify=False)


def seed(served: Served) -> None:
    """Topics, records, groups and a queue for the fuzzer to find (again,
    after a fuzzed DELETE): unless nothing but refusals came since the last
    seeding (which then would change nothing)."""
    if served.seeded:
        return
    with client(served, 30) as http:
        for name, partitions in (("orders", 2), ("jobs", 1), ("mq", 1)):
            if http.get(f"/v1/topics/{name}").status_code == 404:
                http.post("/v1/topics", json={"name": name, "partitions": partitions}).raise_for_status()
                http.post(
                    f"/v1/topics/{name}/records", json={"records": [{"value": 1}, {"value": "x", "key": "k"}]}
                )
        http.post("/v1/groups/billing/commit", json={"topic": "orders", "partition": 0, "offset": 1})
        http.post("/v1/queues/jobs", params={"group": "mailer"}, json={"max_deliveries": 2})
        available = http.get("/v1/queues/mq/stats").json().get("available", 0)
        if available < SUBSCRIBE_RECORDS:
            records = [{"value": i} for i in range(SUBSCRIBE_RECORDS - available)]
            http.post("/v1/topics/mq/records", json={"records": records}).raise_for_status()
    served.seeded = True


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request, tmp_path_factory) -> Iterator[Served]:
    complaints = Complaints()
    loggers = [logging.getLogger(), logging.getLogger("_granian"), logging.getLogger("tidelog")]
    for logger in loggers:
        logger.addHandler(complaints)
    try:
        if request.param == "postgres":
            with postgres_schema() as url:
                yield from _serve(request.param, url, complaints)
        else:
            yield from _serve(request.param, str(tmp_path_factory.mktemp("fuzz") / "fuzz.db"), complaints)
    finally:
        for logger in loggers:
            logger.removeHandler(complaints)


def _serve(kind: str, store: str, complaints: Complaints) -> Iterator[Served]:
    server = ServerThread(store, max_wait=0.05, clean_interval=0, console_interval=0).start()
    try:
        served = Served(kind, server.url, store, complaints)
        seed(served)
        yield served
    finally:
        server.stop()


def call(served: Served, http: httpx.Client, route: Route, case: Case) -> httpx.Response:
    case = fresh(case)
    url = case.path + (f"?{case.query}" if case.query else "")
    headers = {"content-type": "application/x-www-form-urlencoded"} if route.body == "form" else {}
    seeded, served.seeded = served.seeded, False  # until the answer shows a refusal
    if route.template.endswith("/stream"):  # SSE: never ends by design; its answer's head is enough
        with http.stream(route.method, url) as response:
            pass
    else:
        response = http.request(route.method, url, content=case.body, headers=headers)
    served.seeded = seeded and 400 <= response.status_code < 500
    return response


def _no_complaint(served: Served, route: Route, case: Case) -> None:
    said = served.complaints.said()
    served.complaints.records.clear()
    assert not said, f"{route.id} {case}: the server logged\n{said[-3000:]}"


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.id)
def test_no_input_makes_a_server_error(served, route, tried):
    seed(served)
    served.complaints.records.clear()
    statuses: dict[int, int] = {}

    @settings(
        max_examples=FIVE_XX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases(route))
    def fuzz(case: Case) -> None:
        try:
            response = call(served, http, route, case)
        except httpx.ReadTimeout:
            assert route.template == "/subscribe/{topic}", f"{route.id} {case}: no answer"
            return  # a subscriber waiting for its next record: no answer is the protocol's
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, f"{route.id} {case}: {response.status_code} {response.text[:300]}"
        _no_complaint(served, route, case)

    with client(served, CLIENT_TIMEOUT_S) as http:
        fuzz()
    tried(cases=sum(statuses.values()), statuses=dict(sorted(statuses.items())))


def _refusal_params() -> list[Any]:
    out = []
    for kind in ("sqlite", "postgres"):
        for route in ROUTES:
            out.append(pytest.param(kind, route, id=f"{kind}-{route.id}"))
    return out


@pytest.mark.parametrize("served, route", _refusal_params(), indirect=["served"])
def test_a_refused_request_changes_nothing(served, route, tried):
    seed(served)
    refused = 0
    wrote: list[str] = []

    @settings(
        max_examples=REFUSAL_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases(route))
    def fuzz(case: Case) -> None:
        nonlocal refused
        before = dump(served.store)
        try:
            response = call(served, http, route, case)
        except httpx.ReadTimeout:
            return
        if 400 <= response.status_code < 500:
            refused += 1
            after = dump(served.store)
            if after != before:
                # A stream's answer was closed unread (call()): its status says enough.
                said = "" if route.template.endswith("/stream") else response.text[:200]
                changed = {
                    t: [r for r in rows if r not in before.get(t, [])][:3] for t, rows in after.items()
                }
                changed = {t: rows for t, rows in changed.items() if before.get(t) != after[t]}
                wrote.append(f"{route.id} {case} -> {response.status_code} {said}; changed: {changed}")

    with client(served, CLIENT_TIMEOUT_S) as http:
        fuzz()
    tried(cases=REFUSAL_EXAMPLES, refused=refused, wrote=len(wrote))
    assert not wrote, "refused requests wrote:\n" + "\n".join(wrote[:5])


# --- the WebSocket subscribe: random frames ------------------------------------------------


def test_websocket_frames_make_no_server_error(served, tried):
    seed(served)
    served.seeded = False  # the frames may take records from mq
    served.complaints.records.clear()
    url = served.url.replace("http://", "ws://") + "/subscribe/mq"
    closes: dict[int, int] = {}

    async def session(frames: list[str | bytes]) -> None:
        async with websockets.connect(url) as ws:
            for frame in frames:
                await ws.send(frame)
                try:
                    got = json.loads(await asyncio.wait_for(ws.recv(), 2))
                except (TimeoutError, websockets.ConnectionClosed):
                    break
                assert "msg" in got or "error" in got, got
            code = ws.close_code or 1000
        closes[code] = closes.get(code, 0) + 1
        assert code != 1011, "the server closed with an internal error"

    frames = st.lists(
        st.one_of(COMMANDS, COMMANDS.map(json.dumps), st.binary(max_size=16)), min_size=1, max_size=5
    )

    @settings(
        max_examples=FIVE_XX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(frames=frames)
    def fuzz(frames: list[str | bytes]) -> None:
        asyncio.run(session(frames))
        said = served.complaints.said()
        served.complaints.records.clear()
        assert not said, said[-3000:]

    fuzz()
    tried(cases=FIVE_XX_EXAMPLES, closes=closes)
