"""Fuzz the server against its own /openapi.json: no input may cause a 5xx.

Every route of the app, on each store: the OpenAPI document's, plus what it
leaves out (the console's pages and forms, /docs, /openapi.json, /),
described below for the fuzzer only. Each operation runs schemathesis's
phases (coverage, the document's examples where it has any, fuzzing),
bounded: a few fuzzed examples per operation. Long-polls are held to a
short cap on this server so that generated `wait=` values do not make the
run slow; the SSE stream, which never ends by design, is called and closed
once its answer's head came; `POST /subscribe` may keep waiting for a
record (its protocol), so a read that times out there is no failure.

An operation's schemathesis test is built when it first runs, not at
collection (`@schema.parametrize()`): building one generates its coverage
cases, and every xdist worker collects this module though one runs it.
"""

from __future__ import annotations

import copy
import functools
import json
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
import requests
from hypothesis import HealthCheck, settings

from pgschema import postgres_schema

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.generation.feedback import FeedbackSources  # noqa: E402
from schemathesis.pytest._test_builder import build_operation_test  # noqa: E402
from schemathesis.python._constants.orchestrator import make_constants_value_source  # noqa: E402
from schemathesis.schemas import BaseSchema  # noqa: E402
from schemathesis.transport.requests import ManagedCookiesSession  # noqa: E402

from tidelog.server.http.openapi import spec  # noqa: E402

# schemathesis's negative-mode generation draws from the `random` module inside its
# strategies now and then, which hypothesis deprecates: its warning, not ours to fix,
# failed a run once (the suite turns warnings into errors).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)

NAME = {"type": "string"}
ANY = {"default": {"description": "any answer but a 5xx"}}


def _page(*path_params: str, query: tuple[str, ...] = ()) -> dict:
    params = [{"name": p, "in": "path", "required": True, "schema": NAME} for p in path_params]
    params += [{"name": q, "in": "query", "schema": NAME} for q in query]
    return {"get": {"parameters": params, "responses": ANY}}


def _form(*fields: str, path_params: tuple[str, ...] = ()) -> dict:
    params = [{"name": p, "in": "path", "required": True, "schema": NAME} for p in path_params]
    schema = {"type": "object", "properties": {f: NAME for f in fields}}
    body = {"content": {"application/x-www-form-urlencoded": {"schema": schema}}}
    return {"post": {"parameters": params, "requestBody": body, "responses": ANY}}


BROWSE = ("partition", "after", "key", "from_time")
# The routes the OpenAPI document leaves out (pages for people, not the API).
PAGES = {
    "/openapi.json": _page(),
    "/docs": _page(),
    "/": _page(),
    "/console/": _page(),
    "/console/login": {**_page(), **_form("token")},
    "/console/logout": {"post": {"responses": ANY}},
    "/console/api/": _page(),
    "/console/topics/{topic}": _page("topic", query=BROWSE),
    "/console/api/topics/{topic}": _page("topic", query=BROWSE),
    "/console/topics/{topic}/partitions/{partition}/records/{offset}": _page("topic", "partition", "offset"),
    "/console/groups/{group}": _page("group"),
    "/console/api/groups/{group}": _page("group"),
    "/console/queues/{topic}/{group}": _page("topic", "group"),
    "/console/api/queues/{topic}/{group}": _page("topic", "group"),
    "/console/topics/{topic}/produce": _form(
        "value", "format", "key", "headers", "partition", path_params=("topic",)
    ),
    "/console/groups/{group}/reset": _form(
        "topic", "to", "offset", "time", "partition", "confirm", path_params=("group",)
    ),
    "/console/queues/{topic}/{group}/redrive": _form("which", "offset", path_params=("topic", "group")),
}


def _document() -> dict:
    document = copy.deepcopy(spec())
    document["paths"].update(PAGES)
    return document


