"""Queue groups over HTTP and the WebSocket subscribe, on a real server with real clients.

Long-polls are given a wait longer than the client's timeout: only a wake-up
(an append, or a record falling due) can answer them in time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading

import httpx
import pytest

websockets = pytest.importorskip("websockets")

WAKE = 25  # long-poll seconds; the client gives up after CLIENT_TIMEOUT
CLIENT_TIMEOUT = 12


@pytest.fixture
def server(serve):
    return serve()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=CLIENT_TIMEOUT) as client:
        client.post("/v1/topics", json={"name": "jobs", "partitions": 2})
        yield client


def error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


def later(seconds: float, fn) -> threading.Timer:
    timer = threading.Timer(seconds, fn)
    timer.start()
    return timer


def receive(http, group=None, **params):
    if group:
        params["group"] = group
    r = http.post("/v1/queues/jobs/receive", params=params)
    assert r.status_code == 200, r.text
    return r.json()["messages"]


def stats(http, group=None):
    return http.get("/v1/queues/jobs/stats", params={"group": group} if group else {}).json()


def test_send_receive_ack_nack_extend_reject(http):
    opened = http.post("/v1/queues/jobs", params={"group": "mailer"}, json={"max_deliveries": 3})
    assert opened.json() == {
        "topic": "jobs",
        "group": "mailer",
        "max_deliveries": 3,
        "dead_letter": "jobs.dlq",
        "ordering": "none",
    }
    ordered = http.post("/v1/queues/jobs", params={"group": "fifo"}, json={"ordering": "key"})
    assert ordered.json()["ordering"] == "key"
    refused = http.post("/v1/queues/jobs", params={"group": "fifo"}, json={"ordering": "none"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "group_conflict"
    bad = http.post("/v1/queues/jobs", params={"group": "other"}, json={"ordering": "fifo"})
    assert bad.status_code == 400
    sent = http.post(
        "/v1/queues/jobs/messages",
        params={"group": "mailer"},
        json={
            "records": [
                {"value": {"n": 1}, "partition": 0},
                {"value": "two", "format": "text", "partition": 0},
            ]
        },
    ).json()
    assert [r["offset"] for r in sent["records"]] == [1, 2]
    http.post(
        "/v1/queues/jobs/messages", json={"records": [{"value": "later", "partition": 1}], "delay": 3600}
    )

    first, second = receive(http, "mailer", max=10)
    assert [(m["value"], m["delivery_count"]) for m in (first, second)] == [({"n": 1}, 1), ("two", 1)]
    assert receive(http, "mailer") == []  # both leased, the third delayed an hour
    assert stats(http, "mailer") | {"oldest_available_age_ms": 0} == {
        "topic": "jobs",
        "group": "mailer",
        "available": 0,
        "in_flight": 2,
        "delayed": 1,
        "dead_lettered": 0,
        "oldest_available_age_ms": 0,
    }
    ext = http.post(
        "/v1/queues/jobs/extend",
        params={"group": "mailer"},
        json={"receipt": first["receipt"], "seconds": 60},
    )
    assert ext.json()["lease_deadline"] > first["lease_deadline"]
    assert http.post(
        "/v1/queues/jobs/ack", params={"group": "mailer"}, json={"receipt": first["receipt"]}
    ).json() == {"acked": 1}
    # Acking twice is a no-op; settling an acked record otherwise is refused.
    assert (
        http.post(
            "/v1/queues/jobs/ack", params={"group": "mailer"}, json={"receipt": first["receipt"]}
        ).status_code
        == 200
    )
    assert (
        error(
            http.post("/v1/queues/jobs/nack", params={"group": "mailer"}, json={"receipt": first["receipt"]}),
            409,
        )["code"]
        == "lease_lost"
    )

    http.post("/v1/queues/jobs/nack", params={"group": "mailer"}, json={"receipt": second["receipt"]})
    (again,) = receive(http, "mailer")
    assert (again["offset"], again["delivery_count"]) == (2, 2)
    dead = http.post(
        "/v1/queues/jobs/reject",
        params={"group": "mailer"},
        json={"receipt": again["receipt"], "reason": "bad"},
    ).json()
    assert dead == {"dead_letter": "jobs.dlq", "offset": 1}
    (record,) = http.get("/v1/topics/jobs.dlq/partitions/0/records").json()["records"]
    headers = {h["name"]: h["value"] for h in record["headers"]}
    assert (record["value"], headers["tidelog-reason"], headers["tidelog-origin-offset"]) == (
        "two",
        "bad",
        "2",
    )
    assert stats(http, "mailer")["dead_lettered"] == 1
    # The default group (the topic's name) is another group: it sees everything.
    assert [m["offset"] for m in receive(http, max=10)] == [1, 2]


def test_nack_back_and_delay_and_batch_ack(http):
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": i, "partition": 0} for i in range(4)]})
    one, two = receive(http, max=2)
    http.post("/v1/queues/jobs/nack", json={"receipt": one["receipt"], "back": True})
    http.post("/v1/queues/jobs/nack", json={"receipt": two["receipt"], "delay": 3600})
    got = receive(http, max=10)
    assert [m["value"] for m in got] == [2, 3, 0]  # 1 waits an hour, 0 went behind
    assert stats(http)["delayed"] == 1
    tokens = [m["receipt"] for m in got] + ["not-a-receipt"]
    result = http.post("/v1/queues/jobs/ack", json={"receipts": tokens}).json()
    assert result["acked"] == 3
    assert [(f["index"], f["error"]["code"]) for f in result["failed"]] == [(3, "lease_lost")]
    assert stats(http)["in_flight"] == 0


def test_nack_and_extend_many_receipts_in_one_request(http):
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": i, "partition": 0} for i in range(5)]})
    got = receive(http, max=5)
    acked = http.post("/v1/queues/jobs/ack", json={"receipts": [got[4]["receipt"]]}).json()
    assert acked == {"acked": 1, "failed": []}
    tokens = [m["receipt"] for m in got]
    extended = http.post(
        "/v1/queues/jobs/extend", json={"receipts": tokens[:2] + [tokens[4]], "seconds": 600}
    ).json()
    assert extended["extended"] == 2 and extended["lease_deadline"] > got[0]["lease_deadline"]
    assert [(f["index"], f["error"]["code"]) for f in extended["failed"]] == [(2, "lease_lost")]
    assert "already done" in extended["failed"][0]["error"]["message"]
    released = http.post(
        "/v1/queues/jobs/nack", json={"receipts": [tokens[2], tokens[0], "forged", tokens[4]], "back": True}
    ).json()
    assert released["released"] == 2
    assert [f["index"] for f in released["failed"]] == [2, 3]
    # 2 and 0 went to the back in the order given; 1 and 3 are still leased
    assert [m["value"] for m in receive(http, max=10)] == [2, 0]
    bad = http.post("/v1/queues/jobs/nack", json={"receipts": [], "back": True})
    assert bad.status_code == 400
    bad = http.post("/v1/queues/jobs/extend", json={"receipts": [tokens[1]], "seconds": -1})
    assert bad.status_code == 400
    assert stats(http)["in_flight"] == 4


def test_send_with_priority(http):
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": "low", "partition": 0}]})
    sent = http.post(
        "/v1/queues/jobs/messages", json={"records": [{"value": "high", "partition": 0}], "priority": 8}
    )
    assert sent.status_code == 200
    for bad in (10, -1, "1", True, 2.5):
        refused = http.post("/v1/queues/jobs/messages", json={"records": [{"value": "x"}], "priority": bad})
        assert refused.status_code == 400 and "priority" in refused.json()["error"]["message"]
    assert [m["value"] for m in receive(http, max=10)] == ["high", "low"]


def test_send_with_a_dedup_id(http):
    body = {"records": [{"value": "pay", "partition": 0}], "dedup_id": "order-42"}
    first = http.post("/v1/queues/jobs/messages", json=body).json()
    again = http.post("/v1/queues/jobs/messages", json=body).json()
    assert again["records"] == first["records"] == [{"partition": 0, "offset": 1}]
    for bad in ("", "x" * 129, 5):
        refused = http.post("/v1/queues/jobs/messages", json={**body, "dedup_id": bad})
        assert refused.status_code == 400 and "dedup_id" in refused.json()["error"]["message"]
    assert [m["value"] for m in receive(http, max=10)] == ["pay"]


def test_forged_receipts_are_refused_and_change_nothing(http):
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": "x", "partition": 0}]})
    (mine,) = receive(http, "a")
    (theirs,) = receive(http, "b")  # the same record, leased to group b
    before = (stats(http, "a"), stats(http, "b"))
    text = base64.urlsafe_b64decode(mine["receipt"] + "==").decode()
    group, topic, partition, offset, count, receipt = text.split(":")
    forged = [
        mine["receipt"],  # a's token, presented as group b
        base64.urlsafe_b64encode(f"b:{topic}:{partition}:{offset}:{count}:{receipt}".encode()).decode(),
        base64.urlsafe_b64encode(f"b:{topic}:{partition}:{offset}:{count}:{'0' * 24}".encode()).decode(),
        "garbage",
        "",
    ]
    for token in forged:
        for action in ("ack", "nack", "extend", "reject"):
            body = {"receipt": token} | ({"seconds": 5} if action == "extend" else {})
            assert error(http.post(f"/v1/queues/jobs/{action}", params={"group": "b"}, json=body), 409)[
                "code"
            ] == ("lease_lost")
    assert (stats(http, "a"), stats(http, "b")) == before
    # A token names its topic too.
    http.post("/v1/topics", json={"name": "other"})
    assert error(
        http.post("/v1/queues/other/ack", params={"group": "a"}, json={"receipt": mine["receipt"]}), 409
    )
    http.post("/v1/queues/jobs/ack", params={"group": "b"}, json={"receipt": theirs["receipt"]})
    assert stats(http, "b")["in_flight"] == 0 and stats(http, "a")["in_flight"] == 1


def test_bad_input_is_refused_and_changes_nothing(http):
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": "x"}]})
    (d,) = receive(http)
    before = stats(http)
    cases = [
        ("/v1/queues/jobs/messages", {}, {"records": [{"value": 1}], "delay": -1}, 400),
        ("/v1/queues/jobs/receive?visibility_timeout=50000", None, None, 400),
        ("/v1/queues/jobs/receive?visibility_timeout=0", None, None, 400),
        ("/v1/queues/jobs/receive?max=0", None, None, 400),
        ("/v1/queues/jobs/nack", {}, {"receipt": d["receipt"], "delay": -5}, 400),
        ("/v1/queues/jobs/nack", {}, {"receipt": d["receipt"], "back": True, "delay": 1}, 400),
        ("/v1/queues/jobs/extend", {}, {"receipt": d["receipt"], "seconds": -1}, 400),
        ("/v1/queues/jobs/extend", {}, {"receipt": d["receipt"]}, 400),
        ("/v1/queues/jobs/ack", {}, {"receipt": d["receipt"], "receipts": [d["receipt"]]}, 400),
        ("/v1/queues/jobs", {}, {"max_deliveries": 0}, 400),
        ("/v1/queues/jobs?group=bad%20name", None, None, 400),
        ("/v1/queues/nope/receive", None, None, 404),
    ]
    for path, _, body, status in cases:
        r = http.post(path, json=body) if body is not None else http.post(path)
        assert r.status_code == status, (path, body, r.text)
    assert stats(http) == before | {"oldest_available_age_ms": stats(http)["oldest_available_age_ms"]}
    assert "nope" not in [t["name"] for t in http.get("/v1/topics").json()["topics"]]


def test_receive_long_poll_wakes_on_an_append_and_when_a_record_falls_due(server, http):
    with httpx.Client(base_url=server.url) as other:
        timer = later(0.3, lambda: other.post("/publish/jobs", content=b"woken"))
        got = receive(http, wait=WAKE)
        timer.join()
    assert [base64.b64decode(m["value"]) for m in got] == [b"woken"]
    # Nack with a delay: the waiting receive wakes when it falls due, with no append.
    http.post("/v1/queues/jobs/nack", json={"receipt": got[0]["receipt"], "delay": 0.5})
    (again,) = receive(http, wait=WAKE)
    assert (again["offset"], again["delivery_count"]) == (got[0]["offset"], 2)


# the WebSocket subscribe ---------------------------------------------------------------


def ws_url(server, topic="jobs", **query) -> str:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return server.url.replace("http", "ws", 1) + f"/subscribe/{topic}" + (f"?{q}" if q else "")


async def pushed(ws) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), CLIENT_TIMEOUT))


def test_websocket_init_ack_nack_back_dack(server, http):
    for value in (b"m1", b"m2", b"m3"):
        http.post("/publish/jobs?partition=0", content=value)

    async def flow():
        async with websockets.connect(ws_url(server)) as ws:
            await ws.send("HELLO")
            assert "INIT" in (await pushed(ws))["error"]
            await ws.send("INIT")
            m = await pushed(ws)
            assert (base64.b64decode(m["msg"]), m["dackCount"]) == (b"m1", 0)
            for bad in ("DACK soon", "DACK -1", "FETCH", "ACK now"):
                await ws.send(bad)
                assert "error" in await pushed(ws)  # and the message stays with us
            await ws.send("NACK")  # again at the front: m1 comes back
            m = await pushed(ws)
            assert (base64.b64decode(m["msg"]), m["deliveryCount"]) == (b"m1", 2)
            await ws.send("DACK 0")  # due now: behind m2 and m3, which waited since before
            assert base64.b64decode((await pushed(ws))["msg"]) == b"m2"
            await ws.send("BACK")  # behind m3 and m1
            assert base64.b64decode((await pushed(ws))["msg"]) == b"m3"
            await ws.send("ACK")
            m = await pushed(ws)
            assert (base64.b64decode(m["msg"]), m["dackCount"]) == (b"m1", 1)
            await ws.send("ACK")
            assert base64.b64decode((await pushed(ws))["msg"]) == b"m2"
            await ws.send("ACK")
            await ws.send("ACK")  # nothing is out now
            assert "no message is out" in (await pushed(ws))["error"]
            # Waiting for the next: a publish wakes it.
            http.post("/publish/jobs?partition=1", content=b"m4")
            assert base64.b64decode((await pushed(ws))["msg"]) == b"m4"
            await ws.send("ACK")

    asyncio.run(flow())
    assert stats(http) | {"oldest_available_age_ms": 0} == {
        "topic": "jobs",
        "group": "jobs",
        "available": 0,
        "in_flight": 0,
        "delayed": 0,
        "dead_lettered": 0,
        "oldest_available_age_ms": 0,
    }


def test_websocket_disconnect_releases_to_the_front(server, http):
    for value in (b"first", b"second"):
        http.post("/publish/jobs?partition=0", content=value)

    async def flow():
        async with websockets.connect(ws_url(server, group="workers")) as ws:
            await ws.send("INIT")
            assert base64.b64decode((await pushed(ws))["msg"]) == b"first"
        # Gone without an answer: "first" is at the front again, delivered a second time.
        async with websockets.connect(ws_url(server, group="workers")) as ws:
            await ws.send("INIT")
            m = await pushed(ws)
            assert (base64.b64decode(m["msg"]), m["deliveryCount"]) == (b"first", 2)
            await ws.send("ACK")
            assert base64.b64decode((await pushed(ws))["msg"]) == b"second"
            await ws.send("ACK")

    asyncio.run(flow())
    assert stats(http, "workers")["in_flight"] == 0


def settled_stats(http, group, until) -> dict:
    """The group's stats once `until(stats)` holds (the server applies a
    disconnect's releases after the client left), or the last ones seen."""
    for _ in range(200):
        got = stats(http, group)
        if until(got):
            return got
        threading.Event().wait(0.05)
    return got


