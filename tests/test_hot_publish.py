"""POST /publish/{topic} served without Starlette (hot.py) answers exactly as
the Starlette route does: the same requests go to a server with the lean path
and to one without it, and every answer must match."""

from __future__ import annotations

import base64
import re

import httpx
import pytest

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def pair(serve):
    options = {"token": TOKEN, "max_body": 64, "auto_create": False}
    lean, full = serve(lean_routes=True, **options), serve(lean_routes=False, **options)
    with httpx.Client(base_url=lean.url) as a, httpx.Client(base_url=full.url) as b:
        for client in (a, b):
            client.post(
                "/v1/topics", json={"name": "orders", "partitions": 1}, headers=AUTH
            ).raise_for_status()
        yield a, b


def answers(clients, method: str, path: str, **kw) -> list[tuple[int, str, object]]:
    out = []
    chunks = kw.pop("chunks", None)
    for client in clients:
        if chunks is not None:  # a fresh iterator for each: a chunked body without a length
            kw["content"] = iter(chunks)
        r = client.request(method, path, **kw)
        body = r.json() if r.headers.get("content-type") == "application/json" else r.text
        if isinstance(body, dict):
            body.pop("timestamp", None)  # the only field that may differ
        out.append((r.status_code, r.headers.get("content-type"), body))
    return out


@pytest.mark.parametrize(
    ("path", "kw"),
    [
        ("/publish/orders", {"content": b"hello", "headers": AUTH}),  # the lean path
        ("/publish/orders", {"content": b"", "headers": AUTH}),  # an empty value is a value
        ("/publish/orders", {"content": b"hello"}),  # no token: 401
        ("/publish/orders", {"content": b"hello", "headers": {"Authorization": "Bearer wrong"}}),
        ("/publish/orders?partition=0", {"content": b"to 0", "headers": AUTH}),  # a query: Starlette
        ("/publish/orders?partition=9", {"content": b"to 9", "headers": AUTH}),  # no such partition
        ("/publish/orders?key=k", {"content": b"keyed", "headers": AUTH}),
        ("/publish/bad%20name", {"content": b"x", "headers": AUTH}),  # an invalid name: 400
        ("/publish/missing", {"content": b"x", "headers": AUTH}),  # auto-create off: the write raises
        ("/publish/orders", {"content": b"x" * 65, "headers": AUTH}),  # over max_body: 413
        ("/publish/orders", {"chunks": [b"x" * 40, b"y" * 40], "headers": AUTH}),  # chunked, over
        ("/publish/orders", {"chunks": [b"x" * 20, b"y" * 20], "headers": AUTH}),  # chunked, within
        ("/publish/", {"content": b"x", "headers": AUTH}),  # no topic: no route
        ("/publish/a/b", {"content": b"x", "headers": AUTH}),
    ],
)
def test_the_lean_path_answers_as_the_route_does(pair, path, kw):
    lean, full = answers(pair, "POST", path, **dict(kw))
    assert lean == full


def test_every_lean_publish_is_stored_and_counted_under_the_route(pair):
    for i in range(5):
        assert answers(pair, "POST", "/publish/orders", content=f"v{i}".encode(), headers=AUTH)[0][0] == 201
    answers(pair, "POST", "/publish/missing", content=b"x", headers=AUTH)
    stored = []
    for client in pair:
        records = client.get("/v1/topics/orders/partitions/0/records", headers=AUTH).json()["records"]
        stored.append([(r["offset"], base64.b64decode(r["value"])) for r in records])
    assert stored[0] == stored[1] == [(i + 1, f"v{i}".encode()) for i in range(5)]
    counted = []
    for client in pair:
        text = client.get("/metrics", headers=AUTH).text
        counted.append(
            sorted(
                re.findall(
                    r'tidelog_http_requests_total\{method="POST",route="/publish/\{topic\}",status="(\d+)"\} (\S+)',
                    text,
                )
            )
        )
    assert counted[0] == counted[1] == [("201", "5.0"), ("404", "1.0")]
