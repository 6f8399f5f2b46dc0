"""The console in a real browser (headless Chromium): log in with the token,
see a topic on the overview, browse to a record, watch a lag figure fall
while the page stays put, redrive a dead letter, reset a group's offsets;
bad input shows a message and changes nothing; names and values render as
text. One server and one browser for the module; each test writes its own
topics. Screenshots of each page go to docs/screenshots/."""

from __future__ import annotations

import re

import pytest

import tidelog
from browser import chromium, screenshot
from tidelog.deadletters import dead_letters

TOKEN = "console-test-token"
XSS = "<script>document.title='pwned'</script>"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return str(tmp_path_factory.mktemp("console") / "log.db")


@pytest.fixture(scope="module")
def server(db):
    from tidelog.server.http.thread import ServerThread

    tidelog.open(db).close()
    with ServerThread(db, token=TOKEN, clean_interval=0, console_interval=0.5) as server:
        yield server


@pytest.fixture(scope="module")
def log(db, server):
    with tidelog.open(db) as log:
        yield log


@pytest.fixture(scope="module")
def browser_page(server):
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.dialogs = dialogs
        yield page
        context.close()


@pytest.fixture
def page(browser_page, server):
    """The module's page, logged in (the first test logs in through the form)."""
    browser_page.set_default_timeout(10_000)
    if not any(c["name"] == "tidelog_console" for c in browser_page.context.cookies()):
        browser_page.goto(server.url + "/console/login")
        browser_page.get_by_label("Token").fill(TOKEN)
        browser_page.get_by_role("button", name="Log in").click()
        browser_page.wait_for_url(server.url + "/console/")
    return browser_page


def test_without_the_token_only_the_login_form_is_served(browser_page, server):
    from playwright.sync_api import expect

    page = browser_page
    for path in ("/", "/console/", "/console/topics/x", "/console/api/"):
        page.goto(server.url + path)
        assert page.url == server.url + "/console/login", path
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    screenshot(page, "console-login")
    page.get_by_label("Token").fill("not-it")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".error")).to_have_text("That is not the server's token.")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(server.url + "/console/")
    cookie = next(c for c in page.context.cookies() if c["name"] == "tidelog_console")
    # A session cookie (no expiry), unreadable by scripts, never sent by other sites.
    assert cookie["expires"] == -1 and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert TOKEN not in cookie["value"]
    # The API still wants the header: the cookie opens pages, not /v1.
    assert page.request.get(server.url + "/v1/topics").status == 401