def test_websocket_leases_one_ahead_and_gives_it_back_uncounted(server, http):
    for value in (b"first", b"second", b"third"):
        http.post("/publish/jobs?partition=0", content=value)

    async def hold_first():
        async with websockets.connect(ws_url(server, group="ahead")) as ws:
            await ws.send("INIT")
            assert base64.b64decode((await pushed(ws))["msg"]) == b"first"
            # held, and the next leased ahead: two in flight, never the third
            return settled_stats(http, "ahead", lambda s: s["in_flight"] == 2)

    held = asyncio.run(hold_first())
    assert (held["in_flight"], held["available"]) == (2, 1)
    # The close gives both back: the held one counted, the one ahead not.
    after = settled_stats(http, "ahead", lambda s: s["in_flight"] == 0)
    assert (after["in_flight"], after["available"]) == (0, 3)

    async def again():
        async with websockets.connect(ws_url(server, group="ahead")) as ws:
            await ws.send("INIT")
            got = [await pushed(ws)]
            for _ in range(2):
                await ws.send("ACK")
                got.append(await pushed(ws))
            await ws.send("ACK")
            return [(base64.b64decode(m["msg"]), m["deliveryCount"]) for m in got]

    assert asyncio.run(again()) == [(b"first", 2), (b"second", 1), (b"third", 1)]
    assert settled_stats(http, "ahead", lambda s: s["in_flight"] == 0)["in_flight"] == 0


