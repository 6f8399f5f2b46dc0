"""The /api pub/sub routes and POST /publish/{topic}, on a real server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess

import httpx
import pytest

import tidelog
from conftest import need_service


@pytest.fixture
def server(serve):
    return serve()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url) as client:
        yield client


def test_api_flow(http):
    created = http.post("/api/topics", json={"name": "orders"})
    assert created.status_code == 201
    assert created.json()["name"] == "orders"
    assert http.post("/api/topics", json={"name": "orders"}).status_code == 200

    ids = []
    for payload in [{"orderId": 1}, {"orderId": 2, "items": [1, 2.5, None]}, "plain", [1, 2]]:
        r = http.post("/api/topics/orders/publish", json={"payload": payload})
        assert r.status_code == 201
        body = r.json()
        assert body["topic"] == "orders" and body["createdAt"].endswith("Z")
        ids.append(body["id"])
    assert ids == [1, 2, 3, 4]

    pulled = http.get("/api/topics/orders/pull", params={"group": "analytics", "batch": 2}).json()
    assert pulled["lastAckedId"] == 0
    assert [(m["id"], m["payload"]) for m in pulled["messages"]] == [
        (1, {"orderId": 1}),
        (2, {"orderId": 2, "items": [1, 2.5, None]}),
    ]
    # Pulling again without an ack gives the same messages: the group has not moved.
    assert [
        m["id"] for m in http.get("/api/topics/orders/pull?group=analytics&batch=2").json()["messages"]
    ] == [1, 2]

    acked = http.post("/api/topics/orders/ack", json={"group": "analytics", "lastAckedId": 2})
    assert acked.status_code == 200 and acked.json()["lastAckedId"] == 2
    # Monotonic and idempotent: a lower id never rewinds, the same id again is fine.
    assert (
        http.post("/api/topics/orders/ack", json={"group": "analytics", "lastAckedId": 1}).json()[
            "lastAckedId"
        ]
        == 2
    )
    assert (
        http.post("/api/topics/orders/ack", json={"group": "analytics", "lastAckedId": 2}).json()[
            "lastAckedId"
        ]
        == 2
    )

    rest = http.get("/api/topics/orders/pull?group=analytics").json()
    assert rest["lastAckedId"] == 2
    assert [(m["id"], m["payload"]) for m in rest["messages"]] == [(3, "plain"), (4, [1, 2])]
    # Another group starts from the beginning.
    assert http.get("/api/topics/orders/pull?group=billing&batch=1").json()["messages"][0]["id"] == 1


def test_api_bad_input_is_refused_and_writes_nothing(server, http):
    http.post("/api/topics", json={"name": "orders"})
    http.post("/api/topics/orders/publish", json={"payload": 1})
    cases = [
        # A missing topic is made by a publish that passes its checks, not by one refused.
        (http.post("/api/topics/missing/publish", json={"value": 1}), 400, "invalid_request", "payload"),
        (http.post("/api/topics/orders/publish", json={"value": 1}), 400, "invalid_request", "payload"),
        (http.post("/api/topics/orders/publish", content=b"{not json"), 400, "invalid_request", "JSON"),
        (http.post("/api/topics/orders/publish", json=[1]), 400, "invalid_request", "object"),
        (http.post("/api/topics", json={"name": "bad name"}), 400, "invalid_name", "topic"),
        (http.post("/api/topics", json={"name": 7}), 400, "invalid_request", "name"),
        (
            http.post("/api/topics/orders/ack", json={"group": "g", "lastAckedId": "2"}),
            400,
            "invalid_request",
            "lastAckedId",
        ),
        (http.post("/api/topics/orders/ack", json={"lastAckedId": 1}), 400, "invalid_request", "group"),
        (
            http.post("/api/topics/orders/ack", json={"group": "g", "lastAckedId": 9}),
            400,
            "offset_out_of_range",
            "past the end",
        ),
        (http.get("/api/topics/orders/pull"), 400, "invalid_request", "group"),
        (http.get("/api/topics/orders/pull?group=g&batch=0"), 400, "invalid_request", "batch"),
        (http.get("/api/topics/orders/pull?group=g&batch=x"), 400, "invalid_request", "batch"),
    ]
    for response, status, code, named in cases:
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["code"] == code
        assert named in error["message"]
    with tidelog.open(server.url) as log:
        assert [t.name for t in log.topics()] == ["orders"]
        assert log.describe("orders").records == 1
        assert log.group_offsets("g") == []


def test_curl(server):
    if shutil.which("curl") is None:
        need_service("curl", "the curl command is not installed")

    def curl(*args: str) -> dict:
        out = subprocess.run(
            ["curl", "-sS", "--fail-with-body", *args], capture_output=True, text=True, timeout=30, check=True
        )
        return json.loads(out.stdout)

    base = server.url
    assert curl("-X", "POST", f"{base}/api/topics", "-d", '{"name": "orders"}')["name"] == "orders"
    sent = curl("-X", "POST", f"{base}/api/topics/orders/publish", "-d", '{"payload": {"orderId": 123}}')
    assert sent["id"] == 1
    pulled = curl(f"{base}/api/topics/orders/pull?group=analytics&batch=10")
    assert pulled["messages"][0]["payload"] == {"orderId": 123}
    assert (
        curl("-X", "POST", f"{base}/api/topics/orders/ack", "-d", '{"group": "analytics", "lastAckedId": 1}')[
            "lastAckedId"
        ]
        == 1
    )
    raw = curl("-X", "POST", "--data-binary", "hello raw", f"{base}/publish/orders")
    assert (raw["partition"], raw["offset"]) == (0, 2)
    read = curl(f"{base}/v1/topics/orders/partitions/0/records?after=1")
    assert read["records"][0]["format"] == "bytes"


def test_publish_raw_body(server, http):
    http.post("/v1/topics", json={"name": "blobs", "partitions": 4})
    body = bytes(range(256)) * 3
    r = http.post(
        "/publish/blobs?partition=2", content=body, headers={"content-type": "application/octet-stream"}
    )
    assert r.status_code == 201
    assert (r.json()["partition"], r.json()["offset"]) == (2, 1)
    keyed = http.post("/publish/blobs?key=user-7", content=b"").json()
    with tidelog.open(server.url) as log:
        (msg,) = log.read("blobs", 2)
        assert msg.value == body and msg.format == "bytes"
        (empty,) = log.read("blobs", keyed["partition"])
        assert empty.value == b"" and empty.key == b"user-7"
    assert http.post("/publish/nope?partition=1", content=b"x").status_code == 404  # creates nothing
    assert http.get("/v1/topics/nope").status_code == 404
    assert http.post("/publish/blobs?partition=9", content=b"x").status_code == 404
    assert http.post("/publish/blobs?partition=-1", content=b"x").status_code == 400


def test_api_refuses_a_topic_of_several_partitions_instead_of_reading_one(server, http):
    # The newcomer's case: records spread over 4 partitions, /api pull read partition 0 only.
    assert http.post("/v1/topics", json={"name": "spread", "partitions": 4}).status_code == 201
    for n in range(11):
        http.post("/v1/topics/spread/records", json={"records": [{"value": {"n": n}}]})
    for r in (
        http.get("/api/topics/spread/pull", params={"group": "analytics"}),
        http.post("/api/topics/spread/ack", json={"group": "analytics", "lastAckedId": 1}),
        http.post("/api/topics/spread/publish", json={"payload": 1}),
    ):
        assert r.status_code == 409, r.text
        assert "4 partitions" in r.text and "/v1/groups/{group}/topics/spread/records" in r.text
    assert http.get("/v1/topics/spread").json()["records"] == 11
    assert "analytics" not in http.get("/v1/groups").json()["groups"]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "fanout.db")
        return
    from pgschema import postgres_schema

    with postgres_schema() as url:
        yield url


def test_one_publish_answers_every_waiting_pull_once(serve, store_url):
    """Many long-polls, one group each, woken by one publish: each gets the record
    once, at its own group's offset, and a pull still commits nothing. (The woken
    reads run together, in a few hops: more waiters here than one hop takes.)"""
    server = serve(store_url)
    waiters = 150
    with httpx.Client(base_url=server.url) as http:
        for name in ("fan", "other"):
            http.post("/api/topics", json={"name": name}).raise_for_status()

    async def pull(client: httpx.AsyncClient, topic: str, group: str, batch: int = 1, wait: int = 10) -> dict:
        params = {"group": group, "batch": batch, "wait": wait}
        r = await client.get(f"/api/topics/{topic}/pull", params=params)
        r.raise_for_status()
        return r.json()

    async def woken_by(client_of: dict[str, httpx.AsyncClient], groups: list[str], publish) -> list[dict]:
        polls = [
            asyncio.create_task(pull(client_of[g], "fan", g, batch=1 + i % 3)) for i, g in enumerate(groups)
        ]
        await asyncio.sleep(0.5)  # the long-polls are waiting (one that is not finds the records at once)
        assert not any(p.done() for p in polls)
        (await publish()).raise_for_status()
        return await asyncio.gather(*polls)

    def ids(answer: dict) -> list[int]:
        return [m["id"] for m in answer["messages"]]

    async def flow() -> None:
        # The waiters spread over ten clients: one pool of 160 connections spent most of the
        # test's CPU in httpcore matching each request to a connection (every one looked at).
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(base_url=server.url, timeout=30))
                for _ in range(10)
            ]
            client = clients[0]
            elsewhere = asyncio.create_task(pull(client, "other", "g0", wait=30))
            groups = [f"g{i}" for i in range(waiters)]
            client_of = {g: clients[i % len(clients)] for i, g in enumerate(groups)}
            # Three records in one write: each waiter gets as many as its batch asks for.
            three = {"records": [{"value": n} for n in (1, 2, 3)]}
            first = await woken_by(
                client_of, groups, lambda: client.post("/v1/topics/fan/records", json=three)
            )
            assert [ids(r) for r in first] == [list(range(1, 2 + i % 3)) for i in range(waiters)]
            assert [m["payload"] for m in first[2]["messages"]] == [1, 2, 3]
            assert all(r["lastAckedId"] == 0 for r in first)
            # Nothing was committed: every group finds the same records again.
            again = await asyncio.gather(*(pull(client_of[g], "fan", g, batch=5, wait=0) for g in groups))
            assert all(ids(r) == [1, 2, 3] and r["lastAckedId"] == 0 for r in again)
            # Half the groups ack them and wait for the next: each gets record 4 once, after its offset.
            acked = groups[::2]
            for g in acked:
                r = await client.post("/api/topics/fan/ack", json={"group": g, "lastAckedId": 3})
                assert r.json()["lastAckedId"] == 3
            second = await woken_by(
                client_of, acked, lambda: client.post("/api/topics/fan/publish", json={"payload": {"n": 4}})
            )
            assert all([(m["id"], m["payload"]) for m in r["messages"]] == [(4, {"n": 4})] for r in second)
            assert all(r["lastAckedId"] == 3 for r in second)
            rest = await asyncio.gather(
                *(pull(client_of[g], "fan", g, batch=5, wait=0) for g in groups[1::2])
            )
            assert all(ids(r) == [1, 2, 3, 4] and r["lastAckedId"] == 0 for r in rest)
            # A waiter on another topic slept through both publishes (or timed out with nothing).
            assert not elsewhere.done() or elsewhere.result()["messages"] == []
            elsewhere.cancel()

    asyncio.run(flow())
