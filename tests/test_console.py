"""The console without a browser: its history, its banners, its login, escaping
in the HTML it serves, and the /v1 routes it shares (redrive, reset) on
servers over SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator

import httpx
import pytest

import tidelog
from dumps import dump
from pgschema import postgres_schema
from tidelog.server.http.console.figures import overview
from tidelog.server.http.console.history import History
from tidelog.server.http.console.text import when
from tidelog.server.http.sessions import Sessions


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
        browser.post("/console/logout", data={"csrf": csrf_of(browser.get("/console/").text)})
        assert browser.get("/console/").status_code == 303


def test_the_login_page_offers_no_log_out_and_names_the_token_file(server):
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        form = browser.get("/console/login")
        assert form.status_code == 200 and "Log in" in form.text
        assert "Log out" not in form.text  # no session to end yet
        assert "<code>--token-file</code>" in form.text  # where the docs keep the token
        assert browser.post("/console/login", data={"token": "t0k"}).status_code == 303
        assert "Log out" in browser.get("/console/").text


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


# The console's security: sessions, the login throttle, forms only from its own pages -------------


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


@contextlib.contextmanager
def logged_in(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        assert browser.post("/console/login", data={"token": "t0k"}).status_code == 303
        yield browser


def test_each_login_is_its_own_session_and_logout_revokes_it(server):
    with logged_in(server) as first, logged_in(server) as second:
        cookies = [c.cookies["tidelog_console"] for c in (first, second)]
        assert cookies[0] != cookies[1] and len(cookies[0]) >= 43  # random, 256 bits
        assert "t0k" not in cookies[0]
        kept = dict(first.cookies)
        csrf = csrf_of(first.get("/console/").text)
        assert csrf != csrf_of(second.get("/console/").text)  # a form token per session
        assert first.post("/console/logout", data={"csrf": csrf}).status_code == 303
        # The old cookie, replayed: revoked on the server, not just deleted in the browser.
        with httpx.Client(base_url=server.url, cookies=kept, timeout=30) as replay:
            assert replay.get("/console/").status_code == 303
            assert replay.get("/docs").status_code == 401
        assert second.get("/console/").status_code == 200  # the other session lives on


def test_wrong_tokens_are_throttled_per_address(server, tried):
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        answers = [browser.post("/console/login", data={"token": f"guess-{i}"}) for i in range(300)]
        statuses = [a.status_code for a in answers]
        assert statuses[:10] == [401] * 10  # LOGIN_BURST
        assert set(statuses[10:]) == {429}
        assert 1 <= int(answers[-1].headers["retry-after"]) <= 6
        assert "Too many wrong tokens from your address" in answers[-1].text
        # While throttled even the right token is refused: the limit is on trying.
        assert browser.post("/console/login", data={"token": "t0k"}).status_code == 429
        assert "tidelog_console" not in browser.cookies
    tried(wrong_tokens=300, refused=statuses.count(429))


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://127.0.0.1:1"},  # another port of the same host: the same site to a browser
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"referer": "http://127.0.0.1:1/attack.html"},
    ],
    ids=["other-port", "other-host", "null", "referer"],
)
def test_a_form_from_another_origin_is_refused_and_changes_nothing(server, api, headers):
    api.post("/v1/topics/clicks/records", json={"records": [{"value": i} for i in range(3)]})
    api.post("/v1/groups/dash/commit", json={"topic": "clicks", "partition": 0, "offset": 3})
    with logged_in(server) as browser:
        csrf = csrf_of(browser.get("/console/groups/dash").text)
        form = {"csrf": csrf, "topic": "clicks", "to": "earliest", "confirm": "yes"}
        before = dump(server.target)
        refused = browser.post("/console/groups/dash/reset", data=form, headers=headers)
        assert refused.status_code == 403
        assert "not from this server" in refused.text
        produce = {"csrf": csrf, "value": "1", "format": "json"}
        assert (
            browser.post("/console/topics/clicks/produce", data=produce, headers=headers).status_code == 403
        )
        assert dump(server.target) == before
        # From its own page, the same form works.
        own = {"origin": server.url}
        assert browser.post("/console/groups/dash/reset", data=form, headers=own).status_code == 303
    assert api.get("/v1/groups/dash/topics/clicks/partitions/0").json()["committed"] == 0


@pytest.mark.parametrize("csrf", [None, "", "forged"])
def test_a_form_without_its_pages_csrf_token_is_refused_and_changes_nothing(server, api, csrf):
    api.post("/v1/topics/jobs/records", json={"records": [{"value": 1}]})
    with logged_in(server) as browser:
        before = dump(server.target)
        form = {"value": "2", "format": "json"} | ({} if csrf is None else {"csrf": csrf})
        answer = browser.post("/console/topics/jobs/produce", data=form)
        assert answer.status_code == 403 and "CSRF token is missing or out of date" in answer.text
        assert browser.post("/console/logout", data=form).status_code == 403
        assert dump(server.target) == before
        assert browser.get("/console/").status_code == 200  # the refused logout ended nothing
    # The bearer header needs no CSRF token: no other site can make a browser send it.
    assert api.post("/console/topics/jobs/produce", data={"value": "3", "format": "json"}).status_code == 303


def test_sessions_are_bounded_and_expire():
    now = [0.0]
    sessions = Sessions(max_sessions=3, idle=60, lifetime=300, clock=lambda: now[0])
    ids = [sessions.open() for _ in range(4)]
    assert len(sessions) == 3 and sessions.find(ids[0]) is None  # the least recently used went
    assert sessions.find(ids[1]) is not None
    now[0] = 50
    assert sessions.find(ids[1]) is not None  # used: its idle time starts again
    now[0] = 100
    assert sessions.find(ids[2]) is None and sessions.find(ids[1]) is not None  # 100 s idle; 50 s idle
    now[0] = 301
    assert sessions.find(ids[1]) is None  # past its lifetime, however active
    assert sessions.close(ids[3]) is True and sessions.close(ids[3]) is False  # a logout, once


def test_a_job_queues_page_lists_its_periodic_jobs_with_last_and_next_tick(server):
    # A runner on the server's own log (through the http:// store, with the token).
    url = server.url.replace("http://", "http://:t0k@")
    with tidelog.open(url) as log:
        jobs = tidelog.Jobs(log, queue="cron")
        jobs.periodic("* * * * * *", name="every_second", tz="Europe/Paris")(lambda tick: None)
        jobs.periodic("0 3 * * *", name="nightly", missed="catch_up")(lambda tick: None)
        jobs.tick()  # the scheduler starts: nothing due yet, the ticks topic is made
        deadline = time.monotonic() + 10
        while not jobs.tick():  # the next second's tick
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [last] = [s.last_tick for s in jobs.schedules() if s.name == "every_second"]
    with logged_in(server) as browser:
        page = browser.get("/console/queues/cron/cron").text
    section = page[page.index('id="schedules-h"') :]
    assert "every_second" in section and "<code>* * * * * *</code>" in section and "Europe/Paris" in section
    assert when(last) in section  # its last tick, read from the log
    # The page knows a schedule by its ticks in the log: one that never ticked is not there yet.
    assert "nightly" not in section


def test_a_timestamp_past_year_9999_is_shown_as_sent():
    # A producer may stamp a record up to MAX_TIMESTAMP_MS (year 285,000 and more); the
    # topic page rendered it with datetime and answered 500 (found by test_http_schema).
    from tidelog.bounds import MAX_TIMESTAMP_MS

    assert when(MAX_TIMESTAMP_MS) == f"{MAX_TIMESTAMP_MS} ms"
    assert when(1_000) == "1970-01-01 00:00:01 UTC"