def test_websocket_acks_and_leases_keep_two_in_flight_a_subscriber(server, http):
    for i in range(8):
        http.post("/publish/jobs?partition=0", content=f"m{i}".encode())

    async def flow():
        seen = []
        async with (
            websockets.connect(ws_url(server, group="limit")) as a,
            websockets.connect(ws_url(server, group="limit")) as b,
        ):
            await a.send("INIT")
            await b.send("INIT")
            for _ in range(3):
                for ws in (a, b):
                    seen.append(base64.b64decode((await pushed(ws))["msg"]))
                    # the ack of the last one and the lease ahead of the next
                    # commit together: at most held + ahead for each
                    assert stats(http, "limit")["in_flight"] <= 4
                    await ws.send("ACK")
        return seen

    seen = asyncio.run(flow())
    assert len(set(seen)) == 6  # each record to one member at a time, none twice
    after = settled_stats(http, "limit", lambda s: s["in_flight"] == 0)
    assert (after["in_flight"], after["available"]) == (0, 2)


def test_websocket_bad_topic_and_token(serve, http):
    async def refused(url):
        async with websockets.connect(url) as ws:
            await ws.send("INIT")
            return await pushed(ws)

    server = serve(token="s3cret")
    assert "does not exist" in asyncio.run(refused(ws_url(server, "nope", token="s3cret")))["error"]
    assert "invalid topic name" in asyncio.run(refused(ws_url(server, "bad%20name", token="s3cret")))["error"]
    with pytest.raises(websockets.exceptions.InvalidStatus):
        asyncio.run(refused(ws_url(server, "nope")))
    with pytest.raises(websockets.exceptions.InvalidStatus):
        asyncio.run(refused(ws_url(server, "nope", token="wrong")))


