"""Stream group members over HTTP (as a client in any language would be) and
topic retention settings, on a real server."""

from __future__ import annotations

import base64

import httpx
import pytest

import tidelog


@pytest.fixture
def server(serve):
    return serve()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/v1/topics", json={"name": "orders", "partitions": 4})
        for p in range(4):
            client.post(
                "/v1/topics/orders/records",
                json={"records": [{"value": f"p{p}-{i}", "partition": p} for i in range(3)]},
            )
        yield client


def error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


def call(http, action: str, **body) -> dict:
    r = http.post(f"/v1/groups/g/{action}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def held(view: dict) -> list[tuple[str, int]]:
    return [tuple(tp) for tp in view["assignment"]]


def test_two_http_members_share_the_partitions(http):
    a = call(http, "join", topics=["orders"], member_id="a")
    assert (held(a), a["generation"]) == ([("orders", p) for p in range(4)], 1)
    polled = call(http, "poll", member_id="a", max_messages=100)["records"]
    assert sorted((r["partition"], r["offset"]) for r in polled) == [
        (p, o) for p in range(4) for o in (1, 2, 3)
    ]
    call(http, "commit", member_id="a", topic="orders", partition=0, offset=3)

    b = call(http, "join", topics=["orders"], member_id="b")
    assert held(b) == []  # a has not released anything yet: no partition is held twice
    a = call(http, "heartbeat", member_id="a")
    assert a["revoke"] == [["orders", 2], ["orders", 3]]
    call(http, "commit", member_id="a", topic="orders", partition=2, offset=1)  # before giving it up
    a = call(http, "poll", member_id="a")  # releases what it was told to give up
    assert held(a) == [("orders", 0), ("orders", 1)] and a["revoke"] == []
    b = call(http, "heartbeat", member_id="b")
    assert held(b) == [("orders", 2), ("orders", 3)]
    # b resumes after the committed offsets: 2 and 3 of partition 2, all of partition 3.
    got = call(http, "poll", member_id="b", max_messages=100)["records"]
    assert sorted((r["partition"], r["offset"]) for r in got) == [(2, 2), (2, 3), (3, 1), (3, 2), (3, 3)]
    call(http, "commit", member_id="b")  # everything b's polls returned

    # Fencing: a no longer owns partition 2; an old generation is refused.
    assert (
        error(
            http.post(
                "/v1/groups/g/commit", json={"member_id": "a", "topic": "orders", "partition": 2, "offset": 3}
            ),
            409,
        )["code"]
        == "not_assigned"
    )
    stale = {"member_id": "b", "generation": 1, "topic": "orders", "partition": 3, "offset": 1}
    assert error(http.post("/v1/groups/g/commit", json=stale), 409)["code"] == "stale_generation"

    desc = http.get("/v1/groups/g").json()
    assert sorted(m["member_id"] for m in desc["members"]) == ["a", "b"]
    by_partition = {p["partition"]: (p["owner"], p["committed"], p["lag"]) for p in desc["partitions"]}
    assert by_partition == {0: ("a", 3, 0), 1: ("a", 0, 3), 2: ("b", 3, 0), 3: ("b", 3, 0)}
    metrics = http.get("/metrics").text
    assert 'tidelog_group_partition_owner{group="g",member="b",partition="3",topic="orders"} 1.0' in metrics
    assert 'tidelog_group_members{group="g"} 2.0' in metrics
    assert 'tidelog_group_lag{group="g",partition="1",topic="orders"} 3.0' in metrics

    call(http, "leave", member_id="b")
    assert (
        error(http.post("/v1/groups/g/heartbeat", json={"member_id": "b"}), 409)["code"] == "stale_generation"
    )
    assert held(call(http, "heartbeat", member_id="a")) == [("orders", p) for p in range(4)]


def test_a_python_member_and_an_http_member_in_one_group(server, http):
    log = tidelog.open(server.url)
    try:
        py = log.consumer("g", topics=["orders"], member_id="m1", heartbeat_interval=0)
        assert py.assignment() == [("orders", p) for p in range(4)]
        other = call(http, "join", topics=["orders"], member_id="m2", assignor="range")
        assert held(other) == []
        py.heartbeat()
        py.poll(timeout=0)  # releases 2 and 3 after on_revoke
        assert py.assignment() == [("orders", 0), ("orders", 1)]
        other = call(http, "heartbeat", member_id="m2")
        assert held(other) == [("orders", 2), ("orders", 3)]
        assert {m.member for m in log.group("g").members()} == {"m1", "m2"}
        py.close()
        assert held(call(http, "heartbeat", member_id="m2")) == [("orders", p) for p in range(4)]
    finally:
        log.close()


def test_member_bad_input(http):
    call(http, "join", topics=["orders"], member_id="a")
    cases = [
        ("join", {"topics": []}, 400),
        ("join", {"topics": ["nope"]}, 404),
        ("join", {"topics": ["orders"], "session_timeout": 0}, 400),
        ("join", {"topics": ["orders"], "assignor": "fastest"}, 400),
        ("heartbeat", {"member_id": "stranger"}, 409),
        ("poll", {"member_id": "a", "wait": 31}, 400),
        ("poll", {"member_id": "a", "max_messages": 0}, 400),
        ("release", {"member_id": "a", "partitions": [["orders"]]}, 400),
        ("commit", {"member_id": "a", "topic": "orders"}, 400),
    ]
    for action, body, status in cases:
        assert http.post(f"/v1/groups/g/{action}", json=body).status_code == status, (action, body)
    assert [m["member_id"] for m in http.get("/v1/groups/g").json()["members"]] == ["a"]


def test_topic_settings_and_cleaning(http):
    created = http.post(
        "/v1/topics", json={"name": "events", "config": {"retention_bytes": "250B", "retention_ms": "7d"}}
    ).json()
    assert (created["config"]["retention_bytes"], created["config"]["retention_ms"]) == (250, 604_800_000)
    http.post(
        "/v1/topics/events/records",
        json={"records": [{"value": base64.b64encode(b"x" * 100).decode(), "format": "bytes"}] * 5},
    )
    before = http.get("/v1/topics/events").json()
    bad = [
        ({"retention_ms": "-1h"}, "retention_ms"),
        ({"retention_bytes": "1 parsec"}, "retention_bytes"),
        ({"cleanup_policy": "shred"}, "cleanup_policy"),
        ({"retention": "whenever"}, "retention"),
        ({"ttl": "1d"}, "ttl"),
    ]
    for config, name in bad:
        assert name in error(http.patch("/v1/topics/events", json={"config": config}), 400)["message"]
        assert (
            name in error(http.post("/v1/topics", json={"name": "other", "config": config}), 400)["message"]
        )
    assert http.get("/v1/topics/events").json() == before
    assert error(http.patch("/v1/topics/nope", json={"config": {}}), 404)["code"] == "unknown_topic"

    (report,) = http.post("/v1/topics/events/clean").json()["reports"]
    assert (report["topic"], report["removed"], report["bytes_removed"]) == ("events", 3, 300)
    desc = http.get("/v1/topics/events").json()
    (p,) = desc["offsets"]
    assert (p["first_offset"], p["last_offset"], p["records"], p["bytes"]) == (4, 5, 2, 200)
    assert desc["last_clean"]["removed"] == 3
    metrics = http.get("/metrics").text
    assert 'tidelog_partition_first_offset{partition="0",topic="events"} 4.0' in metrics
    assert 'tidelog_partition_bytes{partition="0",topic="events"} 200.0' in metrics
    assert 'tidelog_last_clean_removed{topic="events"} 3.0' in metrics

    changed = http.patch(
        "/v1/topics/events", json={"config": {"cleanup_policy": "compact", "retention_bytes": None}}
    )
    assert (changed.json()["config"]["cleanup_policy"], changed.json()["config"]["retention_bytes"]) == (
        "compact",
        None,
    )
    reports = http.post("/v1/clean").json()["reports"]
    assert {r["topic"] for r in reports} == {"orders", "events"}
    assert "no record has a key" in next(r for r in reports if r["topic"] == "events")["notes"][0]
