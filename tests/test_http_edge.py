"""Queue receipts, queue age and settling over HTTP (issue 27, findings 11-13),
on a real server with a clock the test moves, over SQLite and PostgreSQL.

The route sweep (test_http_refusals.py) checks every refusal writes nothing;
here the answers themselves: a stale receipt is a 409 (one) or a failure in
place (many), a settle names no group into being, and the queue's age shows
a record nacked again and again, in the stats and in /metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from dumps import dump
from pgschema import postgres_schema
from tidelog.server.http.thread import ServerThread


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


@pytest.fixture(params=["sqlite", "postgres"])
def served(request, tmp_path) -> Iterator[tuple[str, httpx.Client, Clock]]:
    clock = Clock()

    def run(url: str) -> Iterator[tuple[str, httpx.Client, Clock]]:
        with (
            ServerThread(url, clock=clock, clean_interval=0, console_interval=0) as server,
            httpx.Client(base_url=server.url, timeout=10) as client,
        ):
            assert client.post("/v1/topics", json={"name": "jobs"}).status_code == 201
            yield url, client, clock

    if request.param == "sqlite":
        yield from run(str(tmp_path / "edge.db"))
    else:
        with postgres_schema() as url:
            yield from run(url)


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def _delivered(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = _ok(client.post("/v1/queues/jobs/receive", params=params))["messages"]
    return messages


def test_a_stale_receipt_is_refused_alone_and_in_a_batch(served):
    url, client, clock = served
    _ok(client.post("/v1/queues/jobs/messages", json={"records": [{"value": "x"}]}))
    (first,) = _delivered(client, visibility_timeout=10)
    clock.advance(11)
    (second,) = _delivered(client, visibility_timeout=10)
    assert (second["offset"], second["delivery_count"]) == (first["offset"], 2)
    assert _ok(client.post("/v1/queues/jobs/ack", json={"receipt": second["receipt"]})) == {"acked": 1}
    before = dump(url)
    stale = client.post("/v1/queues/jobs/ack", json={"receipt": first["receipt"]})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "lease_lost"
    assert "later delivery" in stale.json()["error"]["message"]
    batch = _ok(client.post("/v1/queues/jobs/ack", json={"receipts": [first["receipt"], second["receipt"]]}))
    assert batch["acked"] == 1  # the final receipt again: done already, a no-op
    assert [(f["index"], f["error"]["code"]) for f in batch["failed"]] == [(0, "lease_lost")]
    assert dump(url) == before


def test_settling_names_no_group_into_being(served):
    url, client, _ = served
    _ok(client.post("/v1/queues/jobs/messages", json={"records": [{"value": "x"}]}))
    (d,) = _delivered(client)
    before = dump(url)
    for route, extra in [("ack", {}), ("nack", {}), ("extend", {"seconds": 1}), ("reject", {})]:
        # the token names group "jobs": presented for another group it is refused before the store
        other = client.post(
            f"/v1/queues/jobs/{route}", params={"group": "other"}, json={"receipt": d["receipt"], **extra}
        )
        assert other.status_code == 409, other.text
        forged = client.post(
            f"/v1/queues/jobs/{route}", params={"group": "nobody"}, json={"receipts": ["x"], **extra}
        )
        assert forged.status_code in (400, 404), forged.text
    assert client.get("/v1/queues/jobs/stats", params={"group": "nobody"}).status_code == 200
    assert dump(url) == before


def test_a_nack_loop_shows_in_the_queue_age(served):
    _, client, clock = served
    _ok(client.post("/v1/queues/jobs/messages", json={"records": [{"value": "poison"}]}))
    for _ in range(4):
        (d,) = _delivered(client)
        clock.advance(3)
        _ok(client.post("/v1/queues/jobs/nack", json={"receipt": d["receipt"]}))  # to the front
    assert _ok(client.get("/v1/queues/jobs/stats"))["oldest_available_age_ms"] == 12_000
    metrics = client.get("/metrics").text
    line = next(
        x for x in metrics.splitlines() if x.startswith("tidelog_queue_oldest_available_age_seconds{")
    )
    assert 'topic="jobs"' in line and line.endswith(" 12.0")