def test_queue_metrics_show_each_state_and_the_settling(http):
    http.post("/v1/queues/jobs", params={"group": "w"})
    http.post(
        "/v1/queues/jobs/messages", params={"group": "w"}, json={"records": [{"value": i} for i in range(4)]}
    )
    http.post(
        "/v1/queues/jobs/messages", params={"group": "w"}, json={"records": [{"value": "x"}], "delay": 3600}
    )
    got = receive(http, "w", max=3)
    assert len(got) == 3
    assert (
        http.post(
            "/v1/queues/jobs/ack", params={"group": "w"}, json={"receipt": got[0]["receipt"]}
        ).status_code
        == 200
    )
    rejected = http.post("/v1/queues/jobs/reject", params={"group": "w"}, json={"receipt": got[1]["receipt"]})
    assert rejected.status_code == 200, rejected.text
    metrics = http.get("/metrics").text
    for state, n in (("available", 1), ("in_flight", 1), ("delayed", 1), ("dead_lettered", 1)):
        assert f'tidelog_queue_messages{{group="w",state="{state}",topic="jobs"}} {n}.0' in metrics, state
    assert 'tidelog_queue_deliveries_total{group="w",topic="jobs"} 3.0' in metrics
    assert 'tidelog_queue_acks_total{group="w",topic="jobs"} 1.0' in metrics
    assert 'tidelog_queue_dead_letters_total{group="w",topic="jobs"} 1.0' in metrics
    assert 'tidelog_queue_oldest_available_age_seconds{group="w",topic="jobs"}' in metrics