DOCUMENT = _document()
# Every operation, as schemathesis labels them ("POST /v1/topics"), read off the document.
OPERATIONS = [f"{method.upper()} {path}" for path, ops in DOCUMENT["paths"].items() for method in ops]


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value) -> bytes:
    """POST /subscribe's body: its commands, one JSON value a line."""
    lines = value if isinstance(value, list) else [value]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request, tmp_path_factory) -> Iterator[str]:
    from tidelog.server.http.thread import ServerThread

    def run(url: str) -> Iterator[str]:
        server = ServerThread(url, max_wait=0.05, clean_interval=0).start()
        with httpx.Client(base_url=server.url) as http:
            # Give the fuzzer something to find besides 404s.
            for name in ("0", "a", "A", "orders"):
                http.post("/v1/topics", json={"name": name, "partitions": 2})
                http.post(
                    f"/v1/topics/{name}/records", json={"records": [{"value": 1}, {"value": "x", "key": "k"}]}
                )
            assert http.get("/openapi.json").json() == spec()  # what we fuzz is what the server serves
        try:
            yield server.url
        finally:
            server.stop()

    if request.param == "postgres":
        with postgres_schema() as url:
            yield from run(url)
    else:
        yield from run(str(tmp_path_factory.mktemp("fuzz") / "fuzz.db"))


# Built once an operation, on first use, in the worker that runs this module: what
# `@schema.parametrize()` builds at collection, for every operation, in every worker.
_built: dict[str, Callable[..., None]] = {}


@functools.cache
def _schema() -> tuple[BaseSchema, FeedbackSources]:
    """The document loaded (0.7 CPU s, also spared the workers that do not run this module),
    and the feedback its operations' tests share (as the pytest plugin's do)."""
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    return schema, FeedbackSources(constants_value_source=make_constants_value_source(schema))


def _test_of(label: str) -> Callable[..., None]:
    """The operation's schemathesis test, built as its pytest plugin builds one: the
    project config's phases (coverage, examples, fuzzing) and settings, around `check`."""
    if label not in _built:
        schema, feedback = _schema()
        operation = schema.find_operation_by_label(label)
        assert operation is not None, label
        _built[label] = build_operation_test(
            config=schema.config, operation=operation, test_func=check, given_kwargs={}, feedback=feedback
        )
    return _built[label]


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    """The cases' HTTP session, kept alive from case to case (a session and a connection
    a case cost about 12 of this module's 90 CPU seconds), dropping the cookies an answer
    set before the next case: as schemathesis's own runner sends its cases."""
    with ManagedCookiesSession() as http:
        yield http


@pytest.mark.parametrize("operation", OPERATIONS)
def test_no_input_makes_a_server_error(operation, served, session, tried):
    phases: Counter[str] = Counter()
    _test_of(operation)(served=served, session=session, phases=phases)
    assert phases, f"{operation}: no case ran"
    tried(cases=sum(phases.values()), **phases)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def check(case, served: str, session: requests.Session, phases: Counter[str]) -> None:
    phases[case.meta.phase.name.value] += 1
    if case.path == "/v1/topics/{topic}/stream":  # never ends: its status is enough
        kwargs = case.as_transport_kwargs(base_url=served)
        with httpx.Client(timeout=10, verify=False) as http:  # plain http: no CA bundle to load
            request = http.build_request(kwargs["method"], kwargs["url"], params=kwargs.get("params"))
            response = http.send(request, stream=True)
            response.close()
        assert response.status_code < 500, f"{case.method} {case.formatted_path}"
        return
    try:
        response = case.call(base_url=served, session=session, timeout=10)
    except requests.exceptions.ReadTimeout:
        assert case.path == "/subscribe/{topic}", f"{case.method} {case.formatted_path}: no answer"
        return  # a subscriber waiting for its next record
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text[:500]}"
    if (
        response.status_code >= 400
        and response.status_code != 405
        and "json" in response.headers.get("content-type", "")
    ):
        error = response.json()["error"]
        assert error["code"] and error["message"]
