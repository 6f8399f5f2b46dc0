"""Over HTTP a how-many parameter above its documented maximum is held to
the maximum, not refused; below 1 or not a number it is still a 400."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from tidelog.server.http.compat import MAX_PULL
from tidelog.server.http.v1 import MAX_READ

N = MAX_READ + 5


@contextlib.contextmanager
def client_on(serve, records: int) -> Iterator[httpx.Client]:
    """A client of a new server whose topic `big` holds `records` records."""
    server = serve()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/v1/topics", json={"name": "big"})
        sent = client.post("/v1/topics/big/records", json={"records": [{"value": i} for i in range(records)]})
        assert sent.status_code == 200
        yield client


@pytest.fixture
def http(serve):
    # More records than a read answers, so that a clamped read shows.
    with client_on(serve, N) as client:
        yield client


@pytest.fixture
def small(serve):
    # A refusal needs a topic, not a full one: filling it cost each test 3 CPU s.
    with client_on(serve, 1) as client:
        yield client


def test_large_limits_are_clamped(http):
    read = http.get("/v1/topics/big/partitions/0/records", params={"limit": 1_000_000})
    assert read.status_code == 200 and len(read.json()["records"]) == MAX_READ
    rest = http.get("/v1/topics/big/partitions/0/records", params={"after": MAX_READ, "limit": 10**12})
    assert [r["offset"] for r in rest.json()["records"]] == list(range(MAX_READ + 1, N + 1))
    group = http.get("/v1/groups/g/topics/big/records", params={"max": MAX_READ * 3})
    assert group.status_code == 200 and len(group.json()["records"]) == MAX_READ
    pull = http.get("/api/topics/big/pull", params={"group": "api", "batch": 50_000})
    assert pull.status_code == 200 and len(pull.json()["messages"]) == MAX_PULL
    received = http.post("/v1/queues/big/receive", params={"max": 10**9})
    assert received.status_code == 200 and len(received.json()["messages"]) == MAX_READ
    joined = http.post("/v1/groups/m/join", json={"topics": ["big"]}).json()
    polled = http.post("/v1/groups/m/poll", json={"member_id": joined["member_id"], "max_messages": 10**9})
    assert polled.status_code == 200 and 0 < len(polled.json()["records"]) <= N


@pytest.mark.parametrize(
    "path, params",
    [
        ("/v1/topics/big/partitions/0/records", {"limit": 0}),
        ("/v1/topics/big/partitions/0/records", {"limit": "many"}),
        ("/v1/groups/g/topics/big/records", {"max": -1}),
        ("/api/topics/big/pull", {"group": "g", "batch": 0}),
    ],
)
def test_a_limit_below_one_or_not_a_number_is_still_refused(small, path, params):
    refused = small.get(path, params=params)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