def test_list_peek_in_flight_and_purge(http):
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": i, "partition": 0} for i in range(3)]})
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": "soon"}], "delay": 600, "partition": 1})
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": "urgent"}], "priority": 9})
    receive(http, "workers")
    # A send opens the topic's default group; the receive made "workers".
    both = [{"topic": "jobs", "group": "jobs"}, {"topic": "jobs", "group": "workers"}]
    assert http.get("/v1/queues").json() == {"queues": both}
    assert http.get("/v1/queues", params={"topic": "jobs"}).json()["queues"] == both
    peeked = http.get("/v1/queues/jobs/peek", params={"group": "workers", "max": 10}).json()["messages"]
    assert [(m["value"], m["delayed"], m["delivery_count"]) for m in peeked] == [
        (0, False, 0),
        (1, False, 0),
        (2, False, 0),
        ("soon", True, 0),
    ]
    assert stats(http, "workers")["in_flight"] == 1  # the peek leased nothing
    leases = http.get("/v1/queues/jobs/in-flight", params={"group": "workers"}).json()["leases"]
    assert [(lease["delivery_count"], lease["consumer"]) for lease in leases] == [(1, None)]
    purged = http.post("/v1/queues/jobs/purge", params={"group": "workers"})
    assert purged.json() == {"topic": "jobs", "group": "workers", "purged": 5}
    s = stats(http, "workers")
    assert (s["available"], s["in_flight"], s["delayed"]) == (0, 0, 0)


