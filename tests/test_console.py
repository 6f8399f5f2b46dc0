"""The console without a browser: its history, its banners, its login, escaping
in the HTML it serves, and the /v1 routes it shares (redrive, reset) on
servers over SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

import tidelog
from pgschema import postgres_schema
from tidelog.server.http.console.figures import overview
from tidelog.server.http.console.history import History


def test_history_is_bounded_and_reads_rates_and_trends():
    h = History(interval=5, window=60)  # 13 samples a series at most
    for i in range(40):
        h.record(i * 5000, {"end": i * 10, "lag": i % 7})
    points = h.points("end")
    assert len(points) == 13 and points[-1] == (195_000, 390)
    assert h.rate("end", 60_000) == pytest.approx(2.0)  # 10 records every 5 s
    assert h.per_second("end")[-1] == (195_000, pytest.approx(2.0))
    assert h.rising("lag") is True  # the last four: 1, 2, 3, 4
    assert h.rising("lag", samples=5) is False  # 6, 0, 1, 2, 3, 4
    h.record(200_000, {"end": 400, "lag": 5})
    assert h.rising("lag", samples=5) is True  # 0, 1, 2, 3, 4, 5
    h.record(205_000, {"end": 410, "lag": 0})
    assert h.rising("lag") is False
    # A series that stops (a deleted topic) is forgotten after a window.
    h.record(300_000, {"end": 500})
    assert h.points("lag") == [] and h.rate("nothing", 60_000) is None
    with pytest.raises(ValueError):
        History(interval=0)


def test_overview_banners_for_a_growing_lag_and_dead_letters(tmp_path):
    with tidelog.open(str(tmp_path / "b.db")) as log:
        log.create_topic("orders")
        log.producer().send_batch("orders", list(range(5)))
        log.consumer("slow").commit("orders", 0, 1)
        q = log.queue("orders", "workers")
        q.reject(q.receive()[0], "bad")
        history = History(interval=1, window=60)
        quiet = overview(log, history)
        assert [b["text"] for b in quiet.banners] == [
            "Dead-letter topic orders.dlq holds 1 record(s) of queue group workers on orders."
        ]
        for i, lag in enumerate([1, 2, 3, 4]):
            history.record(i * 1000, {"group:slow:lag": lag})
        banners = [b["href"] for b in overview(log, history).banners]
        assert banners == ["/console/groups/slow", "/console/queues/orders/workers#dead-letters"]
        dlq = next(t for t in quiet.topics if t.name == "orders.dlq")
        assert dlq.dead_letters_of == [("orders", "workers")]


@pytest.fixture(params=["sqlite", "postgres"])
def server(request, tmp_path):
    from tidelog.server.http.thread import ServerThread

    if request.param == "sqlite":
        with ServerThread(str(tmp_path / "s.db"), token="t0k", clean_interval=0, console_interval=0) as s:
            yield s
        return
    with postgres_schema() as url, ServerThread(url, token="t0k", clean_interval=0, console_interval=0) as s:
        yield s


@pytest.fixture
def api(server):
    with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer t0k"}, timeout=30) as client:
        yield client


def test_redrive_and_reset_over_v1(api):
    api.post("/v1/topics", json={"name": "jobs", "partitions": 2})
    api.post("/v1/topics/jobs/records", json={"records": [{"value": i, "partition": 0} for i in range(3)]})
    got = api.post("/v1/queues/jobs/receive?group=w&max=3").json()["messages"]
    for d in got[:2]:
        assert api.post("/v1/queues/jobs/reject?group=w", json={"receipt": d["receipt"]}).status_code == 200
    held = api.get("/v1/topics/jobs.dlq/partitions/0/records").json()["records"]
    assert [r["value"] for r in held] == [0, 1]

    for body, status, code in [
        ({"offsets": [0]}, 400, "invalid_request"),
        ({"offsets": [99]}, 400, "invalid_request"),
        ({"offsets": [1], "origin": "other"}, 400, "invalid_request"),
        ({"colour": 1}, 400, "invalid_request"),
    ]:
        answer = api.post("/v1/topics/jobs.dlq/redrive", json=body)
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), body
    assert api.post("/v1/topics/nosuch/redrive").json()["error"]["code"] == "unknown_topic"
    one = api.post("/v1/topics/jobs.dlq/redrive", json={"offsets": [held[1]["offset"]]}).json()
    assert one["moved"] == [{"dead_letter_offset": 2, "topic": "jobs", "partition": 0, "offset": 4}]
    rest = api.post("/v1/topics/jobs.dlq/redrive").json()
    assert [m["offset"] for m in rest["moved"]] == [5] and rest["skipped"] == []
    back = api.get("/v1/topics/jobs/partitions/0/records?after=3").json()["records"]
    assert [r["value"] for r in back] == [1, 0]

    api.post("/v1/groups/g/commit", json={"topic": "jobs", "partition": 0, "offset": 5})
    reset = api.post("/v1/groups/g/reset", json={"topic": "jobs", "to": "offset", "value": 2, "partition": 0})
    assert reset.status_code == 200 and reset.json()["partitions"][0]["committed"] == 2
    past = api.post("/v1/groups/g/reset", json={"topic": "jobs", "to": "offset", "value": 9})
    assert past.json()["error"]["code"] == "offset_out_of_range"
    joined = api.post("/v1/groups/g/join", json={"topics": ["jobs"]}).json()
    live = api.post("/v1/groups/g/reset", json={"topic": "jobs", "to": "earliest"})
    assert (live.status_code, live.json()["error"]["code"]) == (409, "group_active")
    api.post("/v1/groups/g/leave", json={"member_id": joined["member_id"]})
    assert api.get("/v1/groups/g/topics/jobs/partitions/0").json()["committed"] == 2
    assert api.post("/v1/groups/g/reset", json={"topic": "jobs", "to": "latest"}).status_code == 200
    assert api.get("/v1/groups/g/topics/jobs/partitions/0").json()["committed"] == 5


def test_login_cookie_and_escaping(server, api):
    api.post("/v1/topics", json={"name": "t"})
    api.post("/v1/topics/t/records", json={"records": [{"value": "<b>v</b>", "key": "<script>k</script>"}]})
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        first = browser.get("/console/topics/t")
        assert first.status_code == 303 and first.headers["location"] == "/console/login"
        assert browser.get("/console/api/").status_code == 303
        assert browser.post("/console/login", data={"token": "nope"}).status_code == 401
        login = browser.post("/console/login", data={"token": "t0k"})
        assert login.status_code == 303 and "tidelog_console" in browser.cookies
        html = browser.get("/console/topics/t").text
        assert "&lt;script&gt;k&lt;/script&gt;" in html and "<script>k" not in html
        assert "&lt;b&gt;v&lt;/b&gt;" in html
        assert browser.get("/docs").status_code == 200  # the session opens /docs too
        assert browser.get("/v1/topics").status_code == 401  # but not the API
        browser.post("/console/logout")
        assert browser.get("/console/").status_code == 303


def test_record_views_for_json_text_and_bytes(tmp_path):
    from tidelog.server.http.console.text import preview, value_views

    with tidelog.open(str(tmp_path / "v.db")) as log:
        producer = log.producer()
        producer.send("r", {"a": [1, 2]})
        producer.send("r", "plain text")
        producer.send("r", b"\x00\xffbin")
        as_json, as_text, as_bytes = log.read("r", 0)
    assert value_views(as_json)["pretty"] == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert value_views(as_text)["pretty"] == "plain text"
    views = value_views(as_bytes)
    assert "pretty" not in views and views["base64"] == "AP9iaW4="
    assert views["hex"] == "00000000  " + "00 ff 62 69 6e".ljust(47) + "  ..bin"
    assert preview(as_bytes) == "(5 bytes) 00 ff 62 69 6e"