def test_overview_topic_and_record_with_escaping(page, server, log):
    from playwright.sync_api import expect

    log.create_topic("orders", partitions=2)
    producer = log.producer()
    for i in range(5):
        producer.send(
            "orders", {"order": i, "note": XSS}, key=f"{XSS}{i}", headers={"h": XSS}, partition=i % 2
        )
    page.goto(server.url + "/console/")
    link = page.get_by_role("link", name="orders", exact=True)
    expect(link).to_be_visible()
    row = page.locator("tr", has=link)
    expect(row.locator("td").nth(1)).to_have_text("5")  # records
    expect(row.locator("td").nth(3)).not_to_have_text("–")  # an append rate once two samples are in
    # On a narrow window the page does not overflow sideways (wide tables scroll in their box).
    page.set_viewport_size({"width": 390, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, "console-overview-narrow")
    page.set_viewport_size({"width": 1280, "height": 800})
    log.create_topic("late")  # a topic made after the page loaded: the page says so
    expect(page.locator(".banner", has_text="New topics, partitions or groups")).to_be_visible()

    link.click()
    expect(page.get_by_role("heading", name="orders", exact=True)).to_be_visible()
    browse = page.get_by_role("form", name="Browse records")
    browse.get_by_label("Partition").select_option("1")
    browse.get_by_role("button", name="Show").click()
    keys = page.locator("td.key").all_inner_texts()
    assert keys == [f"{XSS}1", f"{XSS}3"]  # text on the page, never markup
    page.wait_for_selector("svg[data-chart=rate] polyline", state="attached")
    screenshot(page, "console-topic")
    page.get_by_role("link", name="2", exact=True).last.click()  # partition 1, offset 2
    page.wait_for_url(re.compile(r"/partitions/1/records/2$"))
    assert '"order": 3' in page.locator("#record-value").inner_text()
    expect(page.locator("#record-key")).to_have_text(f"{XSS}3")
    expect(page.locator("table").first).to_contain_text(XSS)  # the header's value
    screenshot(page, "console-record")
    assert page.title() != "pwned" and page.dialogs == []

    # A key search finds the record wherever it is in the partition.
    page.goto(server.url + "/console/topics/orders?partition=0")
    browse = page.get_by_role("form", name="Browse records")
    browse.get_by_label("Key").fill(f"{XSS}4")
    browse.get_by_role("button", name="Show").click()
    assert page.locator("td.key").all_inner_texts() == [f"{XSS}4"]
    expect(page.locator("main")).to_contain_text("1 found")
    # A name that cannot be a topic is shown as text on the error page.
    response = page.goto(server.url + "/console/topics/%3Cscript%3Ealert(1)")
    assert response.status == 400 and "'<script>alert(1)'" in page.locator(".error").inner_text()
    assert page.dialogs == []


def test_produce_from_the_form(page, server, log):
    from playwright.sync_api import expect

    log.create_topic("tests")
    page.goto(server.url + "/console/topics/tests")
    page.get_by_label("Value", exact=True).fill('{"hello": "console"}')
    page.locator("form[action$='/produce']").get_by_role("textbox", name="Key").fill("k1")
    page.get_by_label("Headers", exact=False).fill("source: console")
    page.get_by_role("button", name="Produce").click()
    expect(page.locator(".notice")).to_have_text("Produced a record to tests/0 at offset 1.")
    got = log.read("tests", 0)
    assert [(m.data, m.key, m.headers) for m in got] == [
        ({"hello": "console"}, b"k1", [("source", b"console")])
    ]
    # Bad JSON: a message on the page, and nothing written.
    page.get_by_label("Value", exact=True).fill("{not json")
    page.get_by_role("button", name="Produce").click()
    expect(page.locator(".error")).to_contain_text("not valid JSON")
    assert len(log.read("tests", 0)) == 1


def test_lag_falls_while_the_page_stays(page, server, log):
    from playwright.sync_api import expect

    log.create_topic("events", partitions=1)
    log.producer().send_batch("events", list(range(30)))
    reader = log.consumer("analytics")
    reader.commit("events", 0, 10)
    page.goto(server.url + "/console/groups/analytics")
    expect(page.locator('[data-live="lag"]')).to_have_text("20")
    # The chart, from the server's samples, shows the lag before the consumer runs ...
    expect(page.locator('[data-chart-note="lag"]')).to_contain_text("peak 20")
    page.evaluate("window.stayed = true")
    for m in reader.fetch("events", 0, 100):
        reader.commit(m)
    expect(page.locator('[data-live="lag"]')).to_have_text("0")
    expect(page.locator('[data-live="events:0:committed"]')).to_have_text("30")
    assert page.evaluate("window.stayed") is True  # refreshed in place, no reload
    expect(page.locator('[data-chart-note="lag"]')).to_contain_text("now 0")  # ... and after
    screenshot(page, "console-group")


def test_reset_offsets_with_confirmation_refused_while_live(page, server, log):
    from playwright.sync_api import expect

    log.create_topic("clicks", partitions=2)
    log.producer().send_batch("clicks", list(range(6)), partition=0)
    log.consumer("dash").commit("clicks", 0, 6)
    page.goto(server.url + "/console/groups/dash")
    page.get_by_role("spinbutton", name="committed offset").fill("2")
    page.get_by_role("radio", name=re.compile("committed offset")).check()
    page.locator("input[name=partition]").fill("0")
    page.get_by_role("button", name="Review the reset").click()
    expect(page.get_by_role("heading", name=re.compile("Reset the offsets of dash"))).to_be_visible()
    expect(page.locator("tbody tr").first).to_have_text(re.compile(r"0\s*6\s*2\s*3"))
    screenshot(page, "console-reset")
    assert log.consumer("dash").committed("clicks", 0) == 6  # nothing yet
    page.get_by_role("button", name="Reset offsets").click()
    expect(page.locator(".notice")).to_contain_text("clicks/0 → 2")
    assert log.consumer("dash").committed("clicks", 0) == 2

    # Past the end: a message, nothing changed.
    page.get_by_role("spinbutton", name="committed offset").fill("99")
    page.get_by_role("radio", name=re.compile("committed offset")).check()
    page.locator("input[name=partition]").fill("0")
    page.get_by_role("button", name="Review the reset").click()
    expect(page.locator(".error")).to_contain_text("past the end")
    # A live member: refused, as Kafka refuses it.
    member = log.consumer("dash", topics=["clicks"], heartbeat_interval=0, member_id="m1")
    try:
        member.poll(timeout=0)
        page.goto(server.url + "/console/groups/dash")
        page.get_by_role("radio", name=re.compile("earliest")).check()
        page.get_by_role("button", name="Review the reset").click()
        expect(page.locator(".error")).to_contain_text("live member")
    finally:
        member.close()
    assert log.consumer("dash").committed("clicks", 0) == 2


def test_redrive_a_dead_letter_back_to_its_topic(page, server, log):
    from playwright.sync_api import expect

    log.create_topic("jobs")
    q = log.queue("jobs", "workers")
    for i in range(3):
        q.send({"job": i}, key=f"j{i}", headers={"trace": f"t{i}"})
    delivered = q.receive(max_messages=3)
    for d in delivered[:2]:
        q.reject(d, reason="handler failed")
    q.ack(delivered[2])
    page.goto(server.url + "/console/")
    expect(page.locator(".banner", has_text="jobs.dlq holds 2 record(s)")).to_be_visible()
    page.locator(".banner a", has_text="jobs.dlq").click()  # the banner leads to the dead letters
    expect(page.get_by_role("heading", name="Dead letters in jobs.dlq")).to_be_visible()
    expect(page.locator('[data-live="dead_letter_records"]')).to_have_text("2")
    page.wait_for_selector("svg[data-chart=depth] polyline", state="attached")
    screenshot(page, "console-queue")
    first = dead_letters(log, "jobs.dlq")[0]
    page.get_by_label(f"redrive the dead letter at offset {first.offset}").check()
    page.get_by_role("button", name="Redrive selected").click()
    # First what it will do, and nothing done yet.
    expect(page.get_by_role("heading", name="Redrive 1 dead letter(s) to jobs?")).to_be_visible()
    expect(page.locator("tbody tr")).to_have_text([re.compile(rf"jobs\.dlq@{first.offset}\s*jobs/0")])
    assert len(dead_letters(log, "jobs.dlq")) == 2
    page.get_by_role("button", name="Redrive", exact=True).click()
    expect(page.locator(".notice")).to_contain_text("Redrove 1 dead letter(s) to jobs: jobs/0@4")
    back = log.read("jobs", 0, after=3)
    assert [(m.data, m.key, dict(m.headers)["trace"]) for m in back] == [
        (first.message.data, first.message.key, dict(first.message.headers)["trace"])
    ]
    assert [d.offset for d in dead_letters(log, "jobs.dlq")] != [first.offset]
    # Seen back in the origin topic, on its page.
    page.goto(server.url + "/console/topics/jobs/partitions/0/records/4")
    assert (
        page.locator("#record-value").inner_text() == '{\n  "job": ' + str(first.message.data["job"]) + "\n}"
    )
    page.goto(server.url + "/console/")  # every kind of row, and a banner, for the docs
    expect(page.locator(".banner", has_text="jobs.dlq holds 1 record(s)")).to_be_visible()
    screenshot(page, "console-overview")

    # Selecting nothing: a message, nothing moved.
    page.goto(server.url + "/console/queues/jobs/workers")
    page.get_by_role("button", name="Redrive selected").click()
    expect(page.locator(".error")).to_have_text("select the dead letters (or choose all)")
    assert len(dead_letters(log, "jobs.dlq")) == 1
    # The origin topic deleted meanwhile: a clear message, the dead letter stays.
    page.goto(server.url + "/console/queues/jobs/workers")
    log.delete_topic("jobs")
    page.get_by_role("button", name="Redrive all to jobs").click()
    expect(page.locator(".error")).to_contain_text("does not exist")
    assert len(dead_letters(log, "jobs.dlq")) == 1


def test_queue_work_from_the_queue_page(page, server, log):
    """Send, see what waits, receive, ack and nack, purge after a confirmation,
    purge dead letters after a confirmation: what `tidelog queues` does."""
    from playwright.sync_api import expect

    log.create_topic("mail")
    q = log.queue("mail", "senders")
    page.goto(server.url + "/console/queues/mail/senders")
    expect(page.get_by_text("Nothing waits.")).to_be_visible()
    send = page.get_by_role("form", name="Send a message")
    for value, priority in (('{"to": "a"}', "0"), ('{"to": "b"}', "7")):
        send.get_by_label("Message").fill(value)
        send.get_by_label("Priority").select_option(priority)
        send.get_by_role("button", name="Send").click()
        expect(page.locator(".notice")).to_contain_text("Sent a message to mail/0 at offset")
    send.get_by_label("Message").fill('{"to": "later"}')
    send.get_by_label("Delay (s)").fill("600")
    send.get_by_role("button", name="Send").click()
    # What a receive takes next, in its order; the delayed one last. Looking leased nothing.
    waiting = page.locator("section[aria-labelledby=waiting-h] tbody tr")
    expect(waiting).to_have_count(3)
    expect(waiting.nth(0)).to_contain_text('"to": "b"')
    expect(waiting.nth(2)).to_contain_text("delayed")
    assert q.stats().in_flight == 0

    receive = page.get_by_role("form", name="Receive messages")
    receive.get_by_label("How many").fill("2")
    receive.get_by_role("button", name="Receive").click()
    received = page.locator("table[aria-labelledby=received-h] tbody tr")
    expect(received).to_have_count(2)
    expect(received.nth(0)).to_contain_text('"to": "b"')
    assert q.stats().in_flight == 2
    screenshot(page, "console-queue-work")
    offsets = [int(t) for t in received.locator("th").all_inner_texts()]
    page.get_by_role("button", name=f"ack offset {offsets[0]}", exact=True).click()
    expect(page.locator(".notice")).to_contain_text(f"Acked: mail/0 offset {offsets[0]}")
    assert q.stats().in_flight == 1
    # The page shows no receipt any more; a nack of the other one goes through the /v1 route's peer.
    receive.get_by_label("How many").fill("1")
    receive.get_by_role("button", name="Receive").click()
    expect(page.get_by_text("Nothing was available to receive.")).to_be_visible()

    # A receive with a bad visibility timeout: a message, nothing leased.
    page.evaluate("document.querySelector('input[name=visibility_timeout]').removeAttribute('min')")
    receive.get_by_label("Visibility timeout (s)").fill("0")
    receive.get_by_role("button", name="Receive").click()
    expect(page.locator(".error")).to_contain_text("visibility_timeout must be more than 0")
    assert q.stats().in_flight == 1

    page.get_by_role("button", name="Purge senders…").click()
    expect(page.get_by_role("heading", name="Purge senders?")).to_be_visible()
    expect(page.locator("main")).to_contain_text("0 available, 1 in flight")
    assert q.stats().delayed == 1  # nothing yet
    page.get_by_role("button", name="Purge senders").click()
    expect(page.locator(".notice")).to_have_text("Purged 2 record(s) of senders on mail.")
    s = q.stats()
    assert (s.available, s.in_flight, s.delayed) == (0, 0, 0)

    # Dead letters purged for good, after a confirmation naming them.
    q.send({"to": "bad"})
    q.reject(q.receive()[0], reason="bounced")
    page.goto(server.url + "/console/queues/mail/senders")
    page.get_by_role("button", name="Purge all").click()
    expect(page.get_by_role("heading", name="Purge 1 dead letter(s) from mail.dlq?")).to_be_visible()
    assert len(dead_letters(log, "mail.dlq")) == 1
    page.get_by_role("button", name="Purge for good").click()
    expect(page.locator(".notice")).to_have_text("Purged 1 dead letter(s) from mail.dlq.")
    assert dead_letters(log, "mail.dlq") == []


def test_a_nack_from_the_page_hands_the_record_out_again(page, server, log):
    from playwright.sync_api import expect

    log.create_topic("tasks")
    q = log.queue("tasks", "runners")
    q.send("t1")
    page.goto(server.url + "/console/queues/tasks/runners")
    page.get_by_role("form", name="Receive messages").get_by_role("button", name="Receive").click()
    page.get_by_role("button", name="nack offset 1").click()
    expect(page.locator(".notice")).to_contain_text("Handed out again (nack): tasks/0 offset 1")
    (again,) = q.receive()
    assert again.delivery_count == 2


def test_the_banner_names_the_group_that_dead_lettered(page, server, log):
    """Two queue groups of one topic share its dead-letter topic: the banner
    names the one whose record it holds (issue 31)."""
    from playwright.sync_api import expect

    log.create_topic("emails")
    log.queue("emails").send("x")  # the topic's default group, "emails"
    mailer = log.queue("emails", "mailer")
    mailer.reject(mailer.receive()[0], reason="bounced")
    log.queue("emails").receive()
    page.goto(server.url + "/console/")
    banner = page.locator(".banner", has_text="emails.dlq holds")
    expect(banner).to_have_text(
        "Dead-letter topic emails.dlq holds 1 record(s) of queue group mailer on emails."
    )
    banner.locator("a").click()
    page.wait_for_url(re.compile(r"/console/queues/emails/mailer"))


def test_charts_have_axes_and_the_rate_matches_its_header(page, server, log):
    from playwright.sync_api import expect

    log.create_topic("ticks")
    page.goto(server.url + "/console/topics/ticks")
    # Samples every 0.5 s: two of the empty topic, then a burst, then quiet samples.
    expect(page.locator('[data-chart-note="rate"]')).to_contain_text("now 0.0/s", timeout=15_000)
    log.producer().send_batch("ticks", list(range(30)))
    expect(page.locator('[data-live="rate"]')).not_to_have_text("0.0/s", timeout=15_000)
    page.wait_for_timeout(1500)  # a few samples after the burst: the rate between samples is 0 by now
    header = page.locator('[data-live="rate"]').inner_text()
    note = page.locator('[data-chart-note="rate"]').inner_text()
    assert header != "0.0/s" and f"now {header}" in note, (header, note)
    # A value axis (0, half, top) and a time axis, beside grid lines.
    expect(page.locator('[data-axis="rate:zero"]')).to_have_text("0")
    top = page.locator('[data-axis="rate:top"]').inner_text()
    assert top.endswith("/s") and float(top[:-2].replace(",", "")) > 0
    expect(page.locator('[data-axis="rate:start"]')).to_have_text(re.compile(r"^−\d+ (s|min)$"))
    expect(page.locator('[data-axis="rate:end"]')).to_have_text("now")
    assert page.locator("svg[data-chart=rate] line.grid").count() == 3


def test_a_queue_pages_charts_share_their_time_axis_and_say_what_it_covers(page, server, log):
    log.create_topic("backlog")
    log.queue("backlog", "drainers").send("x")
    page.goto(server.url + "/console/queues/backlog/drainers")
    # Samples every 0.5 s; the page refreshes every 3 s: wait for a few points of each.
    page.wait_for_function(
        "() => (document.querySelector('svg[data-chart=finished] polyline')?.getAttribute('points') || '')"
        ".split(' ').length >= 4",
        timeout=20_000,
    )
    drawn = page.evaluate(
        """() => ["depth", "finished"].map(name => {
            const svg = document.querySelector(`svg[data-chart=${name}]`);
            return {
                xs: svg.querySelector("polyline").getAttribute("points").split(" ").map(p => parseFloat(p)),
                start: document.querySelector(`[data-axis="${name}:start"]`).textContent,
                caption: svg.closest("figure").querySelector("figcaption").textContent,
            };
        })"""
    )
    depth, finished = drawn
    # One time axis: the finished rate (between two samples) starts a sample after the
    # backlog does, and each of its points sits where the backlog's sample of that moment is.
    assert depth["xs"][0] == 0 and finished["xs"][0] > 0, drawn
    assert all(min(abs(x - d) for d in depth["xs"]) < 0.2 for x in finished["xs"]), drawn
    assert depth["start"] == finished["start"] and re.fullmatch(r"−\d+ s", depth["start"]), drawn
    # The captions say the span the samples cover (seconds here), not the hour they may grow to.
    for chart in drawn:
        assert "hour" not in chart["caption"], drawn
        assert f", the last {chart['start'][1:]}" in chart["caption"], drawn


def test_the_favicon_is_an_icon(browser_page, server):
    response = browser_page.request.get(server.url + "/favicon.ico")  # no token, no session
    assert response.status == 200 and response.headers["content-type"] == "image/svg+xml"
    assert response.body().startswith(b"<svg")


@pytest.fixture
def other_site():
    """Pages served from another port of 127.0.0.1: another origin, but the same site to a
    browser, so the console's SameSite=Strict cookie goes along with their requests."""
    import http.server
    import threading

    pages: dict[str, bytes] = {}

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", pages
    server.shutdown()
    server.server_close()


def test_a_form_posted_from_another_port_is_refused_and_changes_nothing(page, server, log, other_site):
    from playwright.sync_api import expect

    log.create_topic("audit", partitions=1)
    log.producer().send_batch("audit", list(range(4)))
    log.consumer("readers").commit("audit", 0, 4)
    origin, pages = other_site
    # The forged form carries everything the console's reset wants but its page's CSRF token.
    pages["/attack.html"] = (
        f'<form id="f" method="post" action="{server.url}/console/groups/readers/reset">'
        '<input name="topic" value="audit"><input name="to" value="earliest"><input name="confirm" value="yes">'
        '</form><script>document.getElementById("f").submit()</script>'
    ).encode()
    page.goto(origin + "/attack.html")
    page.wait_for_url(re.compile(re.escape(server.url) + "/console/"))  # the form went, with the cookie
    assert log.consumer("readers").committed("audit", 0) == 4  # and reset nothing
    assert page.url == server.url + "/console/groups/readers/reset"
    expect(page.locator(".error")).to_contain_text("not from this server")
    # A script there cannot read the console's pages for their token either (no CORS).
    pages["/read.html"] = (
        f"<script>fetch('{server.url}/console/groups/readers', {{credentials: 'include'}})"
        ".then(r => r.text()).then(t => document.title = 'read ' + t.length)"
        ".catch(e => document.title = 'blocked')</script>"
    ).encode()
    page.goto(origin + "/read.html")
    expect(page).to_have_title("blocked")
    # The console's own form still works, with the session and its token.
    page.goto(server.url + "/console/groups/readers")
    page.get_by_role("radio", name=re.compile("earliest")).check()
    page.get_by_role("button", name="Review the reset").click()
    page.get_by_role("button", name="Reset offsets").click()
    expect(page.locator(".notice")).to_contain_text("audit/0 → 0")


def test_logout_ends_the_session_on_the_server(browser_page, server):
    from playwright.sync_api import expect

    page = browser_page
    page.goto(server.url + "/console/login")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(server.url + "/console/")
    kept = next(c for c in page.context.cookies() if c["name"] == "tidelog_console")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(server.url + "/console/login")
    # The old cookie put back (as a copy of it would be): the server ended that session.
    page.context.add_cookies([kept])
    page.goto(server.url + "/console/")
    assert page.url == server.url + "/console/login"
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.context.clear_cookies()