def test_upkeep_bad_input_is_refused_and_changes_nothing(server, http):
    from dumps import dump

    http.post("/v1/queues/jobs/messages", json={"records": [{"value": "x"}]})
    receive(http, "workers")
    cases = [
        ("POST", "/v1/queues/jobs/purge?group=nosuch", None, 404),
        ("POST", "/v1/queues/nope/purge", None, 404),
        ("POST", "/v1/queues/jobs/purge?group=bad%20name", None, 400),
        ("POST", "/v1/queues/jobs/purge?group=workers", {"all": True}, 400),
        ("GET", "/v1/queues/jobs/peek?group=nosuch", None, 404),
        ("GET", "/v1/queues/jobs/peek?group=workers&max=0", None, 400),
        ("GET", "/v1/queues/jobs/in-flight?group=nosuch", None, 404),
        ("GET", "/v1/queues?topic=nope", None, 404),
        ("POST", "/v1/queues/jobs/receive?group=fresh&visibility_timeout=0", None, 400),
        ("POST", "/v1/topics/jobs/redrive", {"dry_run": True}, 400),
        ("POST", "/v1/topics/jobs/purge", {}, 400),
        ("POST", "/v1/topics/jobs/purge", {"dry_run": "yes"}, 400),
        ("POST", "/v1/topics/nope/purge", {}, 404),
    ]
    before = dump(server.target)
    for method, path, body, status in cases:
        r = http.request(method, path, json=body) if body is not None else http.request(method, path)
        assert r.status_code == status, (method, path, body, r.text)
    assert dump(server.target) == before


def test_dead_letters_purged_after_a_dry_run(http):
    http.post("/v1/queues/jobs/messages", json={"records": [{"value": i, "partition": 0} for i in range(2)]})
    for m in receive(http, "workers", max=2):
        http.post("/v1/queues/jobs/reject", params={"group": "workers"}, json={"receipt": m["receipt"]})
    dry = http.post("/v1/topics/jobs.dlq/redrive", json={"dry_run": True}).json()
    assert dry["dry_run"] is True and [(m["dead_letter_offset"], m["offset"]) for m in dry["moved"]] == [
        (1, 0),
        (2, 0),
    ]
    planned = http.post("/v1/topics/jobs.dlq/purge", json={"dry_run": True}).json()
    assert planned == {"dead_letter": "jobs.dlq", "removed": [1, 2], "skipped": [], "dry_run": True}
    assert http.post("/v1/topics/jobs.dlq/purge", json={"offsets": [2]}).json()["removed"] == [2]
    left = http.get("/v1/topics/jobs.dlq/partitions/0/records").json()["records"]
    assert [r["offset"] for r in left] == [1]
